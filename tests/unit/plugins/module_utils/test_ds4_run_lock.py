"""One run per Spark: module_utils/ds4_run_lock.py and the controller side of the action."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
from ansible_collections.ds4.fleet.plugins.action.ds4_run_lock import ended, this_run
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_run_lock import (
    LockError,
    describe,
    read,
    release,
    try_hold,
)

A = {
    "controller": "ops",
    "pid": 100,
    "user": "alice",
    "playbook": "site.yml",
    "since": 1.0,
    "since_text": "t1",
}
B = {
    "controller": "ops",
    "pid": 200,
    "user": "bob",
    "playbook": "upgrade.yml",
    "since": 2.0,
    "since_text": "t2",
}


@pytest.fixture
def lock(tmp_path):
    return str(tmp_path / "ds4-fleet.lock")


def test_the_first_run_holds_and_a_second_is_told_who(lock):
    assert try_hold(lock, A) == (True, A)
    held, other = try_hold(lock, B)
    assert not held and other["user"] == "alice" and other["playbook"] == "site.yml"
    assert describe(other) == "alice on ops (pid 100, site.yml, since t1)"
    assert oct(os.stat(lock).st_mode & 0o777) == "0o644"


def test_the_holder_may_ask_again_and_only_it_releases(lock):
    try_hold(lock, A)
    assert try_hold(lock, dict(A, since=9.0))[0], "the same run (controller and pid) holds it still"
    assert release(lock, B) is False and read(lock)["pid"] == 100
    assert release(lock, A) is True and read(lock) is None
    assert try_hold(lock, B) == (True, B)


def test_a_stale_lock_is_taken_over_only_while_it_is_the_one_recorded(lock):
    try_hold(lock, A)
    assert try_hold(lock, B, stale=dict(A, pid=999))[0] is False, "another stale run: not this lock"
    assert try_hold(lock, B, stale=A) == (True, B)
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
        LockError, match="holds no lock record: 'garbage'; remove it if no run holds this Spark"
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
