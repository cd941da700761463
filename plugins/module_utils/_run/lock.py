"""One ds4-fleet run per Spark at a time: a lease on the Spark, in a lock file that names its holder.

Two runs on one Spark (two operators, a timer and a person) would each plan the prune, the cleanup and the
switch from what they saw: one could remove the release the other just made current. So a run holds
the Spark from its first change to its end. Ansible runs each task in a process of its own, so no process
can hold a kernel lock for the run: the lock is a file that says who holds it, and until when:

    {"controller": "ops-laptop", "pid": 4242, "user": "alice", "playbook": "site.yml", "since": 1764590000.0,
     "lease": 300, "renewed": 81234.5, "token": "<32 random hex digits, the run's own>"}

The token tells this run from any other (issue 40): only a record with the run's own token is the run's.
The file is root's alone, so no other user reads it; the run asks again (`checked`) before each step that
destroys, so a run whose lease was taken over while its controller was suspended stops there.

It is a lease: the run that holds it renews it (the action ds4_run_lock leaves a renewer on the controller
for that), and a holder that stops renewing (killed, its controller or container gone) loses it `lease`
seconds after its last renewal; the next run then takes the Spark over, naming that holder. `renewed` is
read on the Spark's own CLOCK_BOOTTIME, which no controller's clock, time zone or NTP step moves and which
counts suspended time too; the file lives in /run, which a reboot (the only thing that resets that clock)
empties. A record without a lease (written before leases) never runs out.

A holder that ended without releasing it is also found out at once on the controller that ran it (its pid
is gone) and its lock is taken over without waiting for the lease.

Every change of the file (create, renew, take over, release) happens under an flock of a guard beside it,
so two runs that find the same lease run out cannot both take it; a new record is written whole beside
the file and renamed over it (_spark.no_follow.replace_file), so a reader never sees half of it. The file,
its guard and their directory are root's alone (_common.flock: no other user can open them to hold the guard,
as anyone could hold /run), and a guard held longer than GUARD_WAIT fails naming its holder.
"""

from __future__ import annotations

import contextlib
import json
import os
import time

from ansible_collections.ds4.fleet.plugins.module_utils._common.flock import LOCK_DIR, LockBusy, held
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import read_object, replace_file

PATH = os.path.join(LOCK_DIR, "run.lock")
# The guard is held for the few calls of one change: a longer hold is no run of ours.
GUARD_WAIT = 60.0
FIELDS = ("controller", "pid", "user", "playbook", "since", "since_text", "lease", "token")


class LockError(Exception):
    """The lock file cannot be read or written as a lock (a link, a directory, garbage)."""


def clock():
    """The Spark's clock for leases: seconds since boot, suspended time included."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def describe(holder):
    """The holder as a message names it."""
    return (
        f"{holder.get('user', '?')} on {holder.get('controller', '?')} (pid {holder.get('pid', '?')}, "
        f"{holder.get('playbook', '?')}, since {holder.get('since_text') or holder.get('since', '?')})"
    )


def same_process(a, b):
    """Whether two holder records name the same ansible-playbook process of one controller (by its name)."""
    return all(a.get(key) == b.get(key) for key in ("controller", "pid"))


def same(a, b):
    """Whether two holder records are the same run: the same process and the run's random token. The host
    name and pid alone do not tell two controllers of one name apart (two job containers, each its own
    pid numbers), nor a run from one that took its place."""
    return same_process(a, b) and a.get("token") == b.get("token")


def lease_left(holder, now):
    """Seconds until HOLDER's lease runs out at NOW (0 once it has, never below), or None without a lease."""
    lease, renewed = holder.get("lease"), holder.get("renewed")
    if not isinstance(lease, (int, float)) or not isinstance(renewed, (int, float)):
        return None
    return max(0.0, renewed + lease - now)


def read(path):
    """The holder recorded at PATH, or None when there is no lock."""
    try:
        return read_object(path)
    except OSError as exc:
        raise LockError(f"{path} is not a lock file this run can read (a link?): {exc}") from exc
    except ValueError as exc:
        raise LockError(f"{path} holds no lock record ({exc}); remove it if no run holds this Spark") from exc


@contextlib.contextmanager
def _guarded(path):
    """PATH's guard flocked for one change of the lock: held for the few calls of that change only."""
    try:
        with held(path + ".guard", "the guard of the run lock", GUARD_WAIT):
            yield
    except LockBusy as exc:
        raise LockError(str(exc)) from exc


def _write(path, holder, now):
    record = {key: holder.get(key) for key in FIELDS}
    record["renewed"] = now
    try:
        replace_file(path, (json.dumps(record, sort_keys=True) + "\n").encode(), 0o600, suffix=".new")
    except OSError as exc:
        raise LockError(f"cannot write the lock {path}: {exc}") from exc
    return record


def try_hold(path, holder, stale=None, now=None):
    """Take the lock for HOLDER, or renew it when HOLDER holds it already.

    Returns (held, the holder recorded now, the holder recorded before or None). HOLDER takes the lock over
    from a holder whose lease has run out at NOW, or from STALE (a holder the controller found ended)
    while it is still the one recorded.
    """
    now = clock() if now is None else now
    with _guarded(path):
        before = read(path)
        if (
            before is None
            or same(before, holder)
            or lease_left(before, now) == 0
            or (stale is not None and same_process(before, stale))
        ):
            return True, _write(path, holder, now), before
        return False, before, before


def renew(path, holder, now=None):
    """Renew HOLDER's lease; False (and nothing written) when HOLDER no longer holds the lock."""
    now = clock() if now is None else now
    with _guarded(path):
        current = read(path)
        if current is None or not same(current, holder):
            return False
        _write(path, dict(current, lease=holder.get("lease", current.get("lease"))), now)
        return True


def release(path, holder):
    """Remove the lock if HOLDER holds it; True when removed. Another run's lock is left alone."""
    with _guarded(path):
        current = read(path)
        if current is None or not same(current, holder):
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return True


def checked(path, holder):
    """HOLDER's record when it holds the lock still, None when no run holds it (a role run alone); raises
    LockError naming the run that holds it otherwise. Asked before each step that destroys (the switch, the
    weights' cleanup, the removal): a run whose controller was suspended past its lease, and whose Spark
    another run took over meanwhile, stops there instead of acting at once with the new holder."""
    # No guard: a record is renamed in whole, so a read sees one or the other, and a check run (or a role
    # run alone, with no lock directory yet) makes nothing.
    current = read(path)
    if current is None or same(current, holder):
        return current
    raise LockError(
        f"this run no longer holds this Spark: {describe(current)} took this Spark over (this run's lease "
        f"ran out while it was stopped, a controller suspended or cut off for longer than "
        f"ds4_run_lock_lease); nothing more is changed here by this run"
    )
