"""HAProxy's runtime API: read the servers of a backend, and take one out of service or put it back.

The gateway (role ds4_gateway) is HAProxy with the Sparks as the servers of one backend. Its runtime API is
a Unix socket at level admin: one command per connection, answered in text, then the socket closes. Two
commands describe a server:

- `show stat <backend> 4 -1`: CSV with a `# pxname,svname,...` header; per server its sessions now
  (`scur`), requests queued (`qcur`), the status the balancer acts on (`UP`, `DOWN`, `DRAIN`, `MAINT`,
  `UP 1/2` while a check is failing, `no check`) and the last check's result (`check_status`);
- `show servers state <backend>`: space-separated, after a version line and a `# be_id be_name ...`
  header; `srv_admin_state` holds the operator's bits (forced maintenance 0x01, forced drain 0x08; the
  others are maintenance inherited, from the configuration or from DNS), which the status alone blurs
  (a drained server that is down shows `DOWN`).

`set server <backend>/<server> state ready|drain|maint` changes the operator's state: drain sends no new
request and lets the sessions end, maint sends nothing. The answer is empty on success.

Standard library only: the module runs on the gateway.
"""

from __future__ import annotations

import socket
import time
from typing import Any

STATES = ("ready", "drain", "maint")
# srv_admin_state bits (HAProxy's SRV_ADMF_*): forced maintenance, inherited, from the configuration,
# forced drain, inherited drain, from DNS resolution, from a hostname change.
ADMIN_FORCED_MAINT = 0x01
ADMIN_MAINT_ANY = 0x01 | 0x02 | 0x04 | 0x20 | 0x40
ADMIN_FORCED_DRAIN = 0x08
ADMIN_DRAIN_ANY = 0x08 | 0x10


class RuntimeApiError(Exception):
    """The socket could not be reached, or HAProxy refused or did not understand a command."""


def command(path: str, line: str, timeout: float = 5.0) -> str:
    """Send one command to the runtime API at `path` and return its whole answer."""
    if "\n" in line or ";" in line:
        raise RuntimeApiError(f"one command without newlines or semicolons, not {line!r}")
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except OSError as exc:
        raise RuntimeApiError(f"HAProxy's runtime API at {path} could not be asked {line!r}: {exc}") from exc
    return b"".join(chunks).decode("utf-8", "replace")


def parse_stat(text: str) -> list[dict]:
    """The rows of `show stat` CSV as dicts keyed by its header's names."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("# "):
        raise RuntimeApiError(f"`show stat` answered without its CSV header: {text[:200]!r}")
    names = lines[0][2:].split(",")
    return [dict(zip(names, line.split(","), strict=False)) for line in lines[1:]]


def parse_servers_state(text: str) -> list[dict]:
    """The rows of `show servers state` as dicts keyed by its header's names."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if line.startswith("# be_id")), None)
    if header is None:
        raise RuntimeApiError(f"`show servers state` answered without its header: {text[:200]!r}")
    names = lines[header][2:].split()
    return [dict(zip(names, line.split(), strict=False)) for line in lines[header + 1 :]]


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value, 0) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        return default


def admin_state(bits: int) -> str:
    """The operator's state from srv_admin_state: maint, drain or ready."""
    if bits & ADMIN_MAINT_ANY:
        return "maint"
    if bits & ADMIN_DRAIN_ANY:
        return "drain"
    return "ready"


def servers(path: str, backend: str, timeout: float = 5.0) -> list[dict]:
    """Each server of `backend`: name, address, status, admin (ready/drain/maint), up, sessions, queued,
    check (the last check's status and code), in configuration order."""
    _check_name("backend", backend)
    stats = parse_stat(command(path, f"show stat {backend} 4 -1", timeout))
    admin = {
        row.get("srv_name"): _int(row.get("srv_admin_state"))
        for row in parse_servers_state(command(path, f"show servers state {backend}", timeout))
    }
    found = []
    for row in stats:
        if row.get("pxname") != backend or row.get("svname") in ("FRONTEND", "BACKEND"):
            continue
        name = row.get("svname", "")
        status = row.get("status", "")
        check = " ".join(part for part in (row.get("check_status", ""), row.get("check_code", "")) if part)
        found.append(
            {
                "name": name,
                "address": row.get("addr", ""),
                "status": status,
                "admin": admin_state(admin.get(name, 0)),
                # Whether the balancer sends it new requests: up by its checks and neither drained nor in
                # maintenance ("UP 1/2" is still up while one check has failed).
                "up": status.split(" ")[0] in ("UP", "no") and admin_state(admin.get(name, 0)) == "ready",
                "sessions": _int(row.get("scur")),
                "queued": _int(row.get("qcur")),
                "check": check.strip(),
            }
        )
    if not found:
        raise RuntimeApiError(f"HAProxy has no backend {backend!r} with servers")
    return found


def server(path: str, backend: str, name: str, timeout: float = 5.0) -> dict:
    """One server of `backend`, by name."""
    for entry in servers(path, backend, timeout):
        if entry["name"] == name:
            return entry
    raise RuntimeApiError(f"HAProxy's backend {backend!r} has no server {name!r}")


def set_state(path: str, backend: str, name: str, state: str, timeout: float = 5.0) -> None:
    """Set the operator's state of one server: ready, drain or maint."""
    if state not in STATES:
        raise RuntimeApiError(f"a server's state is one of {', '.join(STATES)}, not {state!r}")
    _check_name("backend", backend)
    _check_name("server", name)
    answer = command(path, f"set server {backend}/{name} state {state}", timeout).strip()
    if answer:
        raise RuntimeApiError(f"HAProxy refused to set {backend}/{name} to {state}: {answer}")


def _check_name(kind: str, name: str) -> None:
    if not name or any(c.isspace() or c in "/;#" for c in name):
        raise RuntimeApiError(f"a {kind} name without spaces, '/', ';' or '#', not {name!r}")


def wait_for(
    read: Any,
    done: Any,
    timeout: float,
    interval: float,
    clock: Any = time.monotonic,
    sleep: Any = time.sleep,
) -> tuple[Any, bool, float]:
    """Read until done(reading) or `timeout` seconds pass: (last reading, done, seconds waited)."""
    started = clock()
    while True:
        reading = read()
        elapsed = clock() - started
        if done(reading) or elapsed >= timeout:
            return reading, done(reading), round(elapsed, 3)
        sleep(max(0.0, min(interval, timeout - elapsed)))


def take_out(
    path: Any,
    backend: Any,
    name: Any,
    timeout: Any,
    interval: Any,
    clock: Any = time.monotonic,
    sleep: Any = time.sleep,
) -> dict:
    """Drain one server, wait (at most `timeout` s) until its sessions ended, then put it in maintenance.

    Sessions still open at the time limit are not cut: maintenance only stops new ones, and the engine's
    own drain waits for them. Returns the server before and after, the seconds waited and whether its
    sessions ended.
    """
    before = server(path, backend, name)
    if before["admin"] != "maint":
        set_state(path, backend, name, "drain")
    after, idle, waited = wait_for(
        lambda: server(path, backend, name),
        lambda s: s["sessions"] == 0 and s["queued"] == 0,
        timeout,
        interval,
        clock,
        sleep,
    )
    if after["admin"] != "maint":
        set_state(path, backend, name, "maint")
        after = server(path, backend, name)
    return {
        "before": before,
        "after": after,
        "changed": before["admin"] != "maint",
        "sessions_ended": idle,
        "sessions_at_start": before["sessions"],
        "waited_s": waited,
    }


def put_back(
    path: Any,
    backend: Any,
    name: Any,
    timeout: Any,
    interval: Any,
    clock: Any = time.monotonic,
    sleep: Any = time.sleep,
) -> dict:
    """Put one server back into service and wait (at most `timeout` s) until its checks say it is up."""
    before = server(path, backend, name)
    if before["admin"] != "ready":
        set_state(path, backend, name, "ready")
    after, up, waited = wait_for(
        lambda: server(path, backend, name), lambda s: s["up"], timeout, interval, clock, sleep
    )
    changed = before["admin"] != "ready"
    return {"before": before, "after": after, "changed": changed, "up": up, "waited_s": waited}


def gateway_record(result: Any) -> dict:
    """What status.yml reports of one gateway, from the result of ds4_gateway_server's read: its servers, or
    null with the error that kept them from being read."""
    if not isinstance(result, dict) or not result:
        return {"servers": None, "error": "not read"}
    if result.get("failed") or result.get("unreachable") or "servers" not in result:
        return {"servers": None, "error": str(result.get("msg") or "not read")}
    return {"servers": list(result["servers"]), "error": None}


def render_gateway_table(records: dict) -> list[str]:
    """The Sparks' states at each gateway as lines of plain text, a block per gateway, an empty line between
    blocks (a list, so that Ansible's default callback prints it a line each)."""
    blocks: list[list[str]] = []
    for gateway, record in records.items():
        if record["servers"] is None:
            # The error may be of several lines (ssh's): each its own line.
            blocks.append(f"gateway {gateway}: could not be read: {record['error']}".split("\n"))
            continue
        rows = [("spark", "state", "admin", "sessions", "check")] + [
            (s["name"], s["status"], s["admin"], str(s["sessions"]), s["check"] or "-")
            for s in record["servers"]
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        table = [
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in rows
        ]
        up = sum(1 for s in record["servers"] if s["up"])
        blocks.append([f"gateway {gateway}: {up} of {len(record['servers'])} Spark(s) up", *table])
    lines: list[str] = []
    for block in blocks:
        lines.extend([""] * bool(lines) + block)
    return lines
