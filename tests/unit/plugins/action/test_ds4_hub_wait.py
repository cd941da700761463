"""The progress lines the ds4_hub_wait action prints while weight files download (plugins/action)."""

import pytest
from ansible.errors import AnsibleActionFail
from ansible_collections.ds4.fleet.plugins.action import ds4_hub_wait
from ansible_collections.ds4.fleet.plugins.action.ds4_hub_wait import (
    ActionModule,
    _check,
    _outcome,
    _pending,
    describe,
    human_seconds,
)


def test_durations_read_as_a_person_would_say_them():
    assert [human_seconds(s) for s in (46.2, 200, 8000)] == ["46 s", "3 min 20 s", "2 h 13 min"]


def test_a_fetch_line_says_how_far_how_fast_and_how_long():
    line = describe(
        {"state": "fetching", "bytes_done": 41231687680, "total": 86720111488, "resumed_from": 20401094656,
         "rate_bps": 985432112, "eta_s": 46.2, "attempt": 1, "connections": 16}
    )  # fmt: skip
    assert line == (
        "fetching 38.4 GiB of 80.8 GiB (47%), 939.8 MiB/s, 46 s left over 16 connections,"
        " resumed with 20,401,094,656 bytes on disk"
    )


def test_a_retry_says_which_attempt_and_why():
    line = describe(
        {"state": "retrying", "bytes_done": 1024, "total": 2048, "rate_bps": 0, "eta_s": None, "attempt": 3,
         "error": "HTTP 503"}
    )  # fmt: skip
    assert line == "retrying 1.0 KiB of 2.0 KiB (50%), attempt 3 (HTTP 503)"


def test_a_record_with_a_message_is_printed_as_it_stands():
    # The engine build's progress file (module_utils/_engine/release_build.py) carries its own line.
    line = "building v0.6.5, 1 min 05 s in: `make cuda CUDA_ARCH=sm_121 -j20`; last log line: LD ds4"
    assert describe({"state": "building", "updated": 1.0, "message": line}) == line


def _args(jobs, progress_files, labels=None, interval=20.0):
    return {"jobs": jobs, "progress_files": progress_files, "labels": labels, "interval": interval}


def test_jobs_and_progress_files_must_pair_up_and_the_interval_be_positive():
    with pytest.raises(AnsibleActionFail, match=r"jobs \(1\) and progress_files \(2\) must pair up"):
        _check(_args([{}], ["a", "b"]))
    with pytest.raises(AnsibleActionFail, match=r"jobs \(1\) and labels \(0\) must pair up"):
        _check(_args([{}], ["a"], labels=[]))
    with pytest.raises(AnsibleActionFail, match="interval must be a positive number of seconds, got 0"):
        _check(_args([{}], ["a"], interval=0))


def test_skipped_jobs_are_left_out_and_each_job_is_named_by_its_file():
    jobs = [
        {"skipped": True},
        {"ansible_job_id": "1.1", "item": {"name": "base.gguf"}, "results_file": "/r/1.1"},
        {"ansible_job_id": "1.2", "item": "not a mapping"},
    ]
    pending = _pending(_args(jobs, ["/p/0", "/p/1", "/p/2"]))
    assert [(j["jid"], j["label"], j["progress_file"], j["results_file"]) for j in pending] == [
        ("1.1", "base.gguf", "/p/1", "/r/1.1"),
        ("1.2", "/p/2", "/p/2", None),
    ]
    assert _pending(_args(jobs[1:2], ["/p/1"], labels=["the base"]))[0]["label"] == "the base"
    with pytest.raises(AnsibleActionFail, match="not an async job started with poll 0"):
        _pending(_args([{"changed": False}], ["/p/0"]))


def test_the_outcome_keeps_each_result_with_its_item_and_names_the_failed_files():
    ok = (
        {"label": "a", "item": {"name": "a"}},
        {"finished": 1, "changed": True, "invocation": {}, "sha256": "x"},
    )
    bad = (
        {"label": "b", "item": {"name": "b"}},
        {"finished": 1, "failed": True, "msg": "HTTP 404", "warnings": ["w"]},
    )
    assert _outcome([ok]) == {
        "changed": True,
        "results": [{"finished": 1, "changed": True, "sha256": "x", "item": {"name": "a"}}],
        "msg": "1 file(s) verified",
    }
    both = _outcome([ok, bad])
    assert (both["failed"], both["msg"], both["warnings"]) == (True, "b: HTTP 404", ["w"])


def test_while_it_waits_it_touches_the_heartbeat_the_jobs_watch(monkeypatch):
    """Issue 55, finding 1: the jobs end once their run is gone, which they tell by this file's age."""
    action = object.__new__(ActionModule)
    calls, statuses = [], iter([{"finished": False}, {"finished": False}, {"finished": True}])

    def module(name, **args):
        calls.append((name, args))
        return next(statuses) if args.get("mode") == "status" else {}

    monkeypatch.setattr(action, "_module", module)
    monkeypatch.setattr(ds4_hub_wait.time, "sleep", lambda s: None)
    action._heartbeat, action._beaten = "/run/beat", None
    action._async_dir = "/a"
    action._wait([{"jid": "1.1", "label": "f"}], 3600)
    touches = [args for name, args in calls if name == "file"]
    assert touches == [{"path": "/run/beat", "state": "touch", "mode": "0600", "follow": False}], (
        "touched once at the start, then not within HEARTBEAT_EVERY"
    )
