"""The locks of a run on a Spark, in files no other user can open, and waits that end naming the holder.

An flock can be taken by anyone who can open the file, even read-only: a lock on a world-readable file (or
on /run itself) lets any local user stall every run. So each lock is a file of root's alone (0600) in a
directory of root's alone (0700, LOCK_DIR), opened without following a link (_spark.no_follow), and a wait
for it is bounded: when it runs out, the error names each process that holds it (pid, user, command),
read from /proc/locks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import time

from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import private_dir

# Emptied by a reboot, like the locks it holds; root's alone.
LOCK_DIR = "/run/ds4-fleet"
POLL = 0.2


class LockBusy(Exception):
    """A lock that another process held for longer than the wait, or that cannot be a lock of root's."""


def open_lock(path):
    """A descriptor of the lock file PATH (made 0600 when missing), never through a link, in a directory of
    the running user alone (made 0700 when missing). Raises LockBusy naming what is wrong."""
    directory = os.path.dirname(path)
    try:
        private = private_dir(directory)
    except OSError as exc:
        raise LockBusy(f"cannot make the lock directory {directory}: {exc}") from exc
    if not private:
        raise LockBusy(
            f"{directory} is not a directory of root's alone (a link, another owner, or group or other "
            f"permissions): no lock is taken there; remove it"
        )
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise LockBusy(f"cannot open the lock {path} (a link?): {exc}") from exc
    os.fchmod(fd, 0o600)
    return fd


def _user(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def describe_process(pid, proc_root="/proc"):
    """{'pid', 'user', 'command'} of process PID, as far as /proc shows it."""
    base = os.path.join(proc_root, str(pid))
    user, command = "?", "?"
    with contextlib.suppress(OSError):
        user = _user(os.stat(base).st_uid)
    with contextlib.suppress(OSError), open(os.path.join(base, "cmdline"), "rb") as handle:
        command = " ".join(arg.decode(errors="replace") for arg in handle.read().split(b"\0") if arg) or "?"
    return {"pid": pid, "user": user, "command": command[:200]}


def holders(fd, proc_root="/proc"):
    """The processes /proc/locks shows holding a lock on the file open at FD (pid, user, command)."""
    st = os.fstat(fd)
    wanted = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    found = []
    try:
        with open(os.path.join(proc_root, "locks")) as handle:
            lines = handle.read().splitlines()
    except OSError:
        return found
    for line in lines:
        fields = line.split()
        # `1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF`; a waiter's line has `->` after the number.
        if "->" in fields or len(fields) < 6:
            continue
        try:
            major, minor, inode = fields[5].split(":")
            where = (int(major, 16), int(minor, 16), int(inode))
            pid = int(fields[4])
        except ValueError:
            continue
        if where == wanted and pid not in [holder["pid"] for holder in found]:
            found.append(describe_process(pid, proc_root))
    return found


def describe_holders(found):
    if not found:
        return "a process this host does not show"
    return ", ".join(f"pid {h['pid']} of user {h['user']} ({h['command']})" for h in found)


def acquire(fd, path, what, wait, clock=time.monotonic, sleep=time.sleep):
    """flock FD exclusively, waiting at most WAIT seconds; then LockBusy naming WHAT and its holders."""
    deadline = clock() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if clock() >= deadline:
                raise LockBusy(
                    f"{what} ({path}) is held by {describe_holders(holders(fd))}; waited {wait:g} s"
                ) from None
            sleep(POLL)


@contextlib.contextmanager
def held(path, what, wait):
    """The lock PATH held for the block (see open_lock and acquire)."""
    fd = open_lock(path)
    try:
        acquire(fd, path, what, wait)
        yield fd
    finally:
        os.close(fd)
