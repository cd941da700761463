"""plugins/filter/ds4_rollout.py: the switch plan and the batch gate read each Spark's facts from hostvars."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_rollout import FilterModule

FILTERS = FilterModule().filters()
HOSTVARS = {
    "spark01": {"_ds4_fleet_stage": {"staged": True}, "_ds4_fleet_switch": {"ok": True}},
    "spark02": {"_ds4_fleet_stage": {"staged": True}, "_ds4_fleet_switch": {"ok": False}},
    # Failed before staging recorded anything.
    "spark03": {},
}


def test_the_plan_switches_only_the_sparks_whose_stage_says_staged():
    hosts = ["spark01", "spark02", "spark03"]
    plan = FILTERS["switch_plan"](hosts, hosts, HOSTVARS, 1, 50)
    assert plan["batches"] == [["spark01"], ["spark02"]] and plan["not_staged"] == ["spark03"]


def test_the_gate_counts_a_spark_without_a_recorded_switch_as_failed():
    assert FILTERS["batch_stop"](["spark01", "spark03"], HOSTVARS, "2", 50) == ""
    assert "1 of 2 failed (spark02)" in FILTERS["batch_stop"](["spark01", "spark02"], HOSTVARS, 2, 0)


def test_a_bad_setting_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="ds4_upgrade_max_fail_percentage"):
        FILTERS["batch_stop"](["spark01"], HOSTVARS, 1, 101)
