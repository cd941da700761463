"""Metrics: what a Spark runs and how it fares, as Prometheus text for node_exporter's textfile collector.

The host-side `ds4-watchdog` writes this file on each run (every few seconds), from what the roles and the
update check leave on the host: the local facts `ds4` (release, commit, model set, speculation, and the
update check's last result) and `ds4_weights` (the verified weights), the unit's state and restarts, and
the watchdog's own state. It also copies the engine's own `/metrics` (the series named `ds4_*`), which it
has just read to probe the engine: Prometheus reads them through node_exporter, and the engine's port
stays on loopback. node_exporter drops a textfile whole for one line it cannot parse, so the engine's
lines are checked against the text format first (exposition.py) and a bad one is dropped and counted;
the GPUs' health is read by gpu_health.py.

Our series are named `ds4_spark_*`, so they never collide with the engine's. Standard library only: the
role installs this file beside ds4-watchdog.
"""

from __future__ import annotations

import calendar
import os
import time
from typing import Any

PREFIX = "ds4_spark_"


def escape(value: Any) -> str:
    """A label value as the text format wants it: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


class Writer:
    """Collects series, each with one HELP and TYPE, in the order first given."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[str]]] = {}

    def add(self, name: str, kind: str, help_text: str, value: Any, labels: dict | None = None) -> None:
        if value is None:
            return
        name = PREFIX + name
        family = self._families.setdefault(name, (kind, help_text, []))
        label_text = ""
        if labels:
            label_text = "{" + ",".join(f'{key}="{escape(val)}"' for key, val in labels.items()) + "}"
        family[2].append(f"{name}{label_text} {_number(value)}")

    def text(self) -> str:
        lines = []
        for name, (kind, help_text, samples) in self._families.items():
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
        return "\n".join(lines) + "\n" if lines else ""


def engine_series(checked: tuple[list, list[str]]) -> tuple[str, list[str]]:
    """The engine's `/metrics`, as exposition.check_exposition checked it (its families and the lines it
    dropped), reduced to the engine's own `ds4_*` series, and the lines dropped.

    A malformed line, a second HELP or TYPE, a family's sample apart from its group or a series given
    twice was dropped by the check and is said in the list returned ("line N: why: the line"), for the
    textfile's ds4_spark_metrics_dropped_total; the rest is written anew, so one bad line cannot make
    node_exporter reject the whole file. Of the good lines, other names (a library's `go_*`, a
    `ds4_spark_*` name that would collide with ours) are left out without counting, and so are the
    timestamps, which node_exporter refuses in textfiles.
    """
    families, dropped = checked
    lines = []
    for family in families:
        samples = [line for line in family.samples if _ours(line.split("{", 1)[0].split(" ", 1)[0])]
        if not _ours(family.name) or not samples:
            continue
        if family.help is not None:
            lines.append(f"# HELP {family.name} {family.help}".rstrip(" "))
        if family.kind is not None:
            lines.append(f"# TYPE {family.name} {family.kind}")
        lines += samples
    return ("\n".join(lines) + "\n" if lines else ""), dropped


def _ours(name: str) -> bool:
    """A checked name of the engine's own, not one of ours."""
    return name.startswith("ds4_") and not name.startswith(PREFIX)


def parse_time(text: Any) -> float | None:
    """Seconds since the epoch of an update check's `2026-09-01T03:00:00Z`; None when absent or other."""
    if not isinstance(text, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, OverflowError):
        return None


def weights_verified(weights: dict | None, stat: Any = os.stat) -> list[dict]:
    """Each file of the local fact ds4_weights: {role, name, bytes, verified}.

    Verified means its verification record still describes the file on disk (size, mtime, inode, device):
    a file changed or replaced since it was hashed is not verified any more.
    """
    if not isinstance(weights, dict) or not isinstance(weights.get("files"), dict):
        return []
    gguf_dir = str(weights.get("gguf_dir") or "")
    found = []
    for role, record in sorted(weights["files"].items()):
        if not isinstance(record, dict) or not isinstance(record.get("name"), str):
            continue
        entry = {"role": role, "name": record["name"], "bytes": None, "verified": False}
        try:
            st = stat(os.path.join(gguf_dir, record["name"]))
        except OSError:
            found.append(entry)
            continue
        entry["bytes"] = st.st_size
        entry["verified"] = bool(record.get("sha256")) and all(
            record.get(key) == value
            for key, value in (
                ("size", st.st_size),
                ("mtime_ns", st.st_mtime_ns),
                ("ino", st.st_ino),
                ("dev", st.st_dev),
            )
        )
        found.append(entry)
    return found


def render(
    *,
    fact: dict | None,
    weights: list[dict],
    unit: dict,
    watchdog: dict,
    watchdog_enabled: bool,
    verdict: str,
    engine_text: str,
    free_bytes: int | None,
    next_bytes: int | None,
    now: float,
    gpus: list[dict] | None,
    firewall: dict | None = None,
    verify: dict | None = None,
    pair: dict | None = None,
) -> str:
    """The textfile: our `ds4_spark_*` series, then the engine's own as engine_series checked them ("" when
    it did not answer). `gpus`: parse_gpus of nvidia-smi's answer, None when it gave none. `firewall`:
    {"loaded": bool, "restores": int} while the engine firewall's unit is active, else None (no firewall
    series). `verify`: the local fact ds4_verify, the last playbooks/verify.yml (None: no series). `pair`:
    pair_route's, on a pair's member (None: a single Spark, no pair series)."""
    out = Writer()
    fact = fact if isinstance(fact, dict) else {}
    _configured(out, fact)
    _engine_metrics(out, fact)
    _update_check(out, fact.get("update") if isinstance(fact.get("update"), dict) else None)
    _unit(out, unit, verdict)
    _watchdog(out, watchdog, watchdog_enabled)
    _weights(out, weights, free_bytes, next_bytes)
    if firewall is not None:
        _firewall(out, firewall)
    _gpus(out, gpus)
    _verify(out, verify)
    if pair is not None:
        _pair(out, pair)
    out.add("metrics_timestamp_seconds", "gauge", "When these series were written.", now)
    return out.text() + engine_text


# ds4_model_family's default: the Spark-side programs import nothing of the collection to ask the catalog.
_FAMILY_BEFORE_FAMILIES = "deepseek-v4-flash"


def _configured(out: Writer, fact: dict) -> None:
    models = fact.get("models")
    if not isinstance(models, dict):
        models = {}
    if fact.get("release"):
        out.add(
            "info",
            "gauge",
            "What the Spark is configured to run (the local fact ds4); always 1.",
            1,
            {
                "release": fact.get("release") or "",
                "commit": fact.get("commit") or "",
                # A fact written before families were recorded is of V4 Flash, the one family there was.
                "family": fact.get("family") or (_FAMILY_BEFORE_FAMILIES if fact.get("generation") else ""),
                "generation": fact.get("generation") or "",
                "quantization": fact.get("quantization") or "",
                "speculation": fact.get("speculation") or "",
                "lineage": fact.get("lineage") or "fork",
                "base_model": models.get("base", ""),
                "models": ",".join(f"{role}={name}" for role, name in sorted(models.items())),
            },
        )


def _engine_metrics(out: Writer, fact: dict) -> None:
    # Upstream serves no /metrics: its series are absent because they are not served, not because it is
    # down; a dashboard or an alert reads this before it reads their absence.
    out.add(
        "engine_metrics_served",
        "gauge",
        "1 where the engine serves its own /metrics (the fork); 0 where it serves none (upstream).",
        fact.get("lineage") != "upstream",
    )


def _update_check(out: Writer, update: dict | None) -> None:
    out.add(
        "update_check_known", "gauge", "1 once the update check has run on this Spark.", update is not None
    )
    if update is not None:
        ok = update.get("status") == "ok"
        out.add("update_check_success", "gauge", "1 when the last update check read the feed.", ok)
        out.add(
            "update_check_timestamp_seconds",
            "gauge",
            "When the update check last ran.",
            parse_time(update.get("checked_at")),
        )
        out.add(
            "update_available",
            "gauge",
            "1 when the release feed names a newer release than the running one.",
            bool(update.get("update_available")),
        )
        if update.get("update_available"):
            out.add(
                "update_available_since_timestamp_seconds",
                "gauge",
                "Since when a newer release than the running one has been known.",
                parse_time(update.get("available_since")) or parse_time(update.get("checked_at")),
            )
            out.add(
                "update_latest_info",
                "gauge",
                "The newer release the feed names; always 1.",
                1,
                {"latest": update.get("latest") or "", "running": update.get("running") or ""},
            )


def _unit(out: Writer, unit: dict, verdict: str) -> None:
    active = unit.get("ActiveState", "")
    out.add(
        "unit_active",
        "gauge",
        "1 when ds4.service is active (loaded and answered its readiness probe).",
        active == "active",
    )
    out.add(
        "unit_start_limit_hit",
        "gauge",
        "1 when ds4.service failed on its start limit: systemd stopped restarting it.",
        verdict == "start-limit-hit",
    )
    try:
        restarts = int(unit.get("NRestarts", ""))
    except ValueError:
        restarts = None
    out.add(
        "engine_restarts_total",
        "counter",
        "systemd's automatic restarts of ds4.service since it was last started by hand (NRestarts).",
        restarts,
    )
    out.add(
        "engine_up",
        "gauge",
        "1 when ds4.service is active and the engine answered the watchdog's last probe.",
        # A pair's worker ("running") serves no API: its unit's state is all there is.
        verdict in ("ok", "busy", "running"),
    )


def pair_route(role: str, probe: dict | None, transport: dict | None = None) -> dict | None:
    """What the textfile says of a pair's member: {"role", "complete", "transport", "fallback"}, `complete`
    True or False when the coordinator's route was read (ds4_watchdog.route_state), True while it holds
    requests (admitted, so routed: one the route cannot take is answered at once), else None (not
    answering, or an answer that says nothing of the route). `transport`: what ds4-rdma-launch recorded at
    the engine's start (a tensor member over rdma), rdma or tcp, `fallback` whether it fell back to tcp;
    both None without such a record. None for a Spark in no pair."""
    if not role:
        return None
    used = transport.get("transport") if isinstance(transport, dict) else None
    if used not in ("rdma", "tcp"):
        used = None
    complete = None
    if role == "coordinator" and probe and probe.get("answered"):
        route = probe.get("route")
        if route in ("complete", "incomplete"):
            complete = route == "complete"
        elif probe.get("inflight"):
            complete = True
    return {
        "role": role,
        "complete": complete,
        "transport": used,
        "fallback": None if used is None else used == "tcp",
    }


def _pair(out: Writer, pair: dict) -> None:
    out.add(
        "pair_member",
        "gauge",
        "1 on a member of a pair (ds4_pairs); its role in the label.",
        1,
        {"role": pair["role"]},
    )
    # Absent (None) when the route was not read: no answer, or one that says nothing of it.
    out.add(
        "pair_route_complete",
        "gauge",
        "1 while the pair's coordinator routes requests through its worker; 0 while it answers "
        "'coordinator route does not start at layer 0' (its worker is not registered).",
        pair["complete"],
    )
    if pair.get("transport"):
        # A tensor member over rdma: what its engine was started with, and whether that is the tcp fallback
        # (no RDMA device served its link address at that start), which is slower and worth an alert.
        out.add(
            "pair_transport",
            "gauge",
            "1 with the transport a tensor pair member's engine was started with (ds4-rdma-launch).",
            1,
            {"transport": pair["transport"]},
        )
        out.add(
            "pair_transport_fallback",
            "gauge",
            "1 while a tensor pair member that asked for rdma runs over tcp: no RDMA device served its link.",
            pair["fallback"],
        )


def _watchdog(out: Writer, watchdog: dict, enabled: bool) -> None:
    out.add("watchdog_enabled", "gauge", "1 when the watchdog restarts a hung engine.", enabled)
    out.add(
        "watchdog_restarts_total",
        "counter",
        "Hung engines the watchdog killed for systemd to restart.",
        int(watchdog.get("restarts") or 0),
    )
    out.add(
        "watchdog_last_restart_timestamp_seconds",
        "gauge",
        "When the watchdog last killed a hung engine.",
        watchdog.get("last_restart_at"),
    )
    out.add(
        "metrics_dropped_total",
        "counter",
        "Lines of the engine's /metrics left out of this file for breaking the Prometheus text format.",
        int(watchdog.get("metrics_dropped") or 0),
    )
    out.add(
        "watchdog_probe_failures",
        "gauge",
        "Probes in a row the engine did not answer.",
        int(watchdog.get("failures") or 0),
    )


def _firewall(out: Writer, firewall: dict) -> None:
    out.add(
        "firewall_loaded",
        "gauge",
        "1 when the engine firewall's nftables table stands (loaded again by the watchdog if need be).",
        bool(firewall.get("loaded")),
    )
    out.add(
        "firewall_restores_total",
        "counter",
        "Times the watchdog found the engine firewall's table missing and loaded it again.",
        int(firewall.get("restores") or 0),
    )


def _weights(out: Writer, weights: list[dict], free_bytes: int | None, next_bytes: int | None) -> None:
    for entry in weights:
        labels = {"role": entry["role"], "file": entry["name"]}
        out.add(
            "weights_verified",
            "gauge",
            "1 when a model file's sha256 verification still describes the file on disk.",
            entry["verified"],
            labels,
        )
        out.add("weights_bytes", "gauge", "Size of a model file on disk.", entry["bytes"], labels)
    out.add("weights_free_bytes", "gauge", "Free space for weights in ds4_gguf_dir.", free_bytes)
    out.add(
        "weights_next_generation_bytes",
        "gauge",
        "Space a next model generation needs beside the current one.",
        next_bytes,
    )


def _verify(out: Writer, verify: dict | None) -> None:
    """The last verification against the published figures: each figure's ratio, the bound, when."""
    if not isinstance(verify, dict) or not isinstance(verify.get("figures"), list):
        return
    out.add(
        "verify_timestamp_seconds",
        "gauge",
        "When playbooks/verify.yml last measured this Spark against the published figures.",
        verify.get("verified_at"),
    )
    for row in verify["figures"]:
        if isinstance(row, dict) and isinstance(row.get("ratio"), (int, float)):
            out.add(
                "verify_ratio",
                "gauge",
                "A figure of the last verification as a share of the published one (1 is as fast).",
                row["ratio"],
                {"figure": str(row.get("figure")), "release": str(verify.get("release") or "")},
            )
    out.add(
        "verify_min_ratio",
        "gauge",
        "The share of a published figure below which the last verification called it slow.",
        verify.get("min_ratio"),
    )
    out.add(
        "verify_slow",
        "gauge",
        "1 when the last verification found a figure below ds4_verify_min_ratio of the published one.",
        verify.get("verdict") == "slow",
    )


def _gpus(out: Writer, gpus: list[dict] | None) -> None:
    out.add(
        "gpu_query_success", "gauge", "1 when nvidia-smi answered the watchdog's query.", gpus is not None
    )
    helps = {
        "temperature_celsius": "GPU temperature.",
        "power_draw_watts": "GPU power draw.",
        "power_limit_watts": "GPU power limit (not reported by a GB10).",
        "sm_clock_hertz": "Current SM clock.",
        "sm_clock_max_hertz": "Highest SM clock the GPU can run.",
    }
    for key, help_text in helps.items():
        for gpu in gpus or []:
            out.add(f"gpu_{key}", "gauge", help_text, gpu[key], {"gpu": gpu["gpu"]})
    for gpu in gpus or []:
        out.add(
            "gpu_clocks_event_reasons",
            "gauge",
            "Bit mask of what holds the GPU's clocks down now (NVML's clocks event reasons; 1 is idle).",
            gpu["clocks_event_reasons"],
            {"gpu": gpu["gpu"]},
        )
    for gpu in gpus or []:
        for reason, active in gpu["reasons"].items():
            out.add(
                "gpu_clocks_event_active",
                "gauge",
                "1 while a thermal or power limit holds the GPU's clocks down (throttling).",
                active,
                {"gpu": gpu["gpu"], "reason": reason},
            )
