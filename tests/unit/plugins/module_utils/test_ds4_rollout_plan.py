"""module_utils/ds4_rollout.py: the switch plan from the Sparks that staged, and the gate after a batch."""

from __future__ import annotations

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_rollout import (
    RolloutError,
    batch_stop,
    switch_plan,
)

SPARKS = ["spark01", "spark02", "spark03", "spark04"]


def test_the_staged_sparks_are_cut_into_batches_canary_first():
    plan = switch_plan(SPARKS, SPARKS, ["spark04", "spark01", "spark02", "spark03"], [1, 2], 0)
    assert plan["batches"] == [["spark01"], ["spark02", "spark03"], ["spark04"]]
    assert plan["batch_of"] == {"spark01": 1, "spark02": 2, "spark03": 2, "spark04": 3}
    assert plan["stop"] == "" and plan["not_staged"] == []
    assert plan["message"] == (
        "switching 4 Spark(s) in 3 batch(es): [spark01] then [spark02, spark03] then [spark04]"
    )


def test_a_spark_that_failed_or_left_the_play_is_not_staged_and_not_switched():
    # spark03 staged but then left the play (unreachable): it is neither switched nor counted as staged.
    in_play = ["spark01", "spark02", "spark04"]
    plan = switch_plan(in_play, SPARKS, ["spark01", "spark03", "spark04"], "100%", 50)
    assert plan["staged"] == ["spark01", "spark04"]
    assert plan["not_staged"] == ["spark02", "spark03"]
    assert plan["batches"] == [["spark01", "spark04"]] and "spark02" not in plan["batch_of"]
    assert plan["message"].endswith("; not staged, left as they are: spark02, spark03")


def test_too_many_sparks_failing_to_stage_stops_before_any_switch():
    plan = switch_plan(SPARKS, SPARKS, ["spark01", "spark02", "spark03"], 1, 0)
    assert plan["batches"] == [] and plan["batch_of"] == {}
    assert plan["stop"] == (
        "the rollout stopped before any switch: 1 of 4 Sparks could not be staged (spark04),"
        " more than ds4_upgrade_max_fail_percentage (0%) allows"
    )
    assert plan["message"] == plan["stop"] + "; not staged, left as they are: spark04"


def test_a_bad_serial_is_refused_naming_the_variable():
    with pytest.raises(RolloutError, match="ds4_upgrade_serial"):
        switch_plan(SPARKS, SPARKS, SPARKS, 0, 0)


def test_a_batch_stops_the_rollout_only_beyond_the_share_allowed():
    hosts = ["spark02", "spark03"]
    assert batch_stop(2, hosts, ["spark02"], 50) == ""
    assert batch_stop(2, hosts, ["spark02"], 25) == (
        "the rollout stopped after batch 2 (spark02, spark03): 1 of 2 failed (spark03),"
        " more than ds4_upgrade_max_fail_percentage (25%) allows"
    )
    assert batch_stop(1, ["spark01"], ["spark01"], 0) == ""
