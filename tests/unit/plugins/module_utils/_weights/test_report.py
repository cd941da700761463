"""module_utils/_weights/report.py: the weights role's plan, outcome and cleanup lines."""

from __future__ import annotations

from ansible_collections.ds4.fleet.plugins.module_utils._weights.report import (
    cleanup_lines,
    outcome_lines,
    plan_lines,
)

PLAN = {
    "message": "fetch 1 file(s), 1.0 GiB. /var/lib/ds4/gguf: 9.0 GiB free",
    "fetch": [
        {"name": "new.gguf", "bytes": 1234567, "resume_from": 1000, "replaces": False},
        {"name": "draft.gguf", "bytes": 20, "resume_from": 0, "replaces": True},
    ],
    "adopt": [{"src": "/home/u/gguf/a.gguf", "action": "copy", "partial": True}],
    "remove_before": [{"path": "/g/old.gguf", "bytes": 5000}],
    "remove_after_smoke": [{"path": "/g/old-draft.gguf", "bytes": 70}],
    "keep": [
        {"name": "base.gguf", "reason": "wanted, already present"},
        {"name": "mtp.gguf", "reason": "in use by the running service"},
    ],
}


def test_the_plan_says_each_action_on_its_own_line():
    assert plan_lines(PLAN) == [
        "fetch 1 file(s), 1.0 GiB. /var/lib/ds4/gguf: 9.0 GiB free",
        "fetch new.gguf: 1,234,567 bytes, resuming at byte 1,000",
        "fetch draft.gguf: 20 bytes, replacing a file of the wrong size",
        "adopt /home/u/gguf/a.gguf: copy it in from its filesystem as a partial download, to resume",
        "remove now /g/old.gguf (5,000 bytes): the new files do not fit beside it",
        "remove after the smoke test /g/old-draft.gguf (70 bytes)",
        "have base.gguf",
        "keep mtp.gguf: in use by the running service",
    ]


def test_check_mode_says_so_first_and_counts_what_would_be_fetched():
    lines = plan_lines(PLAN, check_mode=True)
    assert lines[0].startswith("Check mode, nothing is changed: fetch 1 file(s)")
    assert lines[-1] == "would fetch 1,234,587 bytes in 2 file(s)"


def test_a_plan_with_nothing_to_do_is_its_summary_alone():
    assert plan_lines({"message": "every file is here", "fetch": [], "adopt": [], "keep": []}) == [
        "every file is here"
    ]


def test_each_outcome_says_how_many_bytes_came_from_where():
    results = [
        {
            "path": "/g/new.gguf",
            "action": "resumed",
            "bytes_fetched": 2000000,
            "resumed_from": 1000,
            "elapsed_s": 1.5,
            "rate_bps": 1333333,
            "source": "10.0.0.2",
            "bytes_from": {"hub": 5, "10.0.0.2": 1999995},
            "sha256": "ab",
            "commit": "c1",
        },
        {"path": "/g/base.gguf", "action": "verified", "sha256": "cd", "commit": "c2"},
        {
            "path": "/g/d.gguf",
            "action": "fetched",
            "bytes_fetched": 10,
            "resumed_from": 0,
            "elapsed_s": 0.1,
            "rate_bps": 100,
            "source": "hub",
            "bytes_from": {"hub": 10},
            "sha256": "ef",
            "commit": "c3",
        },
    ]
    assert outcome_lines(results) == [
        "/g/new.gguf: resumed, 2,000,000 bytes after the 1,000 already on disk in 1.5 s at 1.3 MB/s"
        " from the peer 10.0.0.2 (10.0.0.2: 1999995 bytes, hub: 5 bytes); sha256 ab, commit c1",
        "/g/base.gguf: verified; sha256 cd, commit c2",
        "/g/d.gguf: fetched, 10 bytes in 0.1 s at 0.0 MB/s from the hub; sha256 ef, commit c3",
    ]


def test_the_cleanup_says_what_it_removed_and_what_it_kept():
    assert cleanup_lines(PLAN) == [
        "removed /g/old-draft.gguf (70 bytes) and its partial download and records",
        "kept mtp.gguf: in use by the running service",
    ]


def test_a_cleanup_with_nothing_of_another_generation_says_so():
    plan = {"remove_after_smoke": [], "keep": [{"name": "base.gguf", "reason": "wanted, already present"}]}
    assert cleanup_lines(plan) == ["nothing of another generation is here"]
