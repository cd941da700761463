"""What the build user may leave behind, and clearing it: the engine's code keeps nothing after a build.

The engine's Makefile runs as the build user (ds4_release_build). A malicious release could leave, beside
its own tree (sealed to root afterwards), a process, a cron or at job that rewrites the next release while
it builds, or files in the directories every user may write. The role denies the account cron and at
(/etc/cron.deny, /etc/at.deny); here, before and after every build, whatever of it remains goes: its
processes are ended (ds4_release_build.end_processes_of), its crontab and at jobs removed from the spools,
and its entries in the shared writable directories removed, walked without following a link
(_spark.no_follow.remove). Before a build, what was found is named: the previous build left it.
"""

from __future__ import annotations

import contextlib
import os

from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import remove

# Debian's spools: one crontab per user by name, at jobs owned by the user who queued them.
CRON_SPOOL = "/var/spool/cron/crontabs"
AT_SPOOL = "/var/spool/cron/atjobs"
# Where any user may make files outside its home (the build user has none).
SHARED_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")
PROC = "/proc"


def processes_of(uid, proc_root=None):
    """'pid PID (command)' of each live process whose real or effective user is UID."""
    proc_root = proc_root or PROC
    found = []
    for entry in sorted(os.listdir(proc_root), key=lambda name: (len(name), name)):
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc_root, entry, "status")) as handle:
                status = dict(line.split(":", 1) for line in handle.read().splitlines() if ":" in line)
            with open(os.path.join(proc_root, entry, "cmdline"), "rb") as handle:
                command = b" ".join(handle.read().split(b"\0")).decode(errors="replace").strip()
        except OSError:
            continue
        uids = status.get("Uid", "").split()
        if status.get("State", "").strip().startswith(("Z", "X")) or str(uid) not in uids[:2]:
            continue
        found.append(f"pid {entry} ({command[:120] or '?'})")
    return found


def files_of(name, uid):
    """The crontab, at jobs and shared-directory entries of the user NAME (UID): paths."""
    found = []
    crontab = os.path.join(CRON_SPOOL, name)
    if os.path.lexists(crontab):
        found.append(crontab)
    for directory in (AT_SPOOL, *SHARED_DIRS):
        with contextlib.suppress(OSError):
            for entry in sorted(os.listdir(directory)):
                path = os.path.join(directory, entry)
                with contextlib.suppress(OSError):
                    if os.lstat(path).st_uid == uid and path not in found:
                        found.append(path)
    return found


def clear(account, end_processes):
    """End ACCOUNT's processes (END_PROCESSES(account)) and remove its jobs and files; what was found,
    one line each (empty when nothing was left)."""
    found = processes_of(account.uid)
    end_processes(account)
    paths = files_of(account.name, account.uid)
    for path in paths:
        remove(path)
    return found + paths
