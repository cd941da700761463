"""Who answers on the engine's port: proof that the socket a connection to the engine's address reaches is
ds4.service's own, before anything trusts an answer from it.

The engine's port is unprivileged and free whenever the engine is stopped, loading or restarting (minutes):
any local user may listen there meanwhile. So the readiness probe (ds4-ready), the smoke test, the record
of the last good release and the watchdog first find the listening socket a connection to the engine's
address reaches (/proc/net/tcp and tcp6, readable by anyone: its inode and the uid of the process that
made it) and refuse it unless

- its uid is the engine user's (only root and that user can make such a socket), and,
- where the caller names the unit's main process, that process holds it (its /proc/PID/fd links to the
  socket's inode).

Reading another process's descriptors takes its credentials or CAP_SYS_PTRACE: ds4-ready runs as the
engine user and reads them itself; a root-run module without CAP_SYS_PTRACE (a container) reads them in a
child that takes on each candidate's uid and gid first (`holders_as_owner`), which also names the pid of
a stranger's listener. The watchdog, whose sandbox allows neither, proves by the uid alone.

Standard library only, importing nothing of the collection: it is also installed on each Spark beside
ds4-ready and ds4-watchdog.
"""

from __future__ import annotations

import ipaddress
import json
import os
import pwd
import urllib.parse
from typing import TYPE_CHECKING

# RUN(argv) -> (rc, stdout, stderr), as AnsibleModule.run_command. For the type checker only: the hosts'
# Pythons need not subscript Callable.
if TYPE_CHECKING:
    from collections.abc import Callable

    Run = Callable[[list[str]], tuple[int, str, str]]

LISTEN = "0A"  # the TCP state column of a listening socket in /proc/net/tcp
NET_FILES = ("net/tcp", "net/tcp6")


def parse_listeners(text: str) -> list[dict]:
    """The listening sockets of one /proc/net/tcp or tcp6 text: {'address', 'port', 'uid', 'inode'}."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN:
            continue
        address, _colon, port = fields[1].partition(":")
        raw = bytes.fromhex(address)
        # Each 32-bit word is in the host's order: little-endian on the Sparks (aarch64) and x86_64.
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
        out.append(
            {
                "address": ipaddress.ip_address(raw),
                "port": int(port, 16),
                "uid": int(fields[7]),
                "inode": int(fields[9]),
            }
        )
    return out


def url_address(url: str) -> tuple[str, int]:
    """(host, port) of an engine URL such as http://127.0.0.1:8000 (port 80 when none is given)."""
    parts = urllib.parse.urlsplit(url)
    return parts.hostname or "", parts.port or 80


def target_address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    text = host.strip().strip("[]")
    return ipaddress.ip_address("127.0.0.1" if text.lower() == "localhost" else text)


def reached(listeners: list[dict], host: str, port: int) -> dict | None:
    """The listening socket a connection to host:port reaches, as the kernel picks it: one bound to that
    very address first, then the family's wildcard, then (for IPv4) the IPv6 wildcard, which takes IPv4
    too unless it is IPv6-only (which /proc does not say: taken as reached, to be proven like any)."""
    target = target_address(host)
    on_port = [s for s in listeners if s["port"] == port]
    wanted = [target]
    if target.version == 4:
        wanted += [ipaddress.ip_address("::ffff:" + str(target)), ipaddress.ip_address("0.0.0.0")]
    wanted.append(ipaddress.ip_address("::"))
    for address in wanted:
        for socket in on_port:
            if socket["address"] == address:
                return socket
    return None


def read_listener(host: str, port: int, proc_root: str = "/proc") -> dict | None:
    listeners = []
    for name in NET_FILES:
        try:
            with open(os.path.join(proc_root, name), encoding="ascii") as handle:
                listeners += parse_listeners(handle.read())
        except FileNotFoundError:
            continue  # a host without IPv6
    return reached(listeners, host, port)


def _pids(proc_root: str) -> list[int]:
    return sorted(int(entry) for entry in os.listdir(proc_root) if entry.isdigit())


def holders(inode: int, proc_root: str = "/proc", pids: list[int] | None = None) -> tuple[list[int], int]:
    """(the pids whose descriptors hold socket `inode`, how many processes' descriptors were unreadable)."""
    link = f"socket:[{inode}]"
    found, unreadable = [], 0
    for pid in _pids(proc_root) if pids is None else pids:
        folder = os.path.join(proc_root, str(pid), "fd")
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            continue  # gone
        except PermissionError:
            unreadable += 1
            continue
        for name in names:
            try:
                if os.readlink(os.path.join(folder, name)) == link:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found, unreadable


def credentials(pid: int, proc_root: str = "/proc") -> tuple[int, int] | None:
    """(uid, gid) of a process whose real, effective and saved ids agree; None otherwise or once gone."""
    try:
        with open(os.path.join(proc_root, str(pid), "status"), encoding="utf-8", errors="replace") as handle:
            lines = dict(line.split(":", 1) for line in handle if ":" in line)
    except OSError:
        return None
    uids, gids = lines.get("Uid", "").split()[:3], lines.get("Gid", "").split()[:3]
    if len(set(uids)) != 1 or len(set(gids)) != 1:
        return None
    return int(uids[0]), int(gids[0])


def holders_as_owner(inode: int, uid: int, proc_root: str = "/proc") -> tuple[list[int], int]:
    """holders() of a socket made by `uid`, for a root caller that may lack CAP_SYS_PTRACE: the processes
    of that uid are read by children that each take on one set of their credentials (the kernel lets a
    process read the descriptors of another with its very uids and gids). A caller that is not root, or a
    socket of root's, reads them itself."""
    if os.geteuid() != 0 or uid == 0:
        return holders(inode, proc_root)
    groups: dict[tuple[int, int], list[int]] = {}
    for pid in _pids(proc_root):
        creds = credentials(pid, proc_root)
        if creds and creds[0] == uid:
            groups.setdefault(creds, []).append(pid)
    found, unreadable = [], 0
    for (pid_uid, pid_gid), pids in sorted(groups.items()):
        child_found, child_unreadable = _in_child(pid_uid, pid_gid, inode, proc_root, pids)
        found += child_found
        unreadable += child_unreadable
    return sorted(found), unreadable


def _in_child(uid: int, gid: int, inode: int, proc_root: str, pids: list[int]) -> tuple[list[int], int]:
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's lines run in another process
        status = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            with os.fdopen(write_end, "w") as out:
                json.dump(holders(inode, proc_root, pids), out)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        text = answer.read()
    _pid, status = os.waitpid(child, 0)
    if status != 0 or not text:
        return [], len(pids)
    found, unreadable = json.loads(text)
    return found, unreadable


def user_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def comm(pid: int, proc_root: str = "/proc") -> str:
    try:
        with open(os.path.join(proc_root, str(pid), "comm"), encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return "gone"


def holder_words(pids: list[int], uid: int, proc_root: str = "/proc") -> str:
    """'pid 38 (python3) of user nobody (uid 65534)', or 'a process of user ...' when none was readable."""
    who = ", ".join(f"pid {pid} ({comm(pid, proc_root)})" for pid in pids) or "a process"
    return f"{who} of user {user_name(uid)}"


def problem(
    listener: dict | None,
    host: str,
    port: int,
    uid: int,
    found: list[int] | None = None,
    unreadable: int = 0,
    main_pid: int | None = None,
    proc_root: str = "/proc",
) -> str | None:
    """None when the listener is proven the engine's, else why not, in words that name its holder.

    `found`/`unreadable`: holders() of the listener (None when the caller proves by the uid alone);
    `main_pid`: the unit's main process, which must be among them (None: proven by the uid alone)."""
    where = f"{host}:{port}"
    if listener is None:
        return f"nothing listens on {where}"
    if listener["uid"] != uid:
        return (
            f"{where} is held by {holder_words(found or [], listener['uid'], proc_root)}, "
            f"not by the engine user {user_name(uid)}"
        )
    if main_pid is None or main_pid in (found or []):
        return None
    if not main_pid:
        who = holder_words(found or [], uid, proc_root)
        return f"{where} is held by {who}, while ds4.service runs no engine"
    if not found and unreadable:
        return f"{where}: the engine's descriptors (pid {main_pid}) could not be read to prove it holds it"
    return (
        f"{where} is held by {holder_words(found or [], uid, proc_root)}, not by the engine "
        f"(the unit's main process, pid {main_pid})"
    )


def engine_uid(user: str) -> int:
    return pwd.getpwnam(user).pw_uid


def prove(
    url: str, uid: int, main_pid: int | None = None, proc_root: str = "/proc", as_owner: bool = False
) -> dict:
    """{'problem': None or why not, 'inode': the listener's or None}: whether what listens where `url`
    points is the engine's (see problem()). `as_owner`: read the holders through holders_as_owner (a root
    caller), else directly (the engine user's own probe); by the uid alone when neither main_pid is given
    nor the uid is wrong."""
    host, port = url_address(url)
    listener = read_listener(host, port, proc_root)
    found, unreadable = None, 0
    if listener is not None and (main_pid is not None or listener["uid"] != uid):
        if as_owner:
            found, unreadable = holders_as_owner(listener["inode"], listener["uid"], proc_root)
        else:
            found, unreadable = holders(listener["inode"], proc_root)
    return {
        "problem": problem(listener, host, port, uid, found, unreadable, main_pid, proc_root),
        "inode": listener["inode"] if listener else None,
    }


def main_pid(unit: str, run: Run) -> int:
    """The unit's main process (0 when none runs), from `systemctl show`; `run` is module.run_command. The
    collection's one reader of a unit's MainPID alone (the watchdog and host_status read it among the other
    properties they ask in one call); OSError when systemctl fails."""
    rc, out, err = run(["systemctl", "show", "--property=MainPID", "--value", "--", unit])
    if rc != 0:
        raise OSError(f"systemctl show {unit} failed ({rc}): {err.strip()}")
    pid = out.strip()
    return int(pid) if pid.isdigit() else 0


# The options of the modules that call engine_prover (their documentation: doc fragment ds4.fleet.listener).
LISTENER_ARGS = {
    "engine_user": {"type": "str", "default": "ds4"},
    "unit": {"type": "str", "default": "ds4.service"},
}


def engine_prover(url: str, user: str, unit: str, run: Run) -> Callable[[], dict]:
    """For a root-run module: a callable that proves the engine's listener (prove()) against the unit's main
    process as it is at each call."""

    def prover() -> dict:
        try:
            uid = engine_uid(user)
        except KeyError:
            return {"problem": f"the engine user {user} does not exist", "inode": None}
        return prove(url, uid, main_pid(unit, run), as_owner=True)

    return prover
