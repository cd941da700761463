"""molecule/shared/waits.py: a wait checks at once, then ever less often up to its longest pause, and fails
naming what it waited for; seconds_until checks at a steady pace. Time is the test's own clock."""

import pytest
import waits


class Clock:
    """time.monotonic and time.sleep for waits: sleeping moves the clock, and each pause is kept."""

    def __init__(self):
        self.now = 0.0
        self.pauses = []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.pauses.append(round(seconds, 4))
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(waits.time, "monotonic", clock.monotonic)
    monkeypatch.setattr(waits.time, "sleep", clock.sleep)
    return clock


def true_on(call):
    """A check that is true from its CALL-th call on, and says which call that was."""
    calls = []

    def check():
        calls.append(None)
        return len(calls) if len(calls) >= call else None

    return check


def test_the_pauses_grow_by_half_up_to_the_longest(clock):
    assert waits.wait_for("the eighth call", true_on(8)) == 8
    assert clock.pauses == [0.2, 0.3, 0.45, 0.675, 1.0, 1.0, 1.0]


def test_a_true_check_returns_at_once(clock):
    assert waits.wait_for("the first call", true_on(1)) == 1
    assert clock.pauses == []


def test_a_wait_past_its_timeout_fails_naming_what_it_waited_for(clock):
    with pytest.raises(AssertionError, match="the engine to answer: not within 5 s"):
        waits.wait_for("the engine to answer", true_on(1000), timeout=5)
    assert 5 <= clock.now < 7


def test_seconds_until_checks_at_a_steady_pace(clock):
    assert waits.seconds_until("the fifth call", true_on(5), timeout=10, interval=0.5) == 2.0
    assert clock.pauses == [0.5, 0.5, 0.5, 0.5]
