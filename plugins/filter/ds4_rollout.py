"""Filters of upgrade.yml's switch plan; the rules live in module_utils/_fleet/rollout.py.

- `ansible_play_hosts | ds4.fleet.switch_plan(ansible_play_hosts_all, hostvars, serial, percentage, pairs)`
  -> the batches of the Sparks that staged (each Spark's `_ds4_fleet_stage.staged`), a pair of `pairs`
  (ds4_pairs) one unit, or why the rollout stops.
- `batch_hosts | ds4.fleet.batch_stop(hostvars, batch, percentage, pairs)` -> why the rollout stops after a
  batch (each Spark's `_ds4_fleet_switch.ok`, a pair failed when either member did), or "".
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.rollout import (
    RolloutError,
    batch_stop,
    switch_plan,
)


def _flag(hostvars, host, fact, key):
    """hostvars[host][fact][key], false when the Spark never set the fact (it failed before)."""
    return bool((hostvars[host].get(fact) or {}).get(key))


def switch_plan_filter(play_hosts, all_hosts, hostvars, serial, percentage, pairs=None):
    staged = [host for host in play_hosts if _flag(hostvars, host, "_ds4_fleet_stage", "staged")]
    try:
        return switch_plan(list(play_hosts), list(all_hosts), staged, serial, percentage, pairs)
    except RolloutError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def batch_stop_filter(hosts, hostvars, batch, percentage, pairs=None):
    switched = [host for host in hosts if _flag(hostvars, host, "_ds4_fleet_switch", "ok")]
    try:
        return batch_stop(int(batch), list(hosts), switched, percentage, pairs)
    except RolloutError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"switch_plan": switch_plan_filter, "batch_stop": batch_stop_filter}
