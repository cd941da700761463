"""The fleet report on the controller: records that say where configuration and engine disagree
(module_utils/_fleet/status.py), and the table (module_utils/_fleet/table.py)."""

import json
import re

import pytest
from ansible.plugins.loader import callback_loader
from ansible_collections.ds4.fleet.plugins.filter.ds4_fleet import FilterModule
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.status import (
    StatusError,
    fleet_record,
    fleet_records,
)
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.table import (
    human_context,
    human_duration,
    render_table,
)

BASE = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
GIB = 1024**3


def fact(**over):
    base = {
        "release": "v0.6.5",
        "generation": "0731",
        "speculation": "dspark",
        "context": 524288,
        "host": "127.0.0.1",
        "port": 8000,
        "models": {"base": BASE, "dspark": "DSpark-drafter-Q2K-Q8-0731.gguf"},
        "update": {
            "status": "ok",
            "running": "v0.6.3",
            "latest": "v0.6.5",
            "update_available": True,
            "checked_at": "2026-09-01T03:00:00Z",
            "error": None,
        },
    }
    base.update(over)
    return base


def reading(release="v0.6.5", answering=True, active="active", **engine):
    return {
        "current": {"link": "/opt/ds4/current", "release": release, "commit": "b" * 40, "stamp_error": None},
        "previous": {"release": "v0.6.3"},
        "current_changed_since_start": False,
        "service": {"name": "ds4.service", "load_state": "loaded", "active_state": active, "started_at": 1.0},
        "engine": dict(
            {
                "url": "http://127.0.0.1:8000",
                "answering": answering,
                "requests_inflight": 0 if answering else None,
                "uptime_seconds": 3725.4 if answering else None,
                "context": 524288 if answering else None,
                "model": f"/var/lib/ds4/gguf/{BASE}" if answering else None,
                "error": None
                if answering
                else "http://127.0.0.1:8000/v1/stats could not be reached: refused",
            },
            **engine,
        ),
        "disk": {"path": "/var/lib/ds4/gguf", "free_bytes": 77 * GIB + GIB // 2, "total_bytes": 100 * GIB},
    }


def test_a_record_tells_what_runs_and_compares_the_latest_release_with_it():
    record = fleet_record("spark01", reading(), fact())
    assert record["service"] == "active" and record["release"] == "v0.6.5" and record["answering"]
    # The check ran while v0.6.3 ran and said "update"; v0.6.5 runs now, so there is none.
    assert record["update"]["available"] is False and record["update"]["latest"] == "v0.6.5"
    assert record["notes"] == []
    record = fleet_record("spark02", reading("v0.6.3"), fact(release="v0.6.3"))
    assert record["update"]["available"] is True


def test_a_release_pinned_by_commit_takes_the_check_s_verdict_on_its_followed_branch():
    name = "dwarfstar-g67bd55c0a1b2"
    moved = {"status": "ok", "running": name, "latest": "main@0123456789ab", "update_available": True}
    record = fleet_record("spark01", reading(name), fact(release=name, update=moved))
    assert record["release"] == name and record["update"]["available"] is True
    assert record["update"]["latest"] == "main@0123456789ab"
    # A verdict about another release (the one that ran before an upgrade) says nothing of this one.
    stale = dict(moved, running="g111111111111")
    assert (
        fleet_record("spark01", reading(name), fact(release=name, update=stale))["update"]["available"]
        is None
    )


def test_an_update_check_that_failed_falls_back_to_its_last_good_result():
    update = {
        "status": "error",
        "latest": None,
        "error": "cannot reach feed",
        "last_ok": {"latest": "v0.6.5.1"},
    }
    record = fleet_record("spark01", reading(), fact(update=update))
    assert record["update"] == {
        "available": True,
        "latest": "v0.6.5.1",
        "checked_at": None,
        "error": "cannot reach feed",
    }
    assert fleet_record("spark01", reading(), fact(update=None))["update"]["available"] is None


def test_a_record_names_the_family_generation_and_quantization_configured():
    glm = fact(family="glm-5.3-flash", generation="glm-5.3", quantization="q2", speculation="mtp")
    for record in (fleet_record("spark01", reading(), glm), fleet_record("spark01", None, glm)):
        named = (record["family"], record["generation"], record["quantization"])
        assert named == ("glm-5.3-flash", "glm-5.3", "q2")
    # A fact written before families were recorded is of V4 Flash, the one family there was; its
    # quantization went unrecorded (a pair may serve q4), so none is claimed.
    record = fleet_record("spark01", reading(), fact())
    assert (record["family"], record["quantization"]) == ("deepseek-v4-flash", None)
    assert fleet_record("spark01", None, {})["family"] is None


def test_disagreements_between_configuration_and_engine_become_notes():
    r = reading("v0.6.5", context=4096, model="/var/lib/ds4/gguf/other.gguf")
    r["current_changed_since_start"] = True
    notes = fleet_record("spark01", r, fact(release="v0.6.6"))["notes"]
    assert notes == [
        "current was switched after the engine started: it still runs the release before",
        "the local fact says v0.6.6, but current points at v0.6.5",
        "the engine runs context 4096, the service is configured for 524288",
        f"the engine serves other.gguf, the service is configured for {BASE}",
    ]


def test_an_active_unit_whose_engine_does_not_answer_is_not_called_serving():
    record = fleet_record("spark01", reading(answering=False), fact())
    assert record["service"] == "active, not answering" and not record["answering"]
    assert record["context"] == 524288  # the configured one, as the engine cannot say
    assert record["notes"][0].startswith("ds4.service is active but http://127.0.0.1:8000 does not answer")


def test_a_spark_that_could_not_be_read_is_unreachable():
    record = fleet_record("spark03", None, fact(), error="Failed to connect to the host via ssh")
    assert record["service"] == "unreachable" and record["release"] is None and not record["reachable"]
    assert record["notes"] == ["could not be read: Failed to connect to the host via ssh"]


def test_records_follow_the_host_order_and_fill_in_sparks_without_an_entry():
    entries = [{"host": "spark02", "reading": reading(), "fact": fact()}]
    records = fleet_records(entries, hosts=["spark01", "spark02"])
    assert [r["host"] for r in records] == ["spark01", "spark02"]
    assert records[0]["service"] == "unreachable"
    assert records[0]["notes"] == [
        "could not be read: the Spark dropped out of the play (unreachable or failed)"
    ]


def test_bad_input_is_refused_naming_it():
    with pytest.raises(StatusError, match="needs a host name"):
        fleet_record("", reading())
    with pytest.raises(StatusError, match="lacks 'engine'"):
        fleet_record("spark01", {"current": {}, "previous": {}, "service": {}, "disk": {}})
    with pytest.raises(StatusError, match="needs a list of entries"):
        fleet_records("spark01")
    with pytest.raises(StatusError, match="needs a list of hosts"):
        fleet_records([], hosts="spark01")


# --- the table ---


@pytest.mark.parametrize(
    ("function", "value", "text"),
    [
        (human_duration, None, "-"),
        (human_duration, 42.9, "42s"),
        (human_duration, 3725.4, "1h02m"),
        (human_duration, 125, "2m05s"),
        (human_duration, 3 * 86400 + 4 * 3600 + 7, "3d04h"),
        (human_context, 524288, "512K"),
        (human_context, 4096, "4K"),
        (human_context, 1000, "1000"),
        (human_context, None, "-"),
    ],
)
def test_values_are_shown_for_people(function, value, text):
    assert function(value) == text


def last_panel(lines):
    """The lines from the last panel's header on (the table's last columns)."""
    heads = [number for number, line in enumerate(lines) if line.startswith("HOST ")]
    return lines[heads[-1] :]


def test_the_table_is_aligned_and_ends_with_notes_and_a_tally():
    records = fleet_records(
        [
            {"host": "spark01", "reading": reading(), "fact": fact(quantization="q2")},
            {
                "host": "spark02",
                "reading": reading("v0.6.3"),
                "fact": fact(release="v0.6.3", quantization="q2"),
            },
            {
                "host": "spark03",
                "reading": reading("v0.6.3", answering=False, active="failed"),
                "fact": fact(),
            },
        ]
    )
    assert render_table(records, "ds4 fleet") == [
        "ds4 fleet",
        "HOST     SERVICE  RELEASE  FAMILY             GEN   QUANT",
        "spark01  active   v0.6.5   deepseek-v4-flash  0731  q2",
        "spark02  active   v0.6.3   deepseek-v4-flash  0731  q2",
        "spark03  failed   v0.6.3   deepseek-v4-flash  0731  -",
        "",
        "HOST     SPEC    CONTEXT  UPDATE  UPTIME  IN FLIGHT  FREE DISK",
        "spark01  dspark  512K     no      1h02m   0          77.5 GiB",
        "spark02  dspark  512K     v0.6.5  1h02m   0          77.5 GiB",
        "spark03  dspark  512K     v0.6.5  -       -          77.5 GiB",
        "spark03: the local fact says v0.6.5, but current points at v0.6.3",
        "3 Sparks: 1 serving v0.6.5, 1 serving v0.6.3, 1 not serving",
    ]


def test_after_an_upgrade_the_table_has_its_outcome_and_detail():
    upgrade = {"outcome": "rolled back", "detail": "smoke test failed; rolled back, serving v0.6.3"}
    records = FilterModule().filters()["fleet_status"](
        [
            {
                "host": "spark01",
                "reading": reading("v0.6.3"),
                "fact": fact(release="v0.6.3"),
                "upgrade": upgrade,
            }
        ]
    )
    lines = last_panel(FilterModule().filters()["fleet_status_table"](records))
    assert lines[0].endswith("FREE DISK  UPGRADE")
    assert lines[1].endswith("77.5 GiB   rolled back")
    assert lines[2] == "spark01: smoke test failed; rolled back, serving v0.6.3"
    assert records[0]["upgrade"] == upgrade
    upgrade = dict(upgrade, cleanup_error="Remove the releases beyond ds4_releases_keep: busy")
    record = fleet_record("spark01", reading(), fact(), upgrade)
    assert record["notes"] == [
        "the cleanup after the switch failed: Remove the releases beyond ds4_releases_keep: busy"
    ]
    # The record is plain data: the JSON for scripts is the record itself.
    assert json.loads(json.dumps(records)) == records


# --- speed ---


def measurement(release, verdict, prefill, decode, change=None, against=None, commit="b" * 40):
    return {
        "release": release,
        "commit": commit,
        "verdict": verdict,
        "prefill_tps": prefill,
        "decode_tps": decode,
        "measured_at": 1.0,
        "baseline": {"release": against} if against else None,
        "change_pct": change,
        "message": f"{release} measured",
    }


def test_the_table_shows_the_speed_of_what_runs_and_its_change_against_the_release_before():
    perf = {
        "format": 1,
        "history": [
            measurement("v0.6.3", "baseline", 3990.4, 301.2, commit=None),
            measurement("v0.6.5", "passed", 3811.0, 286.6, {"prefill": -4.5, "decode": -4.8}, "v0.6.3"),
            measurement("v0.6.6", "rolled-back", 3990.0, 200.3, {"prefill": 4.7, "decode": -30.1}, "v0.6.5"),
        ],
    }
    records = fleet_records(
        [
            {"host": "spark01", "reading": reading(), "fact": fact(), "perf": perf},
            {"host": "spark02", "reading": reading("v0.6.3"), "fact": fact(release="v0.6.3"), "perf": perf},
            {"host": "spark03", "reading": reading(), "fact": fact()},
        ]
    )
    assert records[0]["perf"] == {
        "release": "v0.6.5",
        "prefill_tps": 3811.0,
        "decode_tps": 286.6,
        "measured_at": 1.0,
        "verdict": "passed",
        "against": "v0.6.3",
        "prefill_change_pct": -4.5,
        "decode_change_pct": -4.8,
    }
    assert records[0]["notes"] == ["rolled back as too slow: v0.6.6 measured"]
    assert records[1]["perf"]["against"] is None and records[2]["perf"] is None
    lines = last_panel(render_table(records))
    assert lines[0].endswith("PREFILL TOK/S  DECODE TOK/S")
    assert lines[1].endswith("77.5 GiB   3811 (-4.5%)   287 (-4.8%)")
    assert lines[2].endswith("77.5 GiB   3990           301")
    assert lines[3].endswith("77.5 GiB   -              -")


def test_a_release_kept_slower_under_warn_is_noted_and_a_moved_tag_has_no_figures():
    perf = {"history": [measurement("v0.6.5", "kept-slower", 100.0, 10.0, {"prefill": 0, "decode": -40.0})]}
    record = fleet_record("spark01", reading(), fact(), perf=perf)
    assert record["notes"] == ["runs slower than the release before it: v0.6.5 measured"]
    moved = {"history": [measurement("v0.6.5", "passed", 100.0, 10.0, commit="c" * 40)]}
    assert fleet_record("spark01", reading(), fact(), perf=moved)["perf"] is None
    for broken in ({"history": "none"}, [], {"history": ["x", None]}):
        assert fleet_record("spark01", reading(), fact(), perf=broken)["perf"] is None


def verification(verdict, lowest, cause=None):
    return {
        "format": 1,
        "verified_at": 1700000000.0,
        "release": "v0.6.5",
        "verdict": verdict,
        "lowest_ratio": lowest,
        "min_ratio": 0.8,
        "slow": ["aggregate_12"] if verdict == "slow" else [],
        "causes": [{"cause": cause, "figures": ["aggregate_12"], "text": "..."}] if cause else [],
        "figures": [{"figure": "prefill_2k", "ratio": 0.97}, {"figure": "aggregate_12", "ratio": lowest}],
    }


def test_the_last_verification_is_in_the_record_the_table_and_for_a_slow_spark_a_note():
    ok = fleet_record("spark01", reading(), fact(), verify=verification("ok", 0.93))
    assert ok["verify"]["verdict"] == "ok" and ok["verify"]["ratios"] == {
        "prefill_2k": 0.97,
        "aggregate_12": 0.93,
    }
    assert ok["notes"] == []
    slow = fleet_record("spark02", reading(), fact(), verify=verification("slow", 0.5, "gpu-throttled"))
    assert slow["notes"] == [
        "verified slow (v0.6.5): lowest 0.5 of the published figures, below ds4_verify_min_ratio 0.8; "
        "most likely: gpu-throttled (playbooks/verify.yml says more)"
    ]
    never = fleet_record("spark03", reading(), fact())
    assert never["verify"] is None
    table = last_panel(render_table([ok, slow, never]))
    assert table[0].endswith("VERIFIED")
    assert table[1].endswith("ok 0.93") and table[2].endswith("SLOW 0.50") and table[3].endswith("-")
    # No column while no Spark was verified.
    assert "VERIFIED" not in render_table([never])
    records = fleet_records([{"host": "spark01", "reading": reading(), "verify": verification("ok", 0.9)}])
    assert records[0]["verify"]["lowest_ratio"] == 0.9


def printed(lines, result_format):
    """The lines as Ansible's default callback prints a debug task's msg, in that result format."""
    callback = callback_loader.get("default")
    callback.set_options(direct={"result_format": result_format, "pretty_results": True})
    return callback._dump_results({"msg": lines}, indent=4).splitlines()


@pytest.mark.parametrize("result_format", ["yaml", "json"])
def test_no_row_of_the_widest_table_folds_in_either_result_format(result_format):
    """The project's ansible.cfg prints results as YAML, whose dumper folds a line longer than about 80
    characters at a space ("FREE" on one line, "DISK" on the next); Ansible's default prints JSON. Each
    row of the table, every column shown and long host names, comes out whole on one printed line."""
    perf = {"history": [measurement("v0.6.5", "passed", 3811.0, 286.6, {"prefill": -4.5, "decode": -4.8})]}
    hosts = [f"spark-rack{n:02d}-node{n:02d}.example.org" for n in (1, 12)]
    records = fleet_records(
        [
            {
                "host": host,
                "reading": reading(),
                "fact": fact(),
                "perf": perf,
                "verify": verification("slow", 0.5),
                "upgrade": {"outcome": "not switched", "detail": "the rollout stopped"},
            }
            for host in hosts
        ]
    )
    table = render_table(records, "ds4 fleet")
    rows = [line for line in table if line.startswith(("HOST ", *(f"{host}  " for host in hosts)))]
    headings = {cell for row in rows for cell in re.split(r"\s{2,}", row)}
    assert {"UPGRADE", "VERIFIED", "DECODE TOK/S", "FREE DISK"} <= headings
    assert len([row for row in rows if row.startswith(hosts[1])]) >= 1
    output = printed(table, result_format)
    assert [row for row in rows if not any(row in line for line in output)] == []


def test_a_running_release_built_without_the_spark_target_is_noted_with_its_reason():
    built = {
        "build_target": {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]},
        "make_target_reason": "because its Makefile has no cuda-spark target",
    }
    read = reading()
    read["current"]["build"] = built
    record = fleet_record("spark01", read, fact())
    assert record["build"] == {
        "arch": "sm_121",
        "make_target": "cuda",
        "make_args": ["CUDA_ARCH=sm_121"],
        "reason": "because its Makefile has no cuda-spark target",
        "without_spark_target": True,
    }
    assert (
        "the running release was built without the Spark target (make cuda CUDA_ARCH=sm_121): because its "
        "Makefile has no cuda-spark target"
    ) in record["notes"]
    read["current"]["build"] = dict(
        built, build_target={"arch": "sm_121", "make_target": "cuda-spark", "make_args": []}
    )
    record = fleet_record("spark01", read, fact())
    assert record["build"]["without_spark_target"] is False
    assert not any("Spark target" in note for note in record["notes"])
