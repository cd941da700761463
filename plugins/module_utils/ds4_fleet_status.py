"""The fleet's state: what each Spark runs, read on the Spark; one table and one JSON document for them all.

Two halves, one idea:
- `read_host()` runs on a Spark (module ds4.fleet.ds4_host_status): the release `current` points at and its
  build stamp, the state of ds4.service, what the running engine reports on /v1/stats, the free space of
  the weights' filesystem. Each is read from the thing itself, not from what a role last configured.
- `fleet_records()` and `render_table()` run on the controller (filters ds4.fleet.fleet_status and
  ds4.fleet.fleet_status_table): a record per Spark from that reading, the local fact ansible_local.ds4
  (what the service was configured with, and the update check's result), the speed fact
  ansible_local.ds4_perf (the activation's measurements) and, after an upgrade, what the upgrade did to it;
  then a table for the terminal.

Where the configuration and the running engine disagree, the record says so in `notes`: the table is
only worth reading if it tells the truth.
"""

from __future__ import annotations

import json
import os
import time

from ansible_collections.ds4.fleet.plugins.module_utils.ds4_drain import (
    AGENT_STATUS,
    EngineUnreachable,
    ProbeError,
    read_stats,
)
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_perf import (
    KEPT_SLOWER,
    ROLLED_BACK,
    same_release,
)
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_version import is_newer, parse_release

SYSTEMD_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "MainPID",
    "ExecMainStartTimestampMonotonic",
    "NRestarts",
)

COLUMNS = (
    ("HOST", "host"),
    ("SERVICE", "service"),
    ("RELEASE", "release"),
    ("GEN", "generation"),
    ("SPEC", "speculation"),
    ("CONTEXT", "context"),
    ("UPDATE", "update"),
    ("UPTIME", "uptime"),
    ("IN FLIGHT", "inflight"),
    ("FREE DISK", "free_disk"),
)
# Shown when any Spark has speed figures (the local fact ansible_local.ds4_perf).
PERF_COLUMNS = (("PREFILL TOK/S", "prefill"), ("DECODE TOK/S", "decode"))


class StatusError(ValueError):
    """Input a record cannot be made from."""


# --- on the Spark ---


def _link(path: str) -> dict:
    """What a release link points at: {path, target, release (the directory's name), stamp fields}."""
    info = {"link": path, "target": None, "release": None, "commit": None, "stamp_error": None}
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
    except (OSError, ValueError, AttributeError) as exc:
        info["stamp_error"] = f"no readable build stamp in {resolved}: {exc}"
    return info


def _systemd(run, service: str) -> dict:
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
    server = stats.get("server") if isinstance(stats.get("server"), dict) else {}
    return {
        "url": base_url,
        "answering": True,
        "requests_inflight": server.get("requests_inflight"),
        "uptime_seconds": server.get("uptime_seconds"),
        "context": server.get("context"),
        "model": server.get("model"),
        "error": None,
    }


def read_host(
    root: str, gguf_dir: str, base_url: str, run, service: str = "ds4.service", timeout: float = 5.0
):
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
        "read_at": round(time.time(), 3),
    }


# --- on the controller ---


def _service_word(reading: dict) -> str:
    service, engine = reading["service"], reading["engine"]
    if service.get("error"):
        return "unknown"
    if service.get("load_state") == "not-found":
        return "not installed"
    state = service.get("active_state") or "unknown"
    if state == "active" and not engine.get("answering"):
        return "active, not answering"
    return state


def _update(fact: dict, release: str | None) -> dict:
    """Whether a newer release than the one `current` names exists, from the update check's last result.

    The check's own verdict compares with the release that ran when it checked; here the latest release it
    saw is compared with the one that runs now, so an upgrade since the check does not leave a stale "yes".
    """
    check = fact.get("update") if isinstance(fact.get("update"), dict) else None
    if not check:
        return {
            "available": None,
            "latest": None,
            "checked_at": None,
            "error": "the update check has not run yet",
        }
    latest, checked_at = check.get("latest"), check.get("checked_at")
    error = check.get("error") if check.get("status") != "ok" else None
    if not latest and isinstance(check.get("last_ok"), dict):
        latest, checked_at = check["last_ok"].get("latest"), check["last_ok"].get("checked_at")
    available = None
    if latest and release:
        try:
            available = is_newer(latest, release)
        except ValueError:
            available = None
    return {"available": available, "latest": latest, "checked_at": checked_at, "error": error}


def _as_int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def perf_summary(perf, release: str | None, commit: str | None) -> tuple[dict | None, list]:
    """The speed of the release that runs, from the local fact ansible_local.ds4_perf (the activation's
    measurements, newest last), with its change against the release it replaced; and notes on a release
    measured since that was rolled back as too slow, or kept slower under ds4_perf_gate warn."""
    history = perf.get("history") if isinstance(perf, dict) else None
    if not isinstance(history, list):
        return None, []
    history = [entry for entry in history if isinstance(entry, dict)]
    running = {"release": release, "commit": commit}
    current = next(
        (r for r in reversed(history) if same_release(r, running) and r.get("verdict") != ROLLED_BACK), None
    )
    notes = []
    if history and history[-1].get("verdict") == ROLLED_BACK:
        notes.append(f"rolled back as too slow: {history[-1].get('message')}")
    if current is None:
        return None, notes
    if current.get("verdict") == KEPT_SLOWER:
        notes.append(f"runs slower than the release before it: {current.get('message')}")
    baseline = current.get("baseline") if isinstance(current.get("baseline"), dict) else {}
    change = current.get("change_pct") if isinstance(current.get("change_pct"), dict) else {}
    summary = {
        "release": current.get("release"),
        "prefill_tps": current.get("prefill_tps"),
        "decode_tps": current.get("decode_tps"),
        "measured_at": current.get("measured_at"),
        "verdict": current.get("verdict"),
        "against": baseline.get("release"),
        "prefill_change_pct": change.get("prefill"),
        "decode_change_pct": change.get("decode"),
    }
    return summary, notes


def fleet_record(
    host: str,
    reading: dict | None,
    fact: dict | None = None,
    upgrade: dict | None = None,
    error: str | None = None,
    perf: dict | None = None,
) -> dict:
    """One Spark's record: `reading` from read_host() (None when the Spark could not be read, `error`
    saying why), `fact` the local fact ansible_local.ds4 (None before the first install), `upgrade` what an
    upgrade did to it (outcome, detail, target, before), `perf` the local fact ansible_local.ds4_perf."""
    if not isinstance(host, str) or not host:
        raise StatusError(f"a fleet record needs a host name: {host!r}")
    fact = fact if isinstance(fact, dict) else {}
    record = {"host": host, "reachable": reading is not None, "notes": []}
    if upgrade is not None:
        record["upgrade"] = upgrade
    if reading is None:
        record.update(
            service="unreachable",
            release=None,
            commit=None,
            previous=None,
            generation=fact.get("generation"),
            speculation=fact.get("speculation"),
            context=fact.get("context"),
            update={"available": None, "latest": None, "checked_at": None, "error": None},
            answering=False,
            uptime_s=None,
            requests_inflight=None,
            free_disk_bytes=None,
            disk_path=None,
            service_since=None,
            perf=None,
        )
        record["notes"].append(f"could not be read: {error or 'no reading'}")
        return record
    for key in ("current", "previous", "service", "engine", "disk"):
        if not isinstance(reading.get(key), dict):
            raise StatusError(f"the reading of {host} lacks {key!r}: {reading!r}")
    current, engine, disk = reading["current"], reading["engine"], reading["disk"]
    notes = record["notes"]
    release = current.get("release")
    context = _as_int(engine.get("context")) if engine.get("answering") else None
    configured_context = _as_int(fact.get("context"))
    record.update(
        service=_service_word(reading),
        release=release,
        commit=current.get("commit"),
        previous=reading["previous"].get("release"),
        generation=fact.get("generation"),
        speculation=fact.get("speculation"),
        context=context if context is not None else configured_context,
        update=_update(fact, release),
        answering=bool(engine.get("answering")),
        uptime_s=engine.get("uptime_seconds") if engine.get("answering") else None,
        requests_inflight=engine.get("requests_inflight") if engine.get("answering") else None,
        free_disk_bytes=disk.get("free_bytes"),
        disk_path=disk.get("path"),
        service_since=reading["service"].get("started_at"),
    )
    record["perf"], perf_notes = perf_summary(perf, release, current.get("commit"))
    if release is None:
        notes.append(f"{current.get('link')} points at no release: nothing is installed to run")
    if current.get("stamp_error"):
        notes.append(current["stamp_error"])
    if reading.get("current_changed_since_start"):
        notes.append("current was switched after the engine started: it still runs the release before")
    if fact and fact.get("release") and release and fact["release"] != release:
        notes.append(f"the local fact says {fact['release']}, but current points at {release}")
    if context is not None and configured_context is not None and context != configured_context:
        notes.append(f"the engine runs context {context}, the service is configured for {configured_context}")
    model = engine.get("model") if engine.get("answering") else None
    base = (fact.get("models") or {}).get("base") if isinstance(fact.get("models"), dict) else None
    if model and base and os.path.basename(str(model)) != base:
        notes.append(
            f"the engine serves {os.path.basename(str(model))}, the service is configured for {base}"
        )
    if record["service"] == "active, not answering":
        notes.append(f"ds4.service is active but {engine.get('url')} does not answer: {engine.get('error')}")
    elif engine.get("answering") and engine.get("error"):
        notes.append(engine["error"])
    if record["service"] not in ("active", "active, not answering", "unreachable") and engine.get(
        "answering"
    ):
        notes.append(f"ds4.service is {record['service']}, yet an engine answers at {engine.get('url')}")
    if reading["service"].get("error"):
        notes.append(reading["service"]["error"])
    if upgrade and upgrade.get("cleanup_error"):
        notes.append(f"the cleanup after the switch failed: {upgrade['cleanup_error']}")
    notes.extend(perf_notes)
    return record


def fleet_records(entries, hosts=None) -> list:
    """Records of many Sparks from `entries`, a list of {host, reading, error, fact, upgrade}.

    With `hosts`, the records follow its order, and a host without an entry (one that dropped out of the
    play before it could say anything) gets a record that says it could not be read.
    """
    for value, name in ((entries, "entries"), (hosts, "hosts")):
        if value is not None and (isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__")):
            raise StatusError(f"fleet_status needs a list of {name}: {value!r}")
    by_host = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise StatusError(f"each entry of fleet_status is a mapping with host and reading: {entry!r}")
        by_host[entry.get("host")] = entry
    order = list(hosts) if hosts is not None else list(by_host)
    records = []
    for host in order:
        entry = by_host.get(host, {"error": "the Spark dropped out of the play (unreachable or failed)"})
        records.append(
            fleet_record(
                host,
                entry.get("reading"),
                entry.get("fact"),
                entry.get("upgrade"),
                entry.get("error"),
                entry.get("perf"),
            )
        )
    return records


# --- rendering ---


def human_bytes(value) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def human_duration(seconds) -> str:
    if seconds is None:
        return "-"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def human_context(tokens) -> str:
    if tokens is None:
        return "-"
    return f"{tokens // 1024}K" if tokens >= 1024 and tokens % 1024 == 0 else str(tokens)


def _update_cell(update: dict) -> str:
    if update.get("available"):
        return update["latest"]
    if update.get("available") is False:
        return "no"
    return "?"


def _speed_cell(perf, metric: str) -> str:
    """`812 (-2.1%)`: tokens per second, and the change against the release replaced when compared."""
    value = (perf or {}).get(f"{metric}_tps")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    change = perf.get(f"{metric}_change_pct")
    return f"{value:.0f}" + (f" ({change:+.1f}%)" if isinstance(change, (int, float)) else "")


def _cells(record: dict) -> dict:
    cells = {
        "host": record["host"],
        "service": record["service"],
        "release": record.get("release") or "-",
        "generation": record.get("generation") or "-",
        "speculation": record.get("speculation") or "-",
        "context": human_context(record.get("context")),
        "update": _update_cell(record.get("update") or {}),
        "uptime": human_duration(record.get("uptime_s")),
        "inflight": "-" if record.get("requests_inflight") is None else str(record["requests_inflight"]),
        "free_disk": human_bytes(record.get("free_disk_bytes")),
        "prefill": _speed_cell(record.get("perf"), "prefill"),
        "decode": _speed_cell(record.get("perf"), "decode"),
    }
    if "upgrade" in record:
        cells["upgrade"] = record["upgrade"].get("outcome") or "-"
    return cells


def render_table(records, title: str | None = None) -> str:
    """The records as a plain-text table, one Spark a line, then one line per note and a tally of releases."""
    if isinstance(records, (str, bytes, dict)) or not hasattr(records, "__iter__"):
        raise StatusError(f"fleet_status_table needs a list of records: {records!r}")
    records = list(records)
    columns = list(COLUMNS)
    if any(r.get("perf") for r in records):
        columns.extend(PERF_COLUMNS)
    if any("upgrade" in r for r in records):
        columns.append(("UPGRADE", "upgrade"))
    rows = [_cells(r) for r in records]
    widths = {key: max([len(head)] + [len(row[key]) for row in rows]) for head, key in columns}
    lines = [title] if title else []
    lines.append("  ".join(head.ljust(widths[key]) for head, key in columns).rstrip())
    for row in rows:
        lines.append("  ".join(row[key].ljust(widths[key]) for _, key in columns).rstrip())
    for record in records:
        upgrade = record.get("upgrade") or {}
        if upgrade.get("detail"):
            lines.append(f"{record['host']}: {upgrade['detail']}")
        lines.extend(f"{record['host']}: {note}" for note in record["notes"])
    lines.append(tally(records))
    return "\n".join(lines)


def tally(records) -> str:
    """One sentence: how many Sparks serve which release, and how many do not serve."""
    serving, other = {}, 0
    for record in records:
        if record.get("answering") and record.get("release"):
            serving[record["release"]] = serving.get(record["release"], 0) + 1
        else:
            other += 1

    def order(tag):
        try:
            return (0, parse_release(tag))
        except ValueError:
            return (1, ())

    parts = [
        f"{n} serving {tag}" for tag, n in sorted(serving.items(), key=lambda kv: order(kv[0]), reverse=True)
    ]
    if other:
        parts.append(f"{other} not serving")
    count = len(records)
    return f"{count} Spark{'' if count == 1 else 's'}: " + (", ".join(parts) if parts else "none")
