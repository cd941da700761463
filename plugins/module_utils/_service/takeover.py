"""Whether a ds4-server running outside ds4.service may be taken over, and how it is said.

The servers are module_utils/_host/processes.py's find_stray_servers (the installer's `nohup ds4-serve &`
and the like), found by name. A name proves nothing: any user can run any program as `ds4-server`. So a
server is taken over (sent SIGTERM) only when the program it runs is one of ours, a release under
ds4_root (`releases/<tag>/ds4-server`), or the shell installer's, built in place in its clone
(`~/code/ds4/ds4-server` of the user who ran Ansible) with its `ds4-serve` launcher beside it or in
`~/.local/bin` (where the launcher lives is a guess: the engine contract does not say). The program is the
process's executable as the kernel names it (/proc/PID/exe), or, for an interpreter (a script server, or
`sh ds4-serve`), the script it runs, resolved from the process's working directory. Any other is refused,
named by pid, program and user, before anything changes.

One whose service (systemd unit) has it as its main process would be started again by that service once
stopped, so it is not taken over either; one in a session, or in ssh.service or cron.service where a nohup
one lands, may be.

A server of another user (neither root nor the installer's, who owns its home) that does not listen on the
engine's port is no concern of the run: it is reported, never stopped, and never stops the run (any
local user could otherwise stop every run by naming a program ds4-server).
"""

from __future__ import annotations

import fnmatch
import os
import pwd

from ansible_collections.ds4.fleet.plugins.module_utils._host.facts import installer_clone
from ansible_collections.ds4.fleet.plugins.module_utils._host.processes import interpreter_script

# What the kernel appends to /proc/PID/exe once the file was removed or replaced (an installer's rebuild
# in place): the process still runs the program that lay at that path.
_DELETED = " (deleted)"


def accepted_programs(root, installer_home):
    """The programs a server outside the unit may run to be taken over, as path patterns (a `*` stands
    for one path component): ours under ROOT (ds4_root), and the shell installer's in INSTALLER_HOME."""
    clone = installer_clone(installer_home)
    return [
        os.path.join(root, "releases", "*", "ds4-server"),
        os.path.join(clone, "ds4-server"),
        os.path.join(clone, "ds4-serve"),
        os.path.join(installer_home, ".local", "bin", "ds4-serve"),
    ]


def matches(path, patterns):
    """Whether PATH is one of PATTERNS, component by component (a `*` never spans a `/`)."""
    parts = path.split("/")
    for pattern in patterns:
        wanted = os.path.normpath(pattern).split("/")
        if len(wanted) == len(parts) and all(map(fnmatch.fnmatchcase, parts, wanted)):
            return True
    return False


def _user(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def program_of(proc_root, pid, cmdline):
    """{'exe', 'program', 'user'} of a running server: its executable as the kernel names it, the file it
    runs (the executable, or an interpreter's script resolved from the process's working directory), and
    the user it runs as. Unknown fields (a process gone meanwhile) are None."""
    base = os.path.join(proc_root, str(pid))
    info = {"exe": None, "program": None, "user": None}
    try:
        info["user"] = _user(os.stat(base).st_uid)
        exe = os.readlink(os.path.join(base, "exe"))
    except OSError:
        return info
    exe = exe[: -len(_DELETED)] if exe.endswith(_DELETED) else exe
    info["exe"] = exe
    script = interpreter_script(os.path.basename(exe), cmdline)
    if script is None:
        info["program"] = exe
        return info
    try:
        cwd = os.readlink(os.path.join(base, "cwd"))
    except OSError:
        return info
    info["program"] = os.path.realpath(os.path.join(cwd, script))
    return info


def service_unit(cgroup):
    """The .service unit a process runs in, from its /proc/PID/cgroup text; None outside any service."""
    for line in cgroup.splitlines():
        unit = line.rsplit("/", 1)[-1]
        if unit.endswith(".service"):
            return unit
    return None


def _line(server):
    return (
        f"{server['pid']} {server['unit'] or '-'} {' '.join(server['cmdline'])} "
        f"(runs {server['program'] or 'an unknown program'} as {server['user'] or 'an unknown user'})"
    )


def _uid_of(proc_root, pid):
    try:
        return os.stat(os.path.join(proc_root, str(pid))).st_uid
    except OSError:
        return None


def takeover(servers, main_pid_of, accepted, proc_root="/proc", port_uids=None, counted_uids=None):
    """{servers, pids, services, refused, lines, ignored} for the stray servers; `main_pid_of(unit)` is the
    unit's main pid; ACCEPTED the programs that may be taken over (accepted_programs()). A server that
    runs as none of COUNTED_UIDS (None: every server counts) nor as a user in PORT_UIDS (the owners of
    the sockets that listen on the engine's port; None when unknown, and then every server counts) is
    only named in `ignored`.

    servers: each stray server with its `unit`, `exe`, `program`, `user` and `accepted`; pids: those that
    may be stopped; services: the units whose main process is one of them; refused: one line per server
    whose program is not accepted, "pid PID: PROGRAM (exe EXE), user USER"; lines: one per server, for
    the messages; ignored: one line per server of another user that the run leaves alone."""
    found, ignored = [], []
    for server in servers:
        if (
            counted_uids is not None
            and port_uids is not None
            and _uid_of(proc_root, server["pid"]) not in set(counted_uids) | set(port_uids)
        ):
            info = program_of(proc_root, server["pid"], server["cmdline"])
            ignored.append(_line(dict(server, unit=service_unit(server["cgroup"]), **info)))
            continue
        info = program_of(proc_root, server["pid"], server["cmdline"])
        ok = info["program"] is not None and matches(info["program"], accepted)
        found.append(dict(server, unit=service_unit(server["cgroup"]), accepted=ok, **info))
    pids = [server["pid"] for server in found]
    units = sorted({server["unit"] for server in found if server["unit"]})
    return {
        "servers": found,
        "pids": [server["pid"] for server in found if server["accepted"]],
        "services": [unit for unit in units if main_pid_of(unit) in pids],
        "refused": [
            f"pid {s['pid']}: {s['program'] or 'unknown program'} (exe {s['exe'] or 'unknown'}), "
            f"user {s['user'] or 'unknown'}"
            for s in found
            if not s["accepted"]
        ],
        "lines": [_line(server) for server in found],
        "ignored": ignored,
    }
