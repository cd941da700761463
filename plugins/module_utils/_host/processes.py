"""The engine's processes on a host: the ds4-server processes outside ds4.service (what the shell
installer's `nohup ds4-serve &` left), and the process that listens on the engine's port (`ss`).

Processes are read from /proc (a folder the tests fake); the port's listener from `ss -Hltnp`, run
through a callable the caller gives, so that every fact is testable without Ansible.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

# The unit the engine runs under; an engine process outside it is a leftover of the shell installer.
SERVICE_UNIT = "ds4.service"
SERVER_NAME = "ds4-server"
# The installer's programs: the server, and ds4-serve, the shell script that starts it; and the
# interpreters that may run either as a script (`sh ds4-serve`, a Python stand-in's `python3 ds4-server`).
SERVER_PROGRAMS = (SERVER_NAME, "ds4-serve")
_INTERPRETER_RE = re.compile(r"^(python3[.0-9]*|sh|bash|dash)$")
# A listener's processes in ss's last column: users:(("ds4-server",pid=1234,fd=3),...).
_SS_PID_RE = re.compile(r"\bpid=(\d+),")
_SS_UID_RE = re.compile(r"\buid:(\d+)\b")

# RUN(argv) -> (rc, stdout, stderr), as AnsibleModule.run_command. For the type checker only: the hosts'
# Pythons need not subscript Callable.
if TYPE_CHECKING:
    from collections.abc import Callable

    Run = Callable[[list[str]], tuple[int, str, str]]


def _read_text(path: str) -> str:
    with open(path, errors="replace") as handle:
        return handle.read()


def read_process(proc_root: str, pid: int) -> dict | None:
    """{'pid', 'comm', 'cmdline', 'cgroup', 'in_service'} of one process; None once it is gone."""
    base = os.path.join(proc_root, str(pid))
    try:
        comm = _read_text(os.path.join(base, "comm")).strip()
        with open(os.path.join(base, "cmdline"), "rb") as handle:
            cmdline = [arg.decode(errors="replace") for arg in handle.read().split(b"\0") if arg]
        cgroup = _read_text(os.path.join(base, "cgroup")).strip()
    except OSError:
        return None
    # cgroup v2 has one line `0::/system.slice/ds4.service`; v1 one line per hierarchy.
    in_service = any(line.rsplit("/", 1)[-1] == SERVICE_UNIT for line in cgroup.splitlines())
    return {"pid": pid, "comm": comm, "cmdline": cmdline, "cgroup": cgroup, "in_service": in_service}


def _pids(proc_root: str) -> list[int]:
    try:
        return sorted(int(entry) for entry in os.listdir(proc_root) if entry.isdigit())
    except OSError:
        return []


def interpreter_script(program: str, cmdline: list[str]) -> str | None:
    """The script an interpreter runs (its first argument after its own options), when PROGRAM (a program's
    base name) is one of the interpreters a server may run under; None otherwise, or when it runs code
    given in its arguments (-c, -m) rather than a file. A script started by its `#!/usr/bin/env python3`
    line runs as env for a moment, until env execs the interpreter: env's script is its interpreter's."""
    if program == "env":
        for index, arg in enumerate(cmdline[1:], 1):
            if not (arg.startswith("-") or "=" in arg):
                return interpreter_script(os.path.basename(arg), cmdline[index:])
        return None
    if not _INTERPRETER_RE.match(program):
        return None
    for arg in cmdline[1:]:
        if arg in ("-c", "-m"):
            return None
        if not arg.startswith("-"):
            return arg
    return None


def runs_server(comm: str, cmdline: list[str]) -> bool:
    """Whether a process is ds4-server or ds4-serve: by its name, its program, or the script an
    interpreter runs (the first argument after the interpreter's own options)."""
    if comm in SERVER_PROGRAMS:
        return True
    if not cmdline:
        return False
    program = os.path.basename(cmdline[0])
    if program in SERVER_PROGRAMS:
        return True
    script = interpreter_script(program, cmdline)
    return script is not None and os.path.basename(script) in SERVER_PROGRAMS


def find_stray_servers(proc_root: str = "/proc") -> list[dict]:
    """ds4-server processes that are not ds4.service's: what `nohup ds4-serve &` of the installer left."""
    stray = []
    for pid in _pids(proc_root):
        process = read_process(proc_root, pid)
        if process is None or process["in_service"]:
            continue
        if runs_server(process["comm"], process["cmdline"]):
            stray.append({key: process[key] for key in ("pid", "cmdline", "cgroup")})
    return stray


def ss_command(ss: str, port: int) -> list[str]:
    """Listening TCP sockets on PORT (IPv4 and IPv6), numeric, with their processes, no header."""
    return [ss, "-Hltnp", f"sport = :{port}"]


def parse_ss_listeners(text: str) -> list[int | None]:
    """`ss -Hltnp` lines -> the first process of each listening socket; None where ss shows none (another
    user's process, read without root)."""
    holders: list[int | None] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        match = _SS_PID_RE.search(line)
        holders.append(int(match.group(1)) if match else None)
    return holders


def listener_uids_command(ss: str, port: int) -> list[str]:
    """Listening TCP sockets on PORT with their owners (-e): the owner is shown without the right to
    see the process (another user's, in a container without CAP_SYS_PTRACE)."""
    return [ss, "-Hltne", f"sport = :{port}"]


def parse_listener_uids(text: str) -> set[int]:
    """The users that own the listening sockets of `ss -Hltne` lines: ss prints `uid:N` for any but root."""
    uids = set()
    for line in text.splitlines():
        if line.strip():
            match = _SS_UID_RE.search(line)
            uids.add(int(match.group(1)) if match else 0)
    return uids


def port_holder(port: int, run: Run, ss: str | None, proc_root: str = "/proc") -> tuple[dict, list[str]]:
    """Who listens on TCP PORT: ({'number', 'in_use', 'pid', 'comm', 'cmdline', 'in_service'}, warnings).
    pid is None when the socket's owner cannot be seen; in_use is None when ss cannot say."""
    facts: dict = {
        "number": port,
        "in_use": False,
        "pid": None,
        "comm": None,
        "cmdline": [],
        "in_service": False,
    }
    if ss is None:
        facts["in_use"] = None
        return facts, ["ss is not installed: whether anything listens on the engine's port is unknown"]
    rc, out, err = run(ss_command(ss, port))
    if rc != 0:
        facts["in_use"] = None
        return facts, [f"ss exited {rc}: {(err or out).strip()[:200]}"]
    holders = parse_ss_listeners(out)
    facts["in_use"] = bool(holders)
    for pid in holders:
        process = None if pid is None else read_process(proc_root, pid)
        if process:
            facts.update({key: process[key] for key in ("pid", "comm", "cmdline", "in_service")})
            break
    return facts, []
