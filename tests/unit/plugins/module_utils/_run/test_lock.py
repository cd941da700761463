"""One run per Spark: module_utils/_run/lock.py (the lease, on a clock only the test moves) and the
controller side of the action (who has ended, the renewer's loop)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from ansible_collections.ds4.fleet.plugins.action.ds4_run_lock import (
    ended,
    renew_while,
    taken_over_message,
    this_run,
)
from ansible_collections.ds4.fleet.plugins.module_utils._run.lock import (
    LockError,
    checked,
    describe,
    lease_left,
    read,
    release,
    renew,
    try_hold,
)

A = {
    "controller": "ops",
    "pid": 100,
    "user": "alice",
    "playbook": "site.yml",
    "since": 1.0,
    "since_text": "t1",
    "lease": 60,
    "token": "a" * 32,
}
B = {
    "controller": "ops",
    "pid": 200,
    "user": "bob",
    "playbook": "upgrade.yml",
    "since": 2.0,
    "since_text": "t2",
    "lease": 60,
    "token": "b" * 32,
}


def held(lock, holder, now=1000.0, stale=None):
    return try_hold(lock, holder, stale=stale, now=now)[:2]


@pytest.fixture
def lock(tmp_path):
    (tmp_path / "ds4-fleet").mkdir(mode=0o700)
    return str(tmp_path / "ds4-fleet" / "run.lock")


def test_the_first_run_holds_and_a_second_is_told_who(lock):
    assert held(lock, A) == (True, dict(A, renewed=1000.0))
    mine, other = held(lock, B)
    assert not mine and other["user"] == "alice" and other["playbook"] == "site.yml"
    assert describe(other) == "alice on ops (pid 100, site.yml, since t1)"
    assert oct(os.stat(lock).st_mode & 0o777) == "0o600"


def test_the_holder_may_ask_again_and_only_it_releases(lock):
    held(lock, A)
    assert held(lock, dict(A, since=9.0))[0], "the same run (controller and pid) holds it still"
    assert release(lock, B) is False and read(lock)["pid"] == 100
    assert release(lock, A) is True and read(lock) is None
    assert held(lock, B) == (True, dict(B, renewed=1000.0))


def test_a_stale_lock_is_taken_over_only_while_it_is_the_one_recorded(lock):
    held(lock, A)
    assert held(lock, B, stale=dict(A, pid=999))[0] is False, "another stale run: not this lock"
    assert try_hold(lock, B, stale=A, now=1000.0) == (True, dict(B, renewed=1000.0), dict(A, renewed=1000.0))
    assert read(lock)["user"] == "bob"


def test_a_link_at_the_lock_is_never_followed(lock, tmp_path):
    target = tmp_path / "target"
    target.write_text("keep\n")
    os.symlink(target, lock)
    with pytest.raises(LockError, match="is not a lock file this run can read"):
        try_hold(lock, A)
    assert target.read_text() == "keep\n" and os.path.islink(lock)


def test_a_file_that_is_no_lock_record_is_refused_with_what_to_do(lock):
    with open(lock, "w") as handle:
        handle.write("garbage")
    with pytest.raises(
        LockError, match=r"holds no lock record \(Expecting value: .*\); remove it if no run holds this Spark"
    ):
        try_hold(lock, A)


def test_a_run_of_this_controller_whose_process_is_gone_has_ended():
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    gone = int(proc.stdout)
    here = socket.gethostname()
    assert ended({"controller": here, "pid": gone}) is True
    assert ended({"controller": here, "pid": os.getpid()}) is False
    assert ended({"controller": "elsewhere", "pid": gone}) is False, "another controller's run is waited for"


def test_this_run_is_the_ansible_playbook_process():
    run = this_run("site.yml")
    assert run["pid"] == os.getppid() and run["controller"] == socket.gethostname()
    assert run["playbook"] == "site.yml" and run["since_text"]


# --- the lease ---


def test_a_lease_runs_out_a_lease_after_its_last_renewal_and_the_next_run_takes_over_naming_it(lock):
    held(lock, A, now=1000.0)
    assert lease_left(read(lock), 1030.0) == 30.0
    assert renew(lock, A, now=1050.0) is True, "the live run renews"
    assert held(lock, B, now=1100.0)[0] is False, "50 s after the renewal: still A's"
    assert lease_left(read(lock), 1100.0) == 10.0
    # A stops renewing (killed, its controller gone): at 1110 its lease has run out.
    mine, recorded, before = try_hold(lock, B, now=1110.0)
    assert mine and recorded["user"] == "bob" and before == dict(A, renewed=1050.0)
    assert "took this Spark over from alice on ops (pid 100, site.yml, since t1)" in taken_over_message(
        before
    )
    assert "stopped renewing its lease of 60 s (ds4_run_lock_lease)" in taken_over_message(before)
    assert renew(lock, A, now=1111.0) is False, "a renewer of the old run finds the lock no longer its own"
    assert read(lock)["user"] == "bob"


def test_the_holder_s_own_lease_bounds_the_wait_and_a_lock_without_a_lease_never_runs_out(lock):
    held(lock, dict(A, lease=600), now=0.0)
    assert held(lock, dict(B, lease=10), now=599.0)[0] is False
    assert held(lock, dict(B, lease=10), now=600.0)[0] is True
    with open(lock, "w") as handle:
        handle.write('{"controller": "old", "pid": 1, "user": "carol", "playbook": "site.yml", "since": 1}\n')
    assert lease_left(read(lock), 10**9) is None
    assert held(lock, B, now=10**9)[0] is False


def test_a_renewal_keeps_the_record_and_writes_nothing_for_another_run(lock):
    held(lock, A, now=5.0)
    assert renew(lock, B, now=6.0) is False and read(lock)["renewed"] == 5.0
    assert renew(lock, A, now=7.0) is True and read(lock) == dict(A, renewed=7.0)
    release(lock, A)
    assert renew(lock, A, now=8.0) is False and read(lock) is None, "a released lock is never made again"


def test_the_renewer_renews_each_period_while_the_run_lives_and_its_lock_is_held():
    clock, answers, renewals = [], iter([True, None, True, False, True]), []

    def renew_once():
        renewals.append(sum(clock))
        return next(answers)

    renew_while(os.getpid(), renew_once, 15.0, sleep=clock.append)
    assert renewals == [15.0, 30.0, 45.0, 60.0], "a failed renewal (None) is tried again at the next period"
    assert set(clock) == {1.0}, "the run's process is looked at every second"


def test_the_renewer_stops_once_the_run_s_process_is_gone():
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    renewals = []
    slept = []
    renew_while(int(proc.stdout), lambda: renewals.append(1) or True, 15.0, sleep=slept.append)
    assert renewals == [] and slept == [1.0], "gone within a second"


def _flocked(path):
    """An flock held on PATH from another open file, as another user's `flock PATH sleep inf` would."""
    import fcntl

    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_flock_on_the_lock_s_directories_stalls_no_run(lock):
    # Anyone may open /run and flock it: the run must not wait on a flock of a directory.
    import threading

    outcome = []
    holder_fds = [_flocked(os.path.dirname(lock)), _flocked(os.path.dirname(os.path.dirname(lock)))]
    worker = threading.Thread(target=lambda: outcome.append(held(lock, A)), daemon=True)
    try:
        worker.start()
        worker.join(30)
        assert not worker.is_alive(), "the run waited on an flock of the lock's directory"
    finally:
        for fd in holder_fds:
            os.close(fd)
        worker.join(30)
    assert outcome == [(True, dict(A, renewed=1000.0))]


def test_the_lock_and_its_guard_are_root_s_alone_in_a_directory_of_root_s_alone(lock):
    held(lock, A)
    directory = os.path.dirname(lock)
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"
    assert oct(os.stat(lock).st_mode & 0o777) == "0o600"
    assert oct(os.stat(lock + ".guard").st_mode & 0o777) == "0o600"


def test_a_lock_directory_others_may_enter_is_refused(tmp_path):
    directory = tmp_path / "open"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    with pytest.raises(LockError, match="not a directory of root's alone"):
        held(str(directory / "run.lock"), A)


def test_a_guard_held_too_long_fails_naming_its_holder(lock, monkeypatch):
    from ansible_collections.ds4.fleet.plugins.module_utils._run import lock as ds4_run_lock

    held(lock, A)
    monkeypatch.setattr(ds4_run_lock, "GUARD_WAIT", 0.3)
    holder_fd = _flocked(lock + ".guard")
    try:
        with pytest.raises(LockError, match=rf"held by pid {os.getpid()} of user \S+ \(.*python"):
            held(lock, B)
    finally:
        os.close(holder_fd)


# --- the run's token, and the check before each destructive step (issue 40, point 5e) ---


def test_each_run_has_a_random_token_of_its_own():
    first, second = this_run("site.yml")["token"], this_run("site.yml")["token"]
    assert first != second and len(first) >= 32
    assert this_run("site.yml", token=first)["token"] == first, "the run's later tasks carry its token"


def test_the_same_controller_name_and_pid_with_another_token_is_another_run(lock):
    # Two controllers of one name (two AWX job containers, each ansible-playbook its pid 1... of the same
    # number): the host name and pid do not tell them apart, the token does.
    held(lock, A)
    twin = dict(A, token="c" * 32)
    assert held(lock, twin)[0] is False
    assert renew(lock, twin, now=1001.0) is False and release(lock, twin) is False
    with pytest.raises(LockError, match="alice on ops"):
        checked(lock, twin)


def test_a_suspended_run_whose_lease_was_taken_over_does_not_act(lock):
    held(lock, A, now=1000.0)
    assert checked(lock, A) == dict(A, renewed=1000.0), "the holder goes on"
    # A's controller is suspended: no renewal; B takes the Spark over once the lease has run out.
    assert try_hold(lock, B, now=1061.0)[0] is True
    # A wakes up between two of its steps: the next destructive one is refused, naming B.
    with pytest.raises(LockError, match=r"bob on ops \(pid 200, upgrade.yml.*took this Spark over"):
        checked(lock, A)


def test_a_lease_edited_to_another_run_between_steps_stops_the_next_step(lock):
    held(lock, A, now=1000.0)
    with open(lock, "w") as handle:
        handle.write(json.dumps(dict(B, renewed=1000.0)) + "\n")
    with pytest.raises(LockError, match="bob on ops"):
        checked(lock, A)


def test_a_role_run_alone_with_no_lock_on_the_spark_goes_on(lock):
    assert checked(lock, A) is None
