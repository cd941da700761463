"""What a Spark runs, read on the Spark itself (module ds4.fleet.ds4_host_status).

The release `current` and `previous` point at and their build stamps, the state of ds4.service, what the
running engine reports on /v1/stats, the free space of the weights' filesystem: each read from the thing
itself, not from what a role last configured. The controller turns a reading into a fleet record
(module_utils/_fleet/status.py).

Standard library only, with the engine reader of module_utils/_spark/drain.py: the module runs on the Spark.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import (
    AGENT_STATUS,
    EngineUnreachable,
    ProbeError,
    read_stats,
)

SYSTEMD_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "MainPID",
    "ExecMainStartTimestampMonotonic",
    "NRestarts",
)


def _link(path: str) -> dict:
    """What a release link points at: {path, target, release (the directory's name), stamp fields}."""
    info: dict[str, Any] = {
        "link": path,
        "target": None,
        "release": None,
        "commit": None,
        "stamp_error": None,
        "build": None,
    }
    try:
        target = os.readlink(path)
    except OSError:
        return info
    resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
    info["target"] = resolved
    info["release"] = os.path.basename(resolved)
    try:
        with open(os.path.join(resolved, ".ds4-build.json"), encoding="utf-8") as handle:
            stamp = json.load(handle)
        info["release"] = stamp.get("release") or info["release"]
        info["commit"] = stamp.get("commit")
        # How it was built: the make target and why (a GB10 built without cuda-spark is noted).
        info["build"] = {key: stamp.get(key) for key in ("build_target", "make_target_reason")}
    except (OSError, ValueError, AttributeError) as exc:
        info["stamp_error"] = f"no readable build stamp in {resolved}: {exc}"
    return info


def _systemd(run: Any, service: str) -> dict:
    """The unit's state from `systemctl show`; `run(argv)` returns (rc, stdout, stderr)."""
    argv = ["systemctl", "show", service, "--property=" + ",".join(SYSTEMD_PROPERTIES)]
    rc, out, err = run(argv)
    if rc != 0:
        return {"error": f"systemctl show {service} exited {rc}: {err.strip()}"}
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    started = None
    mono = props.get("ExecMainStartTimestampMonotonic", "0")
    mono = int(mono) if mono.isdigit() and int(mono) > 0 else None
    if mono:
        # The monotonic clock has no gaps for a changed wall clock; the wall time is derived once, here.
        started = round(time.time() - (time.monotonic() - mono / 1e6), 3)
    main_pid = props.get("MainPID", "0")
    restarts = props.get("NRestarts", "")
    return {
        "load_state": props.get("LoadState"),
        "active_state": props.get("ActiveState"),
        "sub_state": props.get("SubState"),
        "unit_file_state": props.get("UnitFileState") or None,
        "main_pid": int(main_pid) if main_pid.isdigit() else 0,
        "started_at": started,
        # Exact, unlike the derived wall time: two readings of one engine's start compare equal.
        "started_monotonic_us": mono,
        "restarts": int(restarts) if restarts.isdigit() else None,
    }


def _disk(path: str) -> dict:
    """Free and total bytes of the filesystem of `path`, read at its nearest existing folder."""
    checked = path
    while checked and not os.path.exists(checked):
        parent = os.path.dirname(checked)
        if parent == checked:
            break
        checked = parent
    try:
        st = os.statvfs(checked)
    except OSError as exc:
        return {
            "path": path,
            "checked_at": checked,
            "free_bytes": None,
            "total_bytes": None,
            "error": str(exc),
        }
    return {
        "path": path,
        "checked_at": checked,
        "free_bytes": st.f_bavail * st.f_frsize,
        "total_bytes": st.f_blocks * st.f_frsize,
    }


def _engine(base_url: str, timeout: float) -> dict:
    try:
        stats = read_stats(base_url, timeout, AGENT_STATUS)
    except EngineUnreachable as exc:
        return {"url": base_url, "answering": False, "error": str(exc)}
    except ProbeError as exc:
        return {"url": base_url, "answering": True, "error": str(exc)}
    server = stats.get("server")
    if not isinstance(server, dict):
        server = {}
    return {
        "url": base_url,
        "answering": True,
        "requests_inflight": server.get("requests_inflight"),
        "uptime_seconds": server.get("uptime_seconds"),
        "context": server.get("context"),
        "model": server.get("model"),
        "error": None,
    }


# Where a tensor pair member's ds4-rdma-launch records the transport of the engine's start (the unit's
# runtime directory: gone when the unit stops, so never a record of an earlier start's).
TRANSPORT_STATE = "/run/ds4/transport.json"


def _transport(path: str) -> dict | None:
    """The transport the running engine was started with ({transport, warning, device, gid_index}), None
    where no launcher recorded one (a single Spark, a pipeline pair, a tensor pair over tcp)."""
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {
            "transport": None,
            "warning": f"{path} cannot be read: {exc}",
            "device": None,
            "gid_index": None,
        }
    state = state if isinstance(state, dict) else {}
    found: dict = state["found"] if isinstance(state.get("found"), dict) else {}
    return {
        "transport": state.get("transport"),
        "warning": state.get("warning"),
        "device": found.get("device"),
        "gid_index": found.get("gid_index"),
    }


def read_host(
    root: str,
    gguf_dir: str,
    base_url: str,
    run: Any,
    service: str = "ds4.service",
    timeout: float = 5.0,
    transport_state: str = TRANSPORT_STATE,
) -> dict:
    """Everything the fleet report needs from one Spark, read from the things themselves."""
    current = _link(os.path.join(root, "current"))
    systemd = _systemd(run, service)
    # A link newer than the engine's start: current was switched, and the engine has not restarted onto it.
    current_newer = False
    try:
        link_mtime = os.lstat(current["link"]).st_mtime
        current_newer = bool(systemd.get("started_at")) and link_mtime > systemd["started_at"] + 1
    except OSError:
        pass
    return {
        "current": current,
        "previous": _link(os.path.join(root, "previous")),
        "current_changed_since_start": current_newer,
        "service": dict(systemd, name=service),
        "engine": _engine(base_url, timeout),
        "disk": _disk(gguf_dir),
        "transport": _transport(transport_state),
        "read_at": round(time.time(), 3),
    }
