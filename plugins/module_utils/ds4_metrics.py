"""Metrics: what a Spark runs and how it fares, as Prometheus text for node_exporter's textfile collector.

The host-side `ds4-watchdog` writes this file on each run (every few seconds), from what the roles and the
update check leave on the host: the local facts `ds4` (release, commit, model set, speculation, and the
update check's last result) and `ds4_weights` (the verified weights), the unit's state and restarts, and
the watchdog's own state. It also copies the engine's own `/metrics` (the series named `ds4_*`), which it
has just read to probe the engine: Prometheus reads them through node_exporter, and the engine's port
stays on loopback.

Our series are named `ds4_spark_*`, so they never collide with the engine's. Standard library only, and
ds4_drain.py (the engine's own series are read as it reads them), which the role installs beside.
"""

from __future__ import annotations

import calendar
import os
import re
import time
from typing import Any

try:
    from ansible_collections.ds4.fleet.plugins.module_utils.ds4_drain import split_sample
except ImportError:  # on the Spark, installed beside ds4-watchdog and ds4_drain.py, outside any package
    from ds4_drain import split_sample  # type: ignore[import-not-found,no-redef]

PREFIX = "ds4_spark_"
_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


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


def engine_series(text: str) -> str:
    """The engine's `/metrics` reduced to its own `ds4_*` series (their HELP and TYPE lines included).

    Anything else (other names, a `ds4_spark_*` name that would collide with ours, OpenMetrics' `# EOF`,
    malformed lines) is left out, so that one odd line cannot make node_exporter reject the whole file.
    """
    kept = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and _ours(parts[2]):
                kept.append(line)
            continue
        sample = split_sample(line)
        if sample is None or not _ours(sample[0]):
            continue
        # node_exporter refuses timestamps in textfiles: the value alone.
        kept.append(f"{sample[1]} {sample[2]}")
    return "\n".join(kept) + "\n" if kept else ""


def _ours(name: str) -> bool:
    return bool(_NAME.match(name)) and name.startswith("ds4_") and not name.startswith(PREFIX)


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
    engine_text: str | None,
    free_bytes: int | None,
    next_bytes: int | None,
    now: float,
    firewall: dict | None = None,
) -> str:
    """The textfile: our `ds4_spark_*` series, then the engine's own when it answered.

    `firewall`: {"loaded": bool, "restores": int} while the engine firewall's unit is active, else None
    (no firewall series)."""
    out = Writer()
    fact = fact if isinstance(fact, dict) else {}
    _configured(out, fact)
    _update_check(out, fact.get("update") if isinstance(fact.get("update"), dict) else None)
    _unit(out, unit, verdict)
    _watchdog(out, watchdog, watchdog_enabled)
    _weights(out, weights, free_bytes, next_bytes)
    if firewall is not None:
        _firewall(out, firewall)
    out.add("metrics_timestamp_seconds", "gauge", "When these series were written.", now)
    text = out.text()
    if engine_text:
        text += engine_series(engine_text)
    return text


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
                "generation": fact.get("generation") or "",
                "speculation": fact.get("speculation") or "",
                "base_model": models.get("base", ""),
                "models": ",".join(f"{role}={name}" for role, name in sorted(models.items())),
            },
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
        verdict in ("ok", "busy"),
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
