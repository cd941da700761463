"""What the scenarios' tests share: waiting on a condition, with a bound and a clear failure.

The bound guards against a hang, it is not a pace: a loaded machine may take long to get there, and the
test still waits for the condition, never for a time. pyproject.toml puts this directory on pytest's path.
"""

import time


def wait_for(what, check, timeout=30.0, interval=0.2, longest=1.0):
    """Call `check` until it returns something true, and return that; fail naming `what` after `timeout`
    seconds. The pause between checks grows from `interval` by half each time up to `longest`: a check
    reaches into a host, and long waits that checked five times a second spent a good part of a core of two
    on it."""
    deadline = time.monotonic() + timeout
    pause = interval
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(pause)
        pause = min(pause * 1.5, max(interval, longest))


def seconds_until(what, check, timeout, interval=0.2):
    """wait_for at a steady `interval`, returning the seconds it took instead: a measurement as fine as
    its checks."""
    started = time.monotonic()
    wait_for(what, check, timeout, interval, longest=interval)
    return time.monotonic() - started
