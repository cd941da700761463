"""The fleet's records as a plain-text table (filter ds4.fleet.fleet_status_table): one Spark a line, then
the notes and a tally of releases. A pair of Sparks is one line, `pair01 (spark04+spark05)`, where a value
the members do not share shows both, the coordinator's first (`active/failed`)."""

from __future__ import annotations

from typing import Any

from ansible_collections.ds4.fleet.plugins.module_utils._common.bytes import human_bytes
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.status import StatusError
from ansible_collections.ds4.fleet.plugins.module_utils._spark.version import parse_release

COLUMNS = (
    ("HOST", "host"),
    ("SERVICE", "service"),
    ("RELEASE", "release"),
    ("FAMILY", "family"),
    ("GEN", "generation"),
    ("QUANT", "quantization"),
    ("SPEC", "speculation"),
    ("CONTEXT", "context"),
    ("UPDATE", "update"),
    ("UPTIME", "uptime"),
    ("IN FLIGHT", "inflight"),
    ("FREE DISK", "free_disk"),
)
# Shown when any Spark has speed figures (the local fact ansible_local.ds4_perf).
PERF_COLUMNS = (("PREFILL TOK/S", "prefill"), ("DECODE TOK/S", "decode"))
# Shown when any Spark was verified against the published figures (ansible_local.ds4_verify).
VERIFY_COLUMNS = (("VERIFIED", "verified"),)
# Shown when the fleet has a pair (ds4_pairs): its mode, and in tensor mode the transport its members'
# engines were started with (`rdma/tcp` where one fell back; the note under the table says why).
PAIR_COLUMNS = (("PAIR", "pair"),)
# The widest a row may be. Ansible's YAML result format (callback_result_format = yaml, as in the project's
# ansible.cfg) folds a list item longer than about 80 characters at a space, so a wider table is laid out
# in panels of its columns, each led by HOST, one under the other.
ROW_WIDTH = 76


def human_duration(seconds: Any) -> str:
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


def human_context(tokens: Any) -> str:
    if tokens is None:
        return "-"
    return f"{tokens // 1024}K" if tokens >= 1024 and tokens % 1024 == 0 else str(tokens)


def _update_cell(update: dict) -> str:
    if update.get("available"):
        return update["latest"]
    if update.get("available") is False:
        return "no"
    return "?"


def _speed_cell(perf: Any, metric: str) -> str:
    """`812 (-2.1%)`: tokens per second, and the change against the release replaced when compared."""
    value = (perf or {}).get(f"{metric}_tps")
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    change = perf.get(f"{metric}_change_pct")
    return f"{value:.0f}" + (f" ({change:+.1f}%)" if isinstance(change, (int, float)) else "")


def _verified_cell(verify: Any) -> str:
    """`ok 0.93` or `SLOW 0.50`: the last verification's verdict and its lowest ratio."""
    if not isinstance(verify, dict):
        return "-"
    ratio = verify.get("lowest_ratio")
    word = "SLOW" if verify.get("verdict") == "slow" else str(verify.get("verdict"))
    return word + ("" if ratio is None else f" {ratio:.2f}")


def _host_cell(record: dict) -> str:
    pair = record.get("pair")
    if isinstance(pair, dict):
        return f"{pair['name']} ({pair['coordinator']}+{pair['worker']})"
    return record["host"]


def _pair_cell(pair: Any) -> str:
    if not isinstance(pair, dict):
        return "-"
    return " ".join(str(part) for part in (pair.get("mode"), pair.get("transport")) if part)


def _cells(record: dict) -> dict:
    cells = {
        "host": _host_cell(record),
        "service": record["service"],
        "release": record.get("release") or "-",
        "family": record.get("family") or "-",
        "generation": record.get("generation") or "-",
        "quantization": record.get("quantization") or "-",
        "speculation": record.get("speculation") or "-",
        "context": human_context(record.get("context")),
        "update": _update_cell(record.get("update") or {}),
        "uptime": human_duration(record.get("uptime_s")),
        "inflight": "-" if record.get("requests_inflight") is None else str(record["requests_inflight"]),
        "free_disk": "-" if record.get("free_disk_bytes") is None else human_bytes(record["free_disk_bytes"]),
        "prefill": _speed_cell(record.get("perf"), "prefill"),
        "decode": _speed_cell(record.get("perf"), "decode"),
        "verified": _verified_cell(record.get("verify")),
        "pair": _pair_cell(record.get("pair")),
    }
    if "upgrade" in record:
        cells["upgrade"] = record["upgrade"].get("outcome") or "-"
    return cells


def render_table(records: Any, title: str | None = None) -> list[str]:
    """The records as a plain-text table, one Spark a line, then one line per note and a tally of releases.

    A list of lines, never one string with newlines: Ansible's default callback prints a string's newlines
    as `\\n` (result format json, as in AWX), and a list one line each."""
    if isinstance(records, (str, bytes, dict)) or not hasattr(records, "__iter__"):
        raise StatusError(f"fleet_status_table needs a list of records: {records!r}")
    records = list(records)
    columns = list(COLUMNS)
    if any(r.get("perf") for r in records):
        columns.extend(PERF_COLUMNS)
    if any(r.get("verify") for r in records):
        columns.extend(VERIFY_COLUMNS)
    if any(r.get("pair") for r in records):
        columns.extend(PAIR_COLUMNS)
    if any("upgrade" in r for r in records):
        columns.append(("UPGRADE", "upgrade"))
    rows = [_cells(r) for r in records]
    widths = {key: max([len(head)] + [len(row[key]) for row in rows]) for head, key in columns}
    lines = [title] if title else []
    for number, panel in enumerate(panels(columns, widths)):
        lines.extend([""] * bool(number))
        lines.append("  ".join(head.ljust(widths[key]) for head, key in panel).rstrip())
        for row in rows:
            lines.append("  ".join(row[key].ljust(widths[key]) for _title, key in panel).rstrip())
    for record in records:
        for member in record.get("members") or [record]:
            upgrade = member.get("upgrade") or {}
            if upgrade.get("detail"):
                lines.append(f"{member['host']}: {upgrade['detail']}")
        lines.extend(f"{record['host']}: {note}" for note in record["notes"])
    lines.append(tally(records))
    # A note may quote an error of several lines (ssh's): each its own line.
    return [part for line in lines for part in line.split("\n")]


def panels(columns: list, widths: dict) -> list[list]:
    """The columns in as few panels no wider than ROW_WIDTH as they fit in, each led by the first (HOST),
    in their order, the panels as even as they can be; a column too wide for any panel has one of its own."""
    fewest = _fill(columns, widths, ROW_WIDTH)
    for limit in range(ROW_WIDTH - 1, 0, -1):
        narrower = _fill(columns, widths, limit)
        if len(narrower) > len(fewest):
            break
        fewest = narrower
    return fewest


def _fill(columns: list, widths: dict, limit: int) -> list[list]:
    """Each panel filled with the next columns up to `limit` characters."""
    first, *rest = columns
    result = [[first]]
    for column in rest:
        panel = result[-1]
        if sum(widths[key] + 2 for _head, key in panel) + widths[column[1]] > limit and len(panel) > 1:
            result.append([first, column])
        else:
            panel.append(column)
    return result


def tally(records: Any) -> str:
    """One sentence: how many Sparks serve which release, and how many do not serve."""
    serving: dict[str, int] = {}
    other = 0
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
    pairs = sum(1 for record in records if record.get("pair"))
    count = len(records) - pairs
    what = f"{count} Spark{'' if count == 1 else 's'}"
    if pairs:
        what += f", {pairs} pair{'' if pairs == 1 else 's'}"
    return f"{what}: " + (", ".join(parts) if parts else "none")
