"""What the scenarios' tests share: waiting on a condition, with a bound and a clear failure.

The bound guards against a hang, it is not a pace: a loaded machine may take long to get there, and the
test still waits for the condition, never for a time. pyproject.toml puts this directory on pytest's path.
"""

import time


def wait_for(what, check, timeout=30.0, interval=0.2):
    """Call `check` until it returns something true, and return that; fail naming `what` after `timeout`
    seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(interval)


def seconds_until(what, check, timeout, interval=0.2):
    """wait_for, returning the seconds it took instead."""
    started = time.monotonic()
    wait_for(what, check, timeout, interval)
    return time.monotonic() - started
