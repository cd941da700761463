"""module_utils/_fleet/rollout.py: the switch plan from the Sparks that staged, and the gate after a batch."""

from __future__ import annotations

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.rollout import (
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


# A pair (ds4_pairs) is one unit: its members switch in the same batch, count once against the batch
# sizes and ds4_upgrade_max_fail_percentage, and a pair that did not stage whole is not switched at all.
PAIRS = {
    "pair01": {
        "coordinator": {"host": "spark04", "address": "10.77.0.1"},
        "worker": {"host": "spark05", "address": "10.77.0.2"},
    }
}
FLEET = ["spark01", "spark02", "spark04", "spark05"]


def test_a_pair_may_be_the_canary_and_its_members_switch_together():
    plan = switch_plan(["spark05", "spark04", "spark01"], ["spark05", "spark04", "spark01"], ["spark05",
                       "spark04", "spark01"], 1, 0, PAIRS)  # fmt: skip
    assert plan["batches"] == [["spark04", "spark05"], ["spark01"]]
    assert plan["batch_of"] == {"spark04": 1, "spark05": 1, "spark01": 2}
    assert plan["message"] == (
        "switching 2 unit(s) in 2 batch(es): [pair01 (spark04+spark05)] then [spark01]"
    )


def test_a_pair_counts_once_against_the_batch_sizes():
    plan = switch_plan(FLEET, FLEET, FLEET, [1, 2], 0, PAIRS)
    assert plan["batches"] == [["spark01"], ["spark02", "spark04", "spark05"]]
    plan = switch_plan(FLEET, FLEET, FLEET, "50%", 0, PAIRS)  # 50% of 3 units: 1
    assert plan["batches"] == [["spark01"], ["spark02"], ["spark04", "spark05"]]


def test_a_pair_with_a_member_that_did_not_stage_is_not_switched_at_all():
    plan = switch_plan(FLEET, FLEET, ["spark01", "spark02", "spark04"], "100%", 50, PAIRS)
    assert plan["batches"] == [["spark01", "spark02"]] and "spark04" not in plan["batch_of"]
    assert plan["staged"] == ["spark01", "spark02"]
    assert plan["not_staged"] == ["spark04", "spark05"]
    assert plan["message"].endswith("; not staged, left as they are: pair01 (spark04+spark05)")
    # One unit of three failed to stage: a third, not the half that two Sparks of four would be.
    stop = switch_plan(FLEET, FLEET, ["spark01", "spark02", "spark04"], "100%", 40, PAIRS)["stop"]
    assert stop == ""
    stop = switch_plan(FLEET, FLEET, ["spark01", "spark02", "spark04"], "100%", 30, PAIRS)["stop"]
    assert stop.startswith("the rollout stopped before any switch: 1 of 3 units could not be staged (pair01 ")


def test_a_failed_pair_counts_once_at_the_gate():
    hosts = ["spark01", "spark04", "spark05"]
    # The pair failed (one member enough): one unit of two, 50%.
    assert batch_stop(2, hosts, ["spark01", "spark05"], 50, PAIRS) == ""
    assert batch_stop(2, hosts, ["spark01", "spark05"], 49, PAIRS) == (
        "the rollout stopped after batch 2 (spark01, pair01 (spark04+spark05)): 1 of 2 failed"
        " (pair01 (spark04+spark05)), more than ds4_upgrade_max_fail_percentage (49%) allows"
    )
