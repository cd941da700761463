"""One ds4-fleet run per Spark at a time: a lock file that names its holder.

Two runs on one Spark (two operators, a timer and a person) would each plan the prune, the cleanup and the
switch from what they saw: one could remove the release the other just made current. So a run holds
the Spark from its first change to its end. Ansible runs each task in a process of its own, so no process
can hold a kernel lock for the run: the lock is a file, created atomically (O_EXCL, never through a
link), that says who holds it:

    {"controller": "ops-laptop", "pid": 4242, "user": "alice", "playbook": "site.yml", "since": 1764590000.0}

It lives in /run, which a reboot empties. A holder that ended without releasing it (a failed or killed
run) is found out on the controller that ran it (its pid is gone) and its lock is taken over; a lock held
from another controller is waited for, then refused, naming the holder.
"""

from __future__ import annotations

import contextlib
import json
import os

from ansible_collections.ds4.fleet.plugins.module_utils.ds4_no_follow import read_text

FIELDS = ("controller", "pid", "user", "playbook", "since")


class LockError(Exception):
    """The lock file cannot be read or written as a lock (a link, a directory, garbage)."""


def describe(holder):
    """The holder as a message names it."""
    return (
        f"{holder.get('user', '?')} on {holder.get('controller', '?')} (pid {holder.get('pid', '?')}, "
        f"{holder.get('playbook', '?')}, since {holder.get('since_text') or holder.get('since', '?')})"
    )


def same(a, b):
    """Whether two holder records are the same run: the same ansible-playbook process of one controller."""
    return all(a.get(key) == b.get(key) for key in ("controller", "pid"))


def read(path):
    """The holder recorded at PATH, or None when there is no lock."""
    try:
        text = read_text(path)
    except OSError as exc:
        raise LockError(f"{path} is not a lock file this run can read (a link?): {exc}") from exc
    if text is None:
        return None
    try:
        holder = json.loads(text)
    except ValueError:
        holder = None
    if not isinstance(holder, dict):
        raise LockError(f"{path} holds no lock record: {text[:200]!r}; remove it if no run holds this Spark")
    return holder


def _create(path, holder):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({key: holder.get(key) for key in (*FIELDS, "since_text")}, handle, sort_keys=True)
        handle.write("\n")


def try_hold(path, holder, stale=None):
    """Take the lock for HOLDER. Returns (True, holder) when this run holds it (now or already), else
    (False, the other holder). STALE, a holder record, is taken over when it is still the one recorded."""
    try:
        _create(path, holder)
        return True, holder
    except FileExistsError:
        pass
    except OSError as exc:
        raise LockError(f"cannot create the lock {path}: {exc}") from exc
    current = read(path)
    if current is None:  # released meanwhile
        return try_hold(path, holder)
    if same(current, holder):
        return True, current
    if stale is not None and same(current, stale):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return try_hold(path, holder)
    return False, current


def release(path, holder):
    """Remove the lock if HOLDER holds it; True when removed. Another run's lock is left alone."""
    current = read(path)
    if current is None or not same(current, holder):
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return True
