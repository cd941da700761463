"""The rollout's decisions: batches cut as Ansible's `serial` cuts them, the failure share, the outcomes."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_fleet import FilterModule
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.rollout import (
    RolloutError,
    over_share,
    upgrade_batches,
    upgrade_outcome,
)

HOSTS = [f"s{i}" for i in range(1, 11)]


@pytest.mark.parametrize(
    ("hosts", "serial", "sizes"),
    [
        # The default: a canary, then a quarter of the fleet at a time (rounded down, at least one).
        (HOSTS, [1, "25%"], [1, 2, 2, 2, 2, 1]),
        (HOSTS[:3], [1, "25%"], [1, 1, 1]),
        (HOSTS[:1], [1, "25%"], [1]),
        ([], [1, "25%"], []),
        (HOSTS, 3, [3, 3, 3, 1]),
        (HOSTS, "2", [2, 2, 2, 2, 2]),
        (HOSTS, "100%", [10]),
        (HOSTS, [1, 2, "50%"], [1, 2, 5, 2]),
        (HOSTS[:3], ["10%"], [1, 1, 1]),
    ],
)
def test_batches_are_cut_as_ansible_cuts_serial(hosts, serial, sizes):
    batches = upgrade_batches(hosts, serial)
    assert [len(b) for b in batches] == sizes
    assert [h for b in batches for h in b] == hosts


@pytest.mark.parametrize(
    ("serial", "message"),
    [
        ([], "ds4_upgrade_serial is empty"),
        ([0], "host counts are 1 or more"),
        (["0%"], "percentages are 1% to 100%"),
        (["150%"], "percentages are 1% to 100%"),
        (["a quarter"], "host counts \\(1\\) or percentages"),
        ([True], "not True"),
        ([1.5], "host counts \\(1\\) or percentages"),
    ],
)
def test_impossible_batches_are_refused_naming_the_variable(serial, message):
    with pytest.raises(RolloutError, match=message):
        upgrade_batches(HOSTS, serial)


@pytest.mark.parametrize(
    ("failed", "total", "percentage", "stops"),
    [
        (0, 1, 0, False),
        (1, 1, 0, True),
        (1, 3, 0, True),
        (1, 3, 34, False),
        (1, 3, "33", True),
        (2, 4, 50, False),
        (3, 4, 50, True),
        (0, 0, 0, False),
    ],
)
def test_the_rollout_stops_when_the_failed_share_is_above_the_percentage(failed, total, percentage, stops):
    assert over_share(failed, total, percentage) is stops


@pytest.mark.parametrize("percentage", [-1, 101, "many", None, True])
def test_a_percentage_out_of_range_is_refused(percentage):
    with pytest.raises(RolloutError, match="ds4_upgrade_max_fail_percentage is a number from 0 to 100"):
        over_share(1, 2, percentage)


def reading(release, answering=True, started=100):
    return {
        "current": {"release": release},
        "engine": {"answering": answering},
        "service": {"main_pid": 4000 + started, "started_monotonic_us": started * 10**6},
    }


STAGED = {"staged": True}


def test_a_switched_spark_serves_its_target():
    out = upgrade_outcome(
        "v0.6.5",
        before=reading("v0.6.3"),
        after=reading("v0.6.5", started=200),
        stage=STAGED,
        switch={"ok": True, "drain": {"message": "no request in flight (/metrics)"}},
    )
    assert out == {
        "target": "v0.6.5",
        "before": "v0.6.3",
        "after": "v0.6.5",
        "outcome": "switched",
        "detail": "v0.6.3 -> v0.6.5; serving v0.6.5",
        "drain": {"message": "no request in flight (/metrics)"},
    }


def test_a_spark_already_on_its_target_and_not_restarted_is_unchanged():
    out = upgrade_outcome("v0.6.5", reading("v0.6.5"), reading("v0.6.5"), STAGED, {"ok": True})
    assert out["outcome"] == "unchanged"
    # Restarted on the same release (a new model set): switched.
    out = upgrade_outcome("v0.6.5", reading("v0.6.5"), reading("v0.6.5", started=300), STAGED, {"ok": True})
    assert out["outcome"] == "switched"


# A family swap on one release (issue 53): 0731 to Vision-Exp, as the engine's /v1/stats names its model.
OLD_MODEL = "/var/lib/ds4/gguf/DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
NEW_MODEL = "/var/lib/ds4/gguf/DeepSeek-V4-Flash-Vision-Exp-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8.gguf"


def serving(release, model, started=100, answering=True):
    return {**reading(release, answering, started), "engine": {"answering": answering, "model": model}}


def test_a_family_swap_on_one_release_is_judged_by_the_model_the_engine_serves():
    before = serving("v0.6.5", OLD_MODEL)
    out = upgrade_outcome(
        "v0.6.5", before, serving("v0.6.5", NEW_MODEL, 300), STAGED, {"ok": True}, model=NEW_MODEL
    )
    assert out["outcome"] == "switched"
    assert out["detail"] == (
        "v0.6.5 -> v0.6.5, DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf -> "
        "DeepSeek-V4-Flash-Vision-Exp-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8.gguf; serving v0.6.5"
    )
    # Reported a success, yet the engine serves the family before: restarted or not, a failure.
    for started in (100, 300):
        after = serving("v0.6.5", OLD_MODEL, started)
        out = upgrade_outcome("v0.6.5", before, after, STAGED, {"ok": True}, model=NEW_MODEL)
        assert out["outcome"] == "failed", started
        assert out["detail"] == (
            "the switch to v0.6.5 reported success, yet the engine serves "
            "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf, not "
            "DeepSeek-V4-Flash-Vision-Exp-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8.gguf"
        )
    # Already on the model and the release, not restarted: unchanged. An engine that names no model
    # (upstream serves no /v1/stats) is judged by its release alone, as before.
    after = serving("v0.6.5", NEW_MODEL)
    assert (
        upgrade_outcome("v0.6.5", after, after, STAGED, {"ok": True}, model=NEW_MODEL)["outcome"]
        == "unchanged"
    )
    silent = serving("v0.6.5", None, 300)
    out = upgrade_outcome("v0.6.5", serving("v0.6.5", None), silent, STAGED, {"ok": True}, model=NEW_MODEL)
    assert (out["outcome"], out["detail"]) == ("switched", "v0.6.5 -> v0.6.5; serving v0.6.5")


def test_a_reported_success_that_the_spark_contradicts_is_a_failure():
    out = upgrade_outcome("v0.6.5", reading("v0.6.3"), reading("v0.6.3"), STAGED, {"ok": True})
    assert out["outcome"] == "failed"
    assert out["detail"] == "the switch to v0.6.5 reported success, yet serving v0.6.3"


def test_a_failed_switch_back_on_the_old_release_and_serving_is_rolled_back():
    message = (
        'Activation of v0.6.6 failed at "Ask the engine the smoke question: ...".\nRolled back to v0.6.3 ...'
    )
    out = upgrade_outcome(
        "v0.6.6",
        reading("v0.6.3"),
        reading("v0.6.3", started=300),
        STAGED,
        {"ok": False, "message": message},
    )
    assert out["outcome"] == "rolled back"
    assert out["detail"] == (
        'Activation of v0.6.6 failed at "Ask the engine the smoke question: ..."; rolled back, serving v0.6.3'
    )


def test_a_failure_outside_the_activation_is_told_by_its_task():
    switch = {
        "ok": False,
        "task": "Take the Spark out of the load balancer",
        "message": "non-zero return code",
    }
    out = upgrade_outcome("v0.6.5", reading("v0.6.3"), reading("v0.6.3"), STAGED, switch)
    assert out["outcome"] == "not switched"
    assert out["detail"] == (
        "Take the Spark out of the load balancer: non-zero return code; serving v0.6.3, not restarted"
    )


def test_a_failed_switch_that_does_not_serve_is_a_failure():
    out = upgrade_outcome(
        "v0.6.6", reading("v0.6.3"), reading("v0.6.3", answering=False), STAGED, {"ok": False}
    )
    assert out["outcome"] == "failed"
    assert out["detail"] == "the switch failed; NOT serving (current: v0.6.3)"


def test_sparks_not_staged_or_not_switched_say_why_and_what_they_serve():
    out = upgrade_outcome(
        "v0.6.7", reading("v0.6.3"), reading("v0.6.3"), {"staged": False, "message": "build failed\nlog"}
    )
    assert (out["outcome"], out["detail"]) == ("not staged", "staging failed (build failed); serving v0.6.3")
    out = upgrade_outcome("v0.6.5", reading("v0.6.3"), reading("v0.6.3"), STAGED, None, "the rollout stopped")
    assert (out["outcome"], out["detail"]) == ("not switched", "the rollout stopped; serving v0.6.3")
    out = upgrade_outcome("v0.6.5", reading("v0.6.3"), None, STAGED)
    assert out["outcome"] == "unreachable"


def test_a_pairs_worker_serves_through_its_coordinator():
    # The worker has no HTTP API: its own reading never answers; the pair answers through its coordinator.
    coordinator = reading("v0.6.5", started=200)
    out = upgrade_outcome("v0.6.5", reading("v0.6.3", answering=False), reading("v0.6.5", answering=False,
                          started=200), STAGED, {"ok": True}, through=coordinator)  # fmt: skip
    assert (out["outcome"], out["detail"]) == ("switched", "v0.6.3 -> v0.6.5; serving v0.6.5")
    # Rolled back with its coordinator, both back on v0.6.3 and the pair answering.
    message = "the pair's coordinator spark04 did not pass its smoke test on v0.6.6, so spark05 goes back"
    out = upgrade_outcome("v0.6.6", reading("v0.6.3", answering=False), reading("v0.6.3", answering=False,
                          started=300), STAGED, {"ok": False, "message": message},
                          through=reading("v0.6.3", started=300))  # fmt: skip
    assert out["outcome"] == "rolled back"
    # A coordinator that does not answer: the worker does not serve either.
    silent = reading("v0.6.5", answering=False)
    out = upgrade_outcome("v0.6.5", reading("v0.6.3", answering=False), reading("v0.6.5", answering=False,
                          started=200), STAGED, {"ok": True}, through=silent)  # fmt: skip
    assert out["outcome"] == "failed"


def test_the_filters_wrap_errors_for_ansible():
    filters = FilterModule().filters()
    assert filters["upgrade_batches"](["a", "b"], 1) == [["a"], ["b"]]
    assert filters["over_fail_share"](1, 2, 40) is True
    with pytest.raises(AnsibleFilterError, match="ds4_upgrade_serial is empty"):
        filters["upgrade_batches"](["a"], [])
