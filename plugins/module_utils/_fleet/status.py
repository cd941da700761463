"""The fleet's state on the controller: a record per Spark (filter ds4.fleet.fleet_status).

A record is made from what ds4_host_status read on the Spark (module_utils/_service/host_status.py), the local
fact ansible_local.ds4 (what the service was configured with, and the update check's result), the speed
fact ansible_local.ds4_perf (the activation's measurements) and, after an upgrade, what the upgrade did to
it. module_utils/_fleet/table.py writes the records as a table for the terminal.

Where the configuration and the running engine disagree, the record says so in `notes`: the table is
only worth reading if it tells the truth.

A pair of Sparks (ds4_pairs) is one record, `pair_record`: it serves through its coordinator, and its worker
(its own unit, no HTTP API) is judged by its unit alone; the record keeps both members' records.
"""

from __future__ import annotations

import os
from typing import Any

from ansible_collections.ds4.fleet.plugins.module_utils._engine.make_target import without_spark_target
from ansible_collections.ds4.fleet.plugins.module_utils._pair.fleet import pair_of_host
from ansible_collections.ds4.fleet.plugins.module_utils._pair.mode import mode_of
from ansible_collections.ds4.fleet.plugins.module_utils._perf.figures import summary_of
from ansible_collections.ds4.fleet.plugins.module_utils._perf.gate import (
    KEPT_SLOWER,
    ROLLED_BACK,
    same_release,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.version import is_commit_release, is_newer


class StatusError(ValueError):
    """Input a record cannot be made from."""


def _service_word(reading: dict, worker: bool = False) -> str:
    service, engine = reading["service"], reading["engine"]
    if service.get("error"):
        return "unknown"
    if service.get("load_state") == "not-found":
        return "not installed"
    state = service.get("active_state") or "unknown"
    if state == "active" and not engine.get("answering") and not worker:
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
    if is_commit_release(release):
        # No order among commits: the check's own verdict, while the release it judged still runs.
        if check.get("running") == release and check.get("status") == "ok":
            available = bool(check.get("update_available"))
    elif latest and release:
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


def perf_summary(perf: Any, release: str | None, commit: str | None) -> tuple[dict | None, list]:
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
    verify: dict | None = None,
    worker: bool = False,
) -> dict:
    """One Spark's record: `reading` from read_host() (None when the Spark could not be read, `error`
    saying why), `fact` the local fact ansible_local.ds4 (None before the first install), `upgrade` what an
    upgrade did to it (outcome, detail, target, before), `perf` the local fact ansible_local.ds4_perf,
    `verify` the local fact ansible_local.ds4_verify (the last playbooks/verify.yml). `worker`: a pair's
    worker, which has no HTTP API to answer: its unit alone says its state."""
    if not isinstance(host, str) or not host:
        raise StatusError(f"a fleet record needs a host name: {host!r}")
    fact = fact if isinstance(fact, dict) else {}
    record: dict[str, Any] = {"host": host, "reachable": reading is not None, "notes": []}
    if upgrade is not None:
        record["upgrade"] = upgrade
    if reading is None:
        record.update(_unread(fact))
        record["notes"].append(f"could not be read: {error or 'no reading'}")
        return record
    for key in ("current", "previous", "service", "engine", "disk"):
        if not isinstance(reading.get(key), dict):
            raise StatusError(f"the reading of {host} lacks {key!r}: {reading!r}")
    record.update(_read(reading, fact, worker))
    record["perf"], perf_notes = perf_summary(perf, record["release"], record["commit"])
    record["notes"].extend(_disagreements(record, reading, fact, worker))
    if upgrade and upgrade.get("cleanup_error"):
        record["notes"].append(f"the cleanup after the switch failed: {upgrade['cleanup_error']}")
    record["notes"].extend(perf_notes)
    record["verify"] = summary_of(verify)
    if record["verify"] and record["verify"]["verdict"] == "slow":
        last = record["verify"]
        cause = f"; most likely: {last['cause']}" if last["cause"] else ""
        record["notes"].append(
            f"verified slow ({last['release']}): lowest {last['lowest_ratio']} of the published figures, "
            f"below ds4_verify_min_ratio {last['min_ratio']}{cause} (playbooks/verify.yml says more)"
        )
    return record


# The one family there was before the local fact recorded one (ds4_model_family's default).
_FAMILY_BEFORE_FAMILIES = "deepseek-v4-flash"


def _model(fact: dict) -> dict:
    """The model the Spark was configured to serve: its family, generation and quantization. A fact written
    before families were recorded is of V4 Flash; its quantization went unrecorded (a pair may serve q4),
    so none is claimed."""
    generation = fact.get("generation")
    return {
        "family": fact.get("family") or (_FAMILY_BEFORE_FAMILIES if generation else None),
        "generation": generation,
        "quantization": fact.get("quantization"),
    }


def _unread(fact: dict) -> dict:
    """The fields of a Spark that could not be read: only what its configuration says."""
    return {
        "service": "unreachable",
        "release": None,
        "commit": None,
        "previous": None,
        **_model(fact),
        "speculation": fact.get("speculation"),
        "context": fact.get("context"),
        "update": {"available": None, "latest": None, "checked_at": None, "error": None},
        "answering": False,
        "uptime_s": None,
        "requests_inflight": None,
        "free_disk_bytes": None,
        "disk_path": None,
        "service_since": None,
        "perf": None,
        "verify": None,
        "build": None,
        "transport": None,
    }


def _read(reading: dict, fact: dict, worker: bool = False) -> dict:
    """The fields of a Spark that was read: what runs from the reading, what was configured from the fact."""
    current, engine, disk = reading["current"], reading["engine"], reading["disk"]
    answering = bool(engine.get("answering"))
    context = _as_int(engine.get("context")) if answering else None
    return {
        "service": _service_word(reading, worker),
        "release": current.get("release"),
        "commit": current.get("commit"),
        "previous": reading["previous"].get("release"),
        **_model(fact),
        "speculation": fact.get("speculation"),
        "context": context if context is not None else _as_int(fact.get("context")),
        "update": _update(fact, current.get("release")),
        "answering": answering,
        "uptime_s": engine.get("uptime_seconds") if answering else None,
        "requests_inflight": engine.get("requests_inflight") if answering else None,
        "free_disk_bytes": disk.get("free_bytes"),
        "disk_path": disk.get("path"),
        "service_since": reading["service"].get("started_at"),
        "build": _build(current.get("build")),
        # The transport a tensor pair member's engine was started with (rdma, or the tcp fallback).
        "transport": (reading.get("transport") or {}).get("transport"),
    }


def _build(build):
    """How the running release was built, from its stamp: {make_target, make_args, reason, spark_target}."""
    if not isinstance(build, dict) or not isinstance(build.get("build_target"), dict):
        return None
    target = build["build_target"]
    return {
        "arch": target.get("arch"),
        "make_target": target.get("make_target"),
        "make_args": target.get("make_args"),
        "reason": build.get("make_target_reason") or None,
        "without_spark_target": without_spark_target(build) is not None,
    }


def _disagreements(record: dict, reading: dict, fact: dict, worker: bool = False) -> list:
    """Notes where the release links, the unit, the engine and the configuration do not tell one story."""
    current, engine = reading["current"], reading["engine"]
    release, answering = record["release"], record["answering"]
    notes = []
    transport = reading.get("transport") or {}
    if transport.get("warning"):
        # ds4-rdma-launch's own words: no RDMA device on the link (the tcp fallback), or a port not ACTIVE.
        used = transport.get("transport") or "unknown"
        notes.append(f"the tensor pair's transport is {used}: {transport['warning']}")
    if release is None:
        notes.append(f"{current.get('link')} points at no release: nothing is installed to run")
    if current.get("stamp_error"):
        notes.append(current["stamp_error"])
    lacking = without_spark_target(current.get("build"))
    if lacking:
        notes.append(f"the running release was {lacking}")
    if reading.get("current_changed_since_start"):
        notes.append("current was switched after the engine started: it still runs the release before")
    if fact and fact.get("release") and release and fact["release"] != release:
        notes.append(f"the local fact says {fact['release']}, but current points at {release}")
    context = _as_int(engine.get("context")) if answering else None
    configured_context = _as_int(fact.get("context"))
    if context is not None and configured_context is not None and context != configured_context:
        notes.append(f"the engine runs context {context}, the service is configured for {configured_context}")
    model = engine.get("model") if answering else None
    base = (fact.get("models") or {}).get("base") if isinstance(fact.get("models"), dict) else None
    if model and base and os.path.basename(str(model)) != base:
        notes.append(
            f"the engine serves {os.path.basename(str(model))}, the service is configured for {base}"
        )
    if record["service"] == "active, not answering":
        notes.append(f"ds4.service is active but {engine.get('url')} does not answer: {engine.get('error')}")
    elif worker:
        pass  # No HTTP API: the pair answers through its coordinator, whose record says so.
    elif answering and engine.get("error"):
        notes.append(engine["error"])
    if record["service"] not in ("active", "active, not answering", "unreachable") and answering:
        notes.append(f"ds4.service is {record['service']}, yet an engine answers at {engine.get('url')}")
    if reading["service"].get("error"):
        notes.append(reading["service"]["error"])
    return notes


def fleet_records(entries: Any, hosts: Any = None, pairs: Any = None) -> list:
    """Records of many Sparks from `entries`, a list of {host, reading, error, fact, upgrade}.

    With `hosts`, the records follow its order, and a host without an entry (one that dropped out of the
    play before it could say anything) gets a record that says it could not be read. A pair of `pairs`
    (ds4_pairs) with both members among them is one record (`pair_record`) where the first of them stands.
    """
    for value, name in ((entries, "entries"), (hosts, "hosts")):
        if value is not None and (isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__")):
            raise StatusError(f"fleet_status needs a list of {name}: {value!r}")
    by_host: dict[Any, dict] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise StatusError(f"each entry of fleet_status is a mapping with host and reading: {entry!r}")
        by_host[entry.get("host")] = entry
    order: list[Any] = list(hosts) if hosts is not None else list(by_host)
    records = {}
    for host in order:
        entry = by_host.get(host, {"error": "the Spark dropped out of the play (unreachable or failed)"})
        pair = pair_of_host(pairs, host)
        worker = pair is not None and host == pair[2] and pair[1] in order
        records[host] = fleet_record(
            host,
            entry.get("reading"),
            entry.get("fact"),
            entry.get("upgrade"),
            entry.get("error"),
            entry.get("perf"),
            entry.get("verify"),
            worker=worker,
        )
    out, done = [], set()
    for host in order:
        pair = pair_of_host(pairs, host)
        if pair is not None and pair[1] in records and pair[2] in records:
            if pair[0] not in done:
                done.add(pair[0])
                mode = mode_of(pairs[pair[0]])
                out.append(pair_record(pair[0], records[pair[1]], records[pair[2]], mode))
        else:
            out.append(records[host])
    return out


def _both(coordinator: Any, worker: Any) -> Any:
    """One value where the members agree, else both, the coordinator's first (`v0.6.5/v0.6.3`)."""
    if coordinator == worker:
        return coordinator
    return f"{coordinator if coordinator is not None else '-'}/{worker if worker is not None else '-'}"


def pair_record(name: str, coordinator: dict, worker: dict, mode: str = "pipeline") -> dict:
    """The record of pair `name` from its members' records: what the pair serves is its coordinator's (the
    API, the context, the speed), each member's state side by side (`active/failed`), and each member's
    notes under its name. It answers when the coordinator does and the worker's unit is active on the same
    release. `members` keeps both records, each with its `role`; `pair` says its `mode` (ds4_pairs) and, in
    tensor mode, the `transport` its members' engines were started with (`rdma/tcp` where they differ)."""
    members = [dict(coordinator, role="coordinator"), dict(worker, role="worker")]
    same = coordinator.get("release") == worker.get("release")
    record = dict(coordinator)
    record.update(
        host=name,
        pair={
            "name": name,
            "coordinator": coordinator["host"],
            "worker": worker["host"],
            "mode": mode,
            "transport": _both(coordinator.get("transport"), worker.get("transport")),
        },  # fmt: skip
        members=members,
        reachable=coordinator["reachable"] and worker["reachable"],
        service=_both(coordinator["service"], worker["service"]),
        release=_both(coordinator.get("release"), worker.get("release")),
        answering=bool(coordinator.get("answering")) and worker["service"] == "active" and same,
        free_disk_bytes=min(
            [m["free_disk_bytes"] for m in members if m.get("free_disk_bytes") is not None], default=None
        ),
        notes=[f"{m['host']} ({m['role']}): {note}" for m in members for note in m["notes"]],
    )
    if not same:
        record["notes"].append(
            f"the members run different releases ({coordinator['host']} {coordinator.get('release')}, "
            f"{worker['host']} {worker.get('release')}): the pair cannot serve"
        )
    upgrades = [m["upgrade"] for m in members if isinstance(m.get("upgrade"), dict)]
    if upgrades:
        outcomes = [u.get("outcome") for u in upgrades]
        record["upgrade"] = dict(upgrades[0], outcome=_both(outcomes[0], outcomes[-1]), detail="")
    return record
