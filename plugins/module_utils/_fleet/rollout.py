"""A fleet upgrade's decisions: the batches, when the rollout stops, and what became of each Spark.

Pure functions of plain data, used by the filters of playbooks/upgrade.yml on the controller.

- `upgrade_batches(hosts, serial)`: the hosts cut into batches exactly as Ansible's `serial` cuts a play's
  hosts (an int, "N%" of all of them, the last entry repeating), so that the stage play can plan the
  switch play's batches itself, from a ds4_upgrade_serial that the inventory may set.
- `over_share(failed, total, percentage)`: Ansible's max_fail_percentage rule, failed share above it.
- `upgrade_outcome(...)`: what the upgrade did to one Spark, judged from what the Spark runs afterwards.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from ansible_collections.ds4.fleet.plugins.module_utils._pair.fleet import unit_name, units

_PERCENT_RE = re.compile(r"^([0-9]+)%$")


class RolloutError(ValueError):
    """A setting of the rollout that cannot be used, named in the message."""


def _batch_size(item: Any, total: int) -> int:
    """One entry of `serial` as a number of hosts (Ansible's pct_to_int: a share rounds down, at least 1)."""
    if isinstance(item, bool):
        raise RolloutError(f"ds4_upgrade_serial entries are host counts or percentages, not {item!r}")
    if isinstance(item, int):
        size = item
    elif isinstance(item, str) and item.strip().isdigit():
        size = int(item.strip())
    elif isinstance(item, str) and (percent_match := _PERCENT_RE.match(item.strip())):
        percent = int(percent_match.group(1))
        if not 0 < percent <= 100:
            raise RolloutError(f"ds4_upgrade_serial percentages are 1% to 100%: {item!r}")
        return int(percent / 100.0 * total) or 1
    else:
        raise RolloutError(
            f'ds4_upgrade_serial entries are host counts (1) or percentages of the fleet ("25%"): {item!r}'
        )
    if size < 1:
        raise RolloutError(
            f"ds4_upgrade_serial host counts are 1 or more (100% switches all at once): {item!r}"
        )
    return size


def upgrade_batches(hosts: Any, serial: Any) -> list:
    """`hosts` (in order) cut into batches by `serial`: an entry or a list of them, the last one repeating."""
    if isinstance(hosts, (str, bytes, dict)) or not hasattr(hosts, "__iter__"):
        raise RolloutError(f"upgrade_batches needs a list of hosts: {hosts!r}")
    hosts = list(hosts)
    entries = list(serial) if isinstance(serial, (list, tuple)) else [serial]
    if not entries:
        raise RolloutError('ds4_upgrade_serial is empty: give at least one batch size, such as [1, "25%"]')
    sizes = [_batch_size(item, len(hosts)) for item in entries]
    batches: list[list] = []
    index = 0
    while index < len(hosts):
        size = sizes[min(len(batches), len(sizes) - 1)]
        batches.append(hosts[index : index + size])
        index += size
    return batches


def over_share(failed: int, total: int, percentage: Any) -> bool:
    """True when `failed` of `total` is more than `percentage` percent (Ansible's max_fail_percentage)."""
    if isinstance(percentage, bool) or not isinstance(percentage, (int, float, str)):
        raise RolloutError(f"ds4_upgrade_max_fail_percentage is a number from 0 to 100: {percentage!r}")
    try:
        limit = float(percentage)
    except ValueError as exc:
        raise RolloutError(
            f"ds4_upgrade_max_fail_percentage is a number from 0 to 100: {percentage!r}"
        ) from exc
    if not 0 <= limit <= 100:
        raise RolloutError(f"ds4_upgrade_max_fail_percentage is a number from 0 to 100: {percentage!r}")
    if total <= 0:
        return False
    return failed * 100.0 / total > limit


def _running(reading: Any) -> tuple:
    """(release, answering, (main pid, start)) of a host_status reading; Nones for a Spark not read."""
    if not isinstance(reading, dict):
        return None, False, (None, None)
    service = reading.get("service") or {}
    return (
        (reading.get("current") or {}).get("release"),
        bool((reading.get("engine") or {}).get("answering")),
        (service.get("main_pid"), service.get("started_monotonic_us")),
    )


def _model_name(reading: Any) -> str | None:
    """The file name of the model the engine says it serves (its /v1/stats); None where it names none
    (upstream serves no /v1/stats, a pair's worker no API) or the Spark was not read."""
    if not isinstance(reading, dict):
        return None
    model = (reading.get("engine") or {}).get("model")
    return posixpath.basename(model) if isinstance(model, str) and model else None


def _first_line(text: Any) -> str:
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    # Joined into a sentence with "; ": its own full stop would read ".;".
    return lines[0].rstrip(".") if lines else ""


def upgrade_outcome(
    target: Any,
    before: Any = None,
    after: Any = None,
    stage: Any = None,
    switch: Any = None,
    stopped: Any = None,
    through: Any = None,
    model: Any = None,
) -> dict:
    """What the upgrade did to one Spark: {outcome, detail, target, before, after}.

    `target` the release it was to run; `before` and `after` host_status readings from before the switch
    and from the end; `stage` {staged, message}; `switch` {ok, task, message, drain} once it was switched
    (None when it never was); `stopped` why the rollout stopped, when it did. The readings decide: a switch
    that reported success while the Spark does not run `target` is a failure. `through`, for a pair's worker
    (no HTTP API), is its coordinator's reading from the end: the pair answers there or nowhere. `model`, the
    base GGUF the upgrade was to serve (a family swap may keep the release): where the engine names the model
    it serves, a switch that reported success while it serves another is a failure too.
    """
    was, _answering, started_before = _running(before)
    now, answering, started_after = _running(after)
    # Not a mapping (None; "" where ansible-core before 2.19 rendered a null of its own): a Spark alone.
    if isinstance(through, dict):
        answering = _running(through)[1]
    result = {"target": target, "before": was, "after": now, "outcome": None, "detail": ""}
    serving = f"serving {now}" if answering else f"NOT serving (current: {now or 'none'})"
    if after is None:
        result.update(outcome="unreachable", detail="could not be read at the end of the upgrade")
    elif not (stage or {}).get("staged"):
        why = _first_line((stage or {}).get("message")) or "it was not staged"
        result.update(outcome="not staged", detail=f"staging failed ({why}); {serving}")
    elif switch is None:
        why = stopped or "it was not switched"
        result.update(outcome="not switched", detail=f"{why}; {serving}")
    elif switch.get("ok"):
        wanted, served = posixpath.basename(str(model)) if model else None, _model_name(after)
        if now == target and answering and wanted and served and served != wanted:
            result.update(
                outcome="failed",
                detail=(
                    f"the switch to {target} reported success, yet the engine serves {served}, not {wanted}"
                ),
            )
        elif now == target and answering:
            restarted = started_before != started_after
            if was == target and not restarted:
                result.update(outcome="unchanged", detail=f"already ran {target}; serving it, not restarted")
            else:
                served_before = _model_name(before)
                swap = (
                    f", {served_before} -> {served}"
                    if served_before and served and served_before != served
                    else ""
                )
                result.update(
                    outcome="switched", detail=f"{was or 'none'} -> {target}{swap}; serving {target}"
                )
        else:
            result.update(outcome="failed", detail=f"the switch to {target} reported success, yet {serving}")
    else:
        why = _first_line(switch.get("message")) or "the switch failed"
        # The activation's own message names the release and says what it did; any other (a hook, the
        # drain) is told by the task that failed.
        if switch.get("task") and str(target) not in why:
            why = f"{switch['task']}: {why}"
        if now == was and answering and started_before == started_after:
            # It failed before the engine restarted (a hook, the drain): nothing was switched.
            result.update(outcome="not switched", detail=f"{why}; serving {was}, not restarted")
        elif now == was and answering:
            result.update(outcome="rolled back", detail=f"{why}; rolled back, serving {was}")
        else:
            result.update(outcome="failed", detail=f"{why}; {serving}")
    drain = (switch or {}).get("drain")
    if isinstance(drain, dict) and drain.get("message"):
        result["drain"] = drain
    return result


def _percent(percentage: Any) -> str:
    """ds4_upgrade_max_fail_percentage as the operator wrote it (0, 25, 12.5), for the messages."""
    return f"{percentage:g}" if isinstance(percentage, float) else str(percentage)


def switch_plan(
    play_hosts: Any, all_hosts: Any, staged: Any, serial: Any, percentage: Any, pairs: Any = None
) -> dict:
    """The switch play's plan, once every Spark of the play staged or failed.

    `play_hosts` are the Sparks still in the play, `all_hosts` every Spark the play began with (both in
    inventory order), `staged` those that staged. A pair of `pairs` (ds4_pairs) is one unit: staged only
    when both members staged, its members in one batch, counted once against `serial` and `percentage`.
    Returns `staged` and `not_staged` (Sparks, in order), `batches` (of Sparks; empty when the rollout stops
    here), `batch_of` (host -> its batch, 1 for the canary), `stop` (why the rollout stops before any switch,
    or "") and `message`, the plan in one line."""
    all_units = units(all_hosts, pairs)
    in_play, staged_set = set(play_hosts), set(staged)
    ready = [unit for unit in all_units if all(host in in_play and host in staged_set for host in unit)]
    left = [unit for unit in all_units if unit not in ready]
    what = "unit" if any(len(unit) > 1 for unit in all_units) else "Spark"
    stop, batches = "", []
    if over_share(len(left), len(all_units), percentage):
        stop = (
            f"the rollout stopped before any switch: {len(left)} of {len(all_units)} {what}s could"
            f" not be staged ({', '.join(unit_name(unit, pairs) for unit in left)}), more than"
            f" ds4_upgrade_max_fail_percentage ({_percent(percentage)}%) allows"
        )
    else:
        batches = [[host for unit in batch for host in unit] for batch in upgrade_batches(ready, serial)]
    message = stop or (
        f"switching {len(ready)} {what}(s) in {len(batches)} batch(es): "
        + " then ".join(f"[{', '.join(_names(batch, pairs))}]" for batch in batches)
    )
    if left:
        message += f"; not staged, left as they are: {', '.join(unit_name(unit, pairs) for unit in left)}"
    return {
        "staged": [host for unit in ready for host in unit if host in play_hosts],
        "not_staged": [host for unit in left for host in unit],
        "batches": batches,
        "batch_of": {host: number for number, batch in enumerate(batches, 1) for host in batch},
        "stop": stop,
        "message": message,
    }


def _names(hosts: list, pairs: Any) -> list:
    """The units of `hosts` as a message names them."""
    return [unit_name(unit, pairs) for unit in units(hosts, pairs)]


def batch_stop(batch: Any, hosts: Any, switched: Any, percentage: Any, pairs: Any = None) -> str:
    """Why the rollout stops after switch batch number `batch` (its `hosts`, of which `switched` succeeded):
    more of its units failed than `percentage` allows (a pair failed when either member did). "" when it
    goes on."""
    batch_units = units(hosts, pairs)
    failed = [unit for unit in batch_units if not set(unit) <= set(switched)]
    if not over_share(len(failed), len(batch_units), percentage):
        return ""
    return (
        f"the rollout stopped after batch {batch} ({', '.join(_names(list(hosts), pairs))}): {len(failed)} of"
        f" {len(batch_units)} failed ({', '.join(unit_name(unit, pairs) for unit in failed)}), more than"
        f" ds4_upgrade_max_fail_percentage ({_percent(percentage)}%) allows"
    )
