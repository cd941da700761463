"""Filters of the fleet playbooks; the logic lives in module_utils/_fleet/status.py, ds4_fleet_table.py
ds4_rollout.py and ds4_targets.py.

- `hosts | ds4.fleet.fleet_status` -> a record per Spark, from a list of {host, reading, fact, perf, verify,
  upgrade} (reading: ds4_host_status's `status`, null when the Spark could not be read; fact:
  ansible_local.ds4; perf: ansible_local.ds4_perf, the activation's speed measurements; verify:
  ansible_local.ds4_verify, the last playbooks/verify.yml).
- `records | ds4.fleet.fleet_status_table(title)` -> the records as a plain-text table, a list of lines.
- `hosts | ds4.fleet.upgrade_batches(serial)` -> the hosts cut into batches as Ansible's `serial` cuts them.
- `failed | ds4.fleet.over_fail_share(total, percentage)` -> true when failed/total is above percentage %.
- `target | ds4.fleet.upgrade_outcome(before=, after=, stage=, switch=, stopped=, model=)` -> what the upgrade
  did.
- `ds4_target_hosts | default('sparks') | ds4.fleet.target_hosts(groups)` -> the host pattern of every Spark
  play, less the Sparks this run found with nothing to change (group ds4_fleet_unchanged).
  Templated in the controller's main process (a play's `hosts:`), it also loads the collection's filters
  there once, so that the workers forked for each task inherit them instead of each loading them again.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.rollout import (
    RolloutError,
    over_share,
    upgrade_batches,
    upgrade_outcome,
)
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.status import StatusError, fleet_records
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.table import render_table
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.targets import TargetError, target_hosts


def _wrap(function):
    def filter_(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except (StatusError, RolloutError, TargetError) as exc:
            raise AnsibleFilterError(str(exc)) from exc

    filter_.__name__ = function.__name__
    filter_.__doc__ = function.__doc__
    return filter_


class FilterModule:
    def filters(self):
        return {
            "fleet_status": _wrap(fleet_records),
            "fleet_status_table": _wrap(render_table),
            "upgrade_batches": _wrap(upgrade_batches),
            "over_fail_share": _wrap(over_share),
            "upgrade_outcome": _wrap(upgrade_outcome),
            "target_hosts": _wrap(target_hosts),
        }
