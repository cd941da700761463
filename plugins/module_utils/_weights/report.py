"""The weights role's messages in words: the plan before anything moves, what became of each file, and
what the cleanup after the smoke test removed and kept. One line per action, ready for a debug task.

The plan is ds4.fleet.ds4_weights_plan's result (module_utils/_weights/disk_plan.py); a file's outcome is
ds4.fleet.ds4_hub_wait's result for one ds4_hub_file job.
"""

from __future__ import annotations

# The plan's reason for a wanted file that is already there: said as "have", and not a kept old file.
PRESENT = "wanted, already present"
ADOPT_VERBS = {
    "move": "move it in",
    "copy": "copy it in from its filesystem",
    "in_place": "too large to copy, link it from its place",
}


def _lines(text):
    return [line for line in text.split("\n") if line]


def plan_lines(plan, check_mode=False):
    """The plan's one-sentence summary, then a line per fetch, adoption, removal and kept file."""
    lines = _lines(("Check mode, nothing is changed: " if check_mode else "") + plan["message"])
    for f in plan.get("fetch", []):
        line = f"fetch {f['name']}: {f['bytes']:,} bytes"
        if f.get("resume_from"):
            line += f", resuming at byte {f['resume_from']:,}"
        if f.get("replaces"):
            line += ", replacing a file of the wrong size"
        lines.append(line)
    for a in plan.get("adopt", []):
        partial = " as a partial download, to resume" if a.get("partial") else ""
        lines.append(f"adopt {a['src']}: {ADOPT_VERBS[a['action']]}{partial}")
    for r in plan.get("remove_before", []):
        lines.append(f"remove now {r['path']} ({r['bytes']:,} bytes): the new files do not fit beside it")
    for r in plan.get("remove_after_smoke", []):
        lines.append(f"remove after the smoke test {r['path']} ({r['bytes']:,} bytes)")
    for k in plan.get("keep", []):
        lines.append(f"have {k['name']}" if k["reason"] == PRESENT else f"keep {k['name']}: {k['reason']}")
    if check_mode:
        fetch = plan.get("fetch", [])
        lines.append(f"would fetch {sum(f['bytes'] for f in fetch):,} bytes in {len(fetch)} file(s)")
    return lines


def outcome_line(result):
    """What became of one file: fetched, resumed or already verified, from where, at what rate."""
    line = f"{result['path']}: {result['action']}"
    if result["action"] in ("fetched", "resumed"):
        line += f", {result['bytes_fetched']:,} bytes"
        if result.get("resumed_from"):
            line += f" after the {result['resumed_from']:,} already on disk"
        line += f" in {result['elapsed_s']} s at {result['rate_bps'] / 1000000:.1f} MB/s"
        source = result["source"]
        line += " from the hub" if source == "hub" else f" from the peer {source}"
        bytes_from = result.get("bytes_from") or {}
        if len(bytes_from) > 1:
            line += " (" + " bytes, ".join(f"{k}: {v}" for k, v in sorted(bytes_from.items())) + " bytes)"
    return f"{line}; sha256 {result['sha256']}, commit {result['commit']}"


def outcome_lines(results):
    return [outcome_line(r) for r in results]


def cleanup_lines(plan):
    """What the cleanup removed (the plan's remove_after_smoke) and the other files it kept, and why."""
    lines = [
        f"removed {r['path']} ({r['bytes']:,} bytes) and its partial download and records"
        for r in plan.get("remove_after_smoke", [])
    ]
    lines += [f"kept {k['name']}: {k['reason']}" for k in plan.get("keep", []) if k["reason"] != PRESENT]
    return lines or ["nothing of another generation is here"]
