"""The engine gate: the gateways (and ds4_firewall_allow) are admitted to the engine's port only while
ds4.service's own engine holds it.

The engine firewall (role ds4_firewall, table inet ds4_engine) accepts the gateways' packets to the engine's
port from two nftables sets, held_v4 and held_v6, which the rules file declares empty. Whoever listens on
the port receives what the firewall lets through, and the port is unprivileged and free whenever the engine
is stopped, loading its model or restarting (minutes): a local user listening there meanwhile would answer
the gateway's health check and receive every client's prompt. So the sets hold the allowed addresses only
while the listener a connection to `ds4_host`:`ds4_port` reaches is proven to be the engine's
(`proof`: made by the engine user, held by the unit's main process, every holder in the main process's
cgroup) and no other user listens on the port at any address of the family (IPv4, IPv6) the engine listens
in; only that family's set is filled. The root-run script ds4-engine-gate runs it:

- `close` (ds4.service's ExecStartPre= and ExecStopPost=): empty the sets;
- `open` (ExecStartPost=, after the readiness probe): fill them once the proof holds, else empty them and
  fail the start;
- `load` (ds4-firewall.service's start and reload, nftables.service's drop-in): the rules file and the
  sets as the proof finds them now, in one nft transaction, so that no moment has the rules loaded open.

Each runs under one lock (LOCK_PATH, root's alone, opened without following a link), so that a `close`
after the engine exited never comes between an `open`'s proof and its filling of the sets.

Standard library only, importing nothing of the collection: it is installed on each Spark beside the
script and ds4_listener.py, which the script hands to `proof` as `listener`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import ipaddress
import json
import os
import re
import stat
import time
from typing import TYPE_CHECKING, Any

# For the type checker only: the hosts' Pythons need not subscript Callable.
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Protocol

    class Nft(Protocol):
        """nft(args, stdin) -> (rc, stdout, stderr)."""

        def __call__(self, args: list[str], stdin: str | None, /) -> tuple[int, str, str]: ...

    class Prove(Protocol):
        """prove() -> None, or why the gateways may not be admitted."""

        def __call__(self) -> str | None: ...


CONFIG_PATH = "/etc/ds4-engine-gate.json"
# In /run (emptied by a reboot, writable by root alone); 0600, refused when anyone else's or a link.
LOCK_PATH = "/run/ds4-engine-gate.lock"
LOCK_WAIT = 60.0
POLL = 0.1
FAMILY = "inet"
# The sets the engine firewall's rules accept the gateways from, by address family.
SETS = {"v4": "held_v4", "v6": "held_v6"}
ACTIONS = ("open", "close", "load")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class GateError(Exception):
    """A gate that cannot be opened or closed as asked (the message says why)."""


def read_config(text: str) -> dict:
    """The gate's settings (CONFIG_PATH, written by the engine firewall's tasks), checked: table, rules (the
    rules file), unit, user (the engine user), host and port (ds4_host, ds4_port), admit (whether the engine
    listens beyond loopback, where the gateways reach it), v4 and v6 (the addresses admitted)."""
    try:
        config = json.loads(text)
    except ValueError as exc:
        raise GateError(f"the gate's settings are no JSON: {exc}") from exc
    if not isinstance(config, dict):
        raise GateError("the gate's settings are no JSON object")
    wanted = {"table", "rules", "unit", "user", "host", "port", "admit", "v4", "v6"}
    if set(config) != wanted:
        raise GateError(f"the gate's settings must have exactly {sorted(wanted)}, not {sorted(config)}")
    if not isinstance(config["table"], str) or not _NAME.match(config["table"]):
        raise GateError(f"table {config['table']!r} is no nftables table name")
    if not isinstance(config["rules"], str) or not config["rules"].startswith("/"):
        raise GateError(f"rules {config['rules']!r} is no absolute path")
    port = config["port"]
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise GateError(f"port {port!r} is no TCP port")
    if not isinstance(config["admit"], bool):
        raise GateError(f"admit {config['admit']!r} is not true or false")
    for key, version in (("v4", 4), ("v6", 6)):
        if not isinstance(config[key], list):
            raise GateError(f"{key} must be a list of addresses")
        for item in config[key]:
            try:
                network = ipaddress.ip_network(str(item), strict=False)
            except ValueError as exc:
                raise GateError(f"{key}: {item!r} is no address or network") from exc
            if network.version != version:
                raise GateError(f"{key}: {item!r} is not an IPv{version} address")
    return config


def close_text(config: dict) -> str:
    """nft commands that empty the sets."""
    return "".join(f"flush set {FAMILY} {config['table']} {name}\n" for name in SETS.values())


def families(host: str) -> set[str]:
    """The address families (SETS' keys) an engine listening on HOST is reached in: an IPv4 address (the
    wildcard 0.0.0.0 included) IPv4 alone, the IPv6 wildcard both, another IPv6 address IPv6 alone. A
    gateway's packets in another family could reach only another user's socket (issue 55)."""
    try:
        address = ipaddress.ip_address(str(host).strip("[]"))
    except ValueError:
        return set(SETS)
    if address.version == 4:
        return {"v4"}
    return set(SETS) if address == ipaddress.ip_address("::") else {"v6"}


def _family_of(socket: dict) -> str:
    address = socket["address"]
    mapped = address.version == 6 and address.ipv4_mapped is not None
    return "v4" if address.version == 4 or mapped else "v6"


def open_text(config: dict) -> str:
    """nft commands that empty the sets and put the admitted addresses in them, in one transaction: only
    in the families the engine is reached in."""
    text = close_text(config)
    admitted = families(config["host"])
    for key, name in SETS.items():
        if config[key] and key in admitted:
            text += f"add element {FAMILY} {config['table']} {name} {{ {', '.join(config[key])} }}\n"
    return text


def load_text(config: dict, rules: str, proven: bool) -> str:
    """The rules file followed by the sets' elements when the engine is proven: one transaction."""
    return rules.rstrip("\n") + "\n" + (open_text(config) if proven else "")


def listeners_on(listener: Any, port: int, proc_root: str = "/proc") -> list[dict]:
    """Every listening socket on `port`, at any address (listener: the ds4_listener module)."""
    found = []
    for name in listener.NET_FILES:
        try:
            with open(os.path.join(proc_root, name), encoding="ascii") as handle:
                found += listener.parse_listeners(handle.read())
        except FileNotFoundError:
            continue  # a host without IPv6
    return [socket for socket in found if socket["port"] == port]


def cgroup(pid: int, proc_root: str = "/proc") -> str | None:
    """The text of /proc/PID/cgroup (every hierarchy's line), None once the process is gone."""
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def proof(config: dict, listener: Any, uid: int, main_pid: int, proc_root: str = "/proc") -> str | None:
    """None when the gateways may be admitted, else why not, in words naming who holds the port.

    `listener`: the ds4_listener module; `uid`: the engine user's; `main_pid`: the unit's main process
    (0: none). Admitted only where the engine listens beyond loopback (no gateway reaches it otherwise),
    when the socket a connection to host:port reaches is made by the engine user and held by the main
    process (ds4_listener.problem), every process holding it is in the main process's cgroup, and no socket
    of another user listens on the port at any address of the families the gate admits (a stranger on the
    Spark's own address would take the gateway's connections while the engine listens on another; one in
    the other family receives none of them, and refusing it kept the engine down at its user's will)."""
    host, port, unit = config["host"], config["port"], config["unit"]
    if not config["admit"]:
        return f"the engine listens on loopback alone (ds4_host {host}): no gateway reaches it there"
    if not main_pid:
        return f"{unit} runs no engine"
    reached = listener.read_listener(host, port, proc_root)
    found, unreadable = [], 0
    if reached is not None:
        found, unreadable = listener.holders_as_owner(reached["inode"], reached["uid"], proc_root)
    why = listener.problem(reached, host, port, uid, found, unreadable, main_pid, proc_root)
    if why:
        return why
    own = cgroup(main_pid, proc_root)
    if own is None:
        return f"{unit}'s main process (pid {main_pid}) is gone"
    elsewhere = [pid for pid in found if cgroup(pid, proc_root) != own]
    if elsewhere:
        who = listener.holder_words(elsewhere, uid, proc_root)
        return f"{host}:{port} is also held by {who}, outside {unit}'s cgroup"
    # Only where the gate admits the gateways: beside an engine on 0.0.0.0, a socket on [::] is IPv6-only
    # (one taking IPv4 too could not have bound), and no gateway's packet reaches it (issue 55).
    admitted = families(host)
    for other in listeners_on(listener, port, proc_root):
        if other["uid"] != uid and _family_of(other) in admitted:
            pids, _unreadable = listener.holders_as_owner(other["inode"], other["uid"], proc_root)
            who = listener.holder_words(pids, other["uid"], proc_root)
            return f"{other['address']}:{port} is held by {who}, not by the engine user"
    return None


@contextlib.contextmanager
def locked(
    path: str = LOCK_PATH,
    wait: float = LOCK_WAIT,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[None]:
    """Hold the gate's lock: a file of the running user's alone (0600), opened without following a link,
    refused when it is anything else; a wait longer than `wait` seconds fails."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise GateError(f"the gate's lock {path} is a link: refused") from exc
        raise GateError(f"the gate's lock {path} cannot be opened: {exc.strerror}") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise GateError(
                f"the gate's lock {path} is not a file of uid {os.geteuid()}'s alone "
                f"(uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}): refused"
            )
        deadline = clock() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if clock() >= deadline:
                    raise GateError(f"the gate's lock {path} was held for more than {wait:g} s") from None
                sleep(POLL)
        yield
    finally:
        os.close(fd)


def _applied(nft: Nft, text: str) -> tuple[bool, str]:
    """(whether `nft -f -` applied text, what it said)."""
    rc, _out, err = nft(["-f", "-"], text)
    return rc == 0, err.strip()


def _table_missing(nft: Nft, config: dict) -> bool:
    rc, _out, _err = nft(["list", "table", FAMILY, config["table"]], None)
    return rc != 0


def _close(nft: Nft, config: dict, table: str, failing: str) -> bool:
    """Empty the sets: True when emptied, False when there is no table (nothing is admitted through it);
    GateError, its message starting with `failing`, when the sets are there and stay filled."""
    done, said = _applied(nft, close_text(config))
    if done:
        return True
    if _table_missing(nft, config):
        return False
    raise GateError(f"{failing} {table} could not be emptied: {said}")


def act(action: str, config: dict, nft: Nft, prove: Prove, rules: str | None = None) -> str:
    """Do `action` (ACTIONS) and say what was done; GateError when the gate could not be put as asked.

    `nft(args, stdin)` -> (rc, stdout, stderr) runs nft; `prove()` -> None or why the gateways may not be
    admitted (proof() bound to this host); `rules`: the rules file's text, for `load`."""
    table = f"{FAMILY} {config['table']}"
    if action == "close":
        if _close(nft, config, table, "the sets of"):
            return f"closed: no gateway reaches port {config['port']} until the engine is proven to hold it"
        return f"closed: no table {table} (no engine firewall, nothing admitted through it)"
    if action == "open":
        why = prove()
        if why:
            _close(nft, config, table, f"not opened ({why}), and the sets of")
            raise GateError(f"not opened: {why}")
        done, said = _applied(nft, open_text(config))
        if done:
            return f"opened: the gateways reach port {config['port']}, held by {config['unit']}'s engine"
        if _table_missing(nft, config):
            # The table flushed by hand: whoever loads it again (the watchdog's reload) proves anew.
            return f"not opened: no table {table}; loading the firewall again proves the engine anew"
        raise GateError(f"the sets of {table} could not be filled: {said}")
    if action == "load":
        why = prove()
        done, said = _applied(nft, load_text(config, rules or "", why is None))
        if not done:
            raise GateError(f"the rules {config['rules']} could not be loaded: {said}")
        if why is None:
            return f"loaded {table}, open: {config['unit']}'s engine holds port {config['port']}"
        return f"loaded {table}, closed: {why}"
    raise GateError(f"no such action {action!r}: one of {', '.join(ACTIONS)}")
