"""The progress lines the ds4_hub_wait action prints while weight files download (plugins/action)."""

from ansible_collections.ds4.fleet.plugins.action.ds4_hub_wait import describe, human_seconds


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
    # The engine build's progress file (module_utils/ds4_release_build.py) carries its own line.
    line = "building v0.6.5, 1 min 05 s in: `make cuda CUDA_ARCH=sm_121 -j20`; last log line: LD ds4"
    assert describe({"state": "building", "updated": 1.0, "message": line}) == line
