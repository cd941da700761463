"""Verification against the published figures: the catalog's reference (own and inherited), the workloads on
a canned stream (no engine, no clock but the test's), the readers of the GPU's and the host's state, the
verdict and the order of the causes, and the lines an operator reads."""

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._perf import figures as ds4_verify
from ansible_collections.ds4.fleet.plugins.module_utils._perf.figures import (
    VerifyError,
    judge,
    measure_figures,
    memory_state,
    native_archs,
    parse_gpu_apps,
    parse_gpu_state,
    report_lines,
    speculation_running,
    summary_of,
    unit_environment,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.gpu_health import parse_gpus
from ansible_collections.ds4.fleet.plugins.module_utils._weights import catalog as ds4_catalog
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import (
    CatalogError,
    reference_figures,
)
from module_runner import run_module

FILE = {"repo": "o/r", "revision": "main", "size": None, "sha256": None}
PUBLISHED = {
    "prefill_2k": 960,
    "prefill_12k": 1010,
    "decode_2k": 20.0,
    "dspark_decode": 27.7,
    "aggregate_12": 59.0,
}


def catalog(reference=None):
    generation = {
        "files": {"base": dict(FILE, name="base-0731.gguf"), "dspark": dict(FILE, name="d-0731.gguf")}
    }
    if reference is not None:
        generation["reference"] = reference
    return {"0731": generation, "legacy": {"files": {"base": dict(FILE, name="base.gguf")}}}


REFERENCE = {
    "v0.5.0": {
        "source": "the fork's README",
        "stamp": "2026-08-01",
        "figures": PUBLISHED,
        "stamps": {"decode_2k": "v0.4.1", "dspark_decode": "v0.1.1"},
    }
}


# --- the catalog's reference ---------------------------------------------------------------------------


def test_a_release_with_figures_has_its_own_with_source_and_stamps():
    ref = reference_figures(catalog(REFERENCE), "0731", "v0.5.0")
    assert (ref["release"], ref["inherited"], ref["stamp"]) == ("v0.5.0", False, "2026-08-01")
    assert ref["figures"] == PUBLISHED and ref["source"] == "the fork's README"
    assert ref["stamps"] == {
        "prefill_2k": "v0.5.0",
        "prefill_12k": "v0.5.0",
        "decode_2k": "v0.4.1",
        "dspark_decode": "v0.1.1",
        "aggregate_12": "v0.5.0",
    }


def test_a_release_without_figures_inherits_the_nearest_earlier_and_says_so():
    two = dict(REFERENCE, **{"v0.6.3": dict(REFERENCE["v0.5.0"], figures={"prefill_2k": 999}, stamps={})})
    ref = reference_figures(catalog(two), "0731", "v0.6.5.1")
    assert (ref["release"], ref["inherited"], ref["figures"]) == ("v0.6.3", True, {"prefill_2k": 999})
    assert ref["note"] == "v0.6.5.1 has no published figures of its own; those of v0.6.3 stand for it"
    assert reference_figures(catalog(two), "0731", "v0.6.2")["release"] == "v0.5.0"
    # A release pinned by commit has no place in the tags' order: it inherits nothing.
    assert reference_figures(catalog(two), "0731", "dwarfstar-g67bd55c0a1b2") is None


def test_no_figures_before_the_first_published_nor_for_a_generation_without_any():
    assert reference_figures(catalog(REFERENCE), "0731", "v0.4.9") is None
    assert reference_figures(catalog(REFERENCE), "legacy", "v0.6.5") is None


def test_the_shipped_catalog_carries_the_published_figures(shipped_catalog):
    ref = reference_figures(shipped_catalog, "0731", "v0.6.5")
    assert ref["release"] == "v0.5.0" and ref["inherited"] and ref["figures"] == PUBLISHED


@pytest.fixture
def shipped_catalog():
    import pathlib

    import yaml

    defaults = pathlib.Path(__file__).resolve().parents[5] / "roles/ds4_common/defaults/main.yml"
    return yaml.safe_load(defaults.read_text())["ds4_model_catalog"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"0.5.0": REFERENCE["v0.5.0"]}, "not a release tag"),
        ({"v0.5.0": dict(REFERENCE["v0.5.0"], source="")}, "['v0.5.0'].source"),
        ({"v0.5.0": dict(REFERENCE["v0.5.0"], figures={"decode_4k": 1})}, "unknown figures ['decode_4k']"),
        (
            {"v0.5.0": dict(REFERENCE["v0.5.0"], figures={"decode_2k": 0})},
            "figures.decode_2k must be a positive",
        ),
        ({"v0.5.0": dict(REFERENCE["v0.5.0"], stamps={"decode_2k": "old"})}, "['v0.5.0'].stamps"),
        ([], "mapping of engine release"),
    ],
)
def test_a_bad_reference_is_refused_naming_it(change, named):
    with pytest.raises(CatalogError, match=None) as caught:
        reference_figures(catalog(change), "0731", "v0.6.5")
    assert named in str(caught.value) and "ds4_model_catalog['0731'].reference" in str(caught.value)


# --- the workloads --------------------------------------------------------------------------------------


class Engine:
    """A canned stream at fixed speeds: prefill and decode seconds from the prompt's size."""

    def __init__(self, prefill_tps, decode_tps):
        self.prefill_tps, self.decode_tps, self.prompts = prefill_tps, decode_tps, []

    def __call__(self, base_url, prompt, max_tokens, timeout):
        self.prompts.append(prompt)
        words = len(prompt.split())
        return {
            "prefill_s": words / self.prefill_tps,
            "decode_s": max_tokens / self.decode_tps,
            "usage": {"prompt_tokens": words, "completion_tokens": max_tokens},
        }


def test_the_workloads_measure_each_figure_from_the_engines_own_counts():
    engine = Engine(1000.0, 25.0)
    ticks = iter([0.0, 10.0, 100.0, 108.0])  # two aggregate runs: 10 s, then 8 s
    measured = measure_figures(
        "http://x",
        decode_tokens=64,
        concurrent=12,
        runs=2,
        timeout=5,
        stream=engine,
        clock=lambda: next(ticks),
    )
    assert measured["prefill_2k"] == measured["prefill_12k"] == 1000.0
    assert measured["decode"] == 25.0
    assert measured["aggregate_12"] == round(12 * 64 / 8.0, 1)  # the best run
    assert measured["problems"] == []
    # 2 runs of the 2k and 12k prompts, and 2 x 12 concurrent ones; a nonce in each.
    assert len(engine.prompts) == 2 * 2 + 2 * 12 and len(set(engine.prompts)) == len(engine.prompts)


def test_a_failed_concurrent_request_leaves_no_aggregate_and_says_why():
    def stream(base_url, prompt, max_tokens, timeout):
        if len(prompt.split()) < 500:
            raise OSError("refused")
        return Engine(1000.0, 25.0)(base_url, prompt, max_tokens, timeout)

    ticks = iter([0.0, 1.0])
    measured = measure_figures(
        "http://x", decode_tokens=8, concurrent=3, runs=1, timeout=5, stream=stream, clock=lambda: next(ticks)
    )
    assert measured["aggregate_12"] is None
    assert measured["problems"] == ["3 of 3 concurrent requests failed: refused"]


# --- the state ------------------------------------------------------------------------------------------


def test_the_gpu_state_and_its_processes_read_from_nvidia_smi():
    assert parse_gpu_state("0, 12.1, Enabled\n") == {
        "compute_cap": "12.1",
        "arch": "sm_121",
        "persistence": True,
    }
    assert parse_gpu_state("0, 9.0, Disabled\n")["persistence"] is False
    assert parse_gpu_state("") == {"compute_cap": None, "arch": None, "persistence": None}
    assert parse_gpu_apps("4242, python3, 2048\n17, ds4-server, [N/A]\n") == [
        {"pid": 4242, "name": "python3", "used_mib": 2048},
        {"pid": 17, "name": "ds4-server", "used_mib": None},
    ]


def test_memory_and_swap_from_meminfo():
    meminfo = (
        "MemTotal:       1000 kB\nMemAvailable:    40 kB\nSwapTotal:      500 kB\nSwapFree:       100 kB\n"
    )
    assert memory_state(meminfo) == {"total": 1024000, "available": 40960, "swap_used": 409600}
    assert memory_state("") == {"total": None, "available": None, "swap_used": None}


@pytest.mark.parametrize(
    ("argv", "env", "running"),
    [
        (["ds4-server", "--dspark", "/d.gguf"], {}, "dspark"),
        (["ds4-server"], {"DS4_CONT_DSPARK": "1", "DS4_DSPARK_MODEL": "/d.gguf"}, "dspark"),
        (["ds4-server"], {"DS4_CONT_DSPARK": "0", "DS4_DSPARK_MODEL": "/d.gguf"}, "plain"),
        (["ds4-server", "--no-dspark"], {"DS4_CONT_DSPARK": "1", "DS4_DSPARK_MODEL": "/d.gguf"}, "plain"),
        (["ds4-server", "--no-spec", "--dspark", "/d.gguf"], {}, "plain"),
        (["ds4-server", "--mtp", "/m.gguf"], {}, "mtp"),
        (["ds4-server"], {}, "plain"),
    ],
)
def test_the_running_engines_speculation_as_the_contract_reads_its_flags(argv, env, running):
    assert speculation_running(argv, env) == running


def test_the_units_environment_stands_for_an_engine_environment_root_may_not_read():
    """What _service.launch writes in the env file, read back as systemd reads it, Environment= on top; an
    unreadable file gives nothing rather than an error."""
    files = {
        "/etc/ds4/ds4.env": "# managed\nDS4_CONT_DSPARK=1\nDS4_DSPARK_MODEL=/var/lib/ds4/gguf/d.gguf\n"
        'DS4_NOTE="a \\"quoted\\" \\$word"\n\nDS4_X=file\n',
    }
    show = (
        'Environment=DS4_X=inline "DS4_Y=two words"\n'
        "EnvironmentFiles=/etc/ds4/ds4.env (ignore_errors=no)\n"
        "EnvironmentFiles=/gone.env (ignore_errors=yes)\n"
    )
    env = unit_environment(show, files.get)
    assert env == {
        "DS4_CONT_DSPARK": "1",
        "DS4_DSPARK_MODEL": "/var/lib/ds4/gguf/d.gguf",
        "DS4_NOTE": 'a "quoted" $word',
        "DS4_X": "inline",
        "DS4_Y": "two words",
    }
    assert speculation_running(["ds4-server", "--cuda"], env) == "dspark"
    assert unit_environment("", files.get) == {}


def test_native_archs_from_the_build_stamp():
    assert native_archs({"sass_archs": {"ds4-server": ["sm_121", "sm_121"], "ds4": ["sm_75"]}}) == ["sm_121"]
    assert native_archs({"release": "v0.6.5"}) is None and native_archs(None) is None


# --- the judgement --------------------------------------------------------------------------------------

COOL = "0, 40, 30.0, [N/A], 2400, 2418, 0x0000000000000000, Not Active, Not Active, Not Active, Not Active"
HOT = "0, 96, 30.0, [N/A], 1209, 2418, 0x0000000000000020, Not Active, Active, Not Active, Not Active"


def state(**change):
    base = {
        "native_archs": ["sm_121"],
        "arch": "sm_121",
        "compute_cap": "12.1",
        "persistence": True,
        "gpus": parse_gpus(COOL),
        "gpu_apps": [],
        "memory": {"total": 128 << 30, "available": 40 << 30, "swap_used": 0},
        "speculation": "dspark",
        "other_requests": 0,
    }
    base.update(change)
    return base


def at(share):
    return {
        "prefill_2k": 960 * share,
        "prefill_12k": 1010 * share,
        "decode": 27.7 * share,
        "aggregate_12": 59.0 * share,
        "problems": [],
    }


def verify(measured, gpu_state, speculation="dspark", reference="published", scale=1, min_ratio=0.8):
    ref = reference_figures(catalog(REFERENCE), "0731", "v0.6.5") if reference == "published" else reference
    return judge(
        host="spark01",
        release="v0.6.5",
        generation="0731",
        speculation=speculation,
        reference=ref,
        measured=measured,
        state=gpu_state,
        scale=scale,
        min_ratio=min_ratio,
        now=1000.0,
    )


def test_a_spark_at_the_published_speed_is_ok_with_each_figure_and_ratio():
    report = verify(at(1.0), state())
    assert report["verdict"] == "ok" and report["causes"] == [] and report["slow"] == []
    assert [row["figure"] for row in report["figures"]] == [
        "prefill_2k",
        "prefill_12k",
        "dspark_decode",
        "aggregate_12",
    ]
    assert all(row["ratio"] == 1.0 and row["verdict"] == "ok" for row in report["figures"])
    lines = report_lines(report)
    assert isinstance(lines, list) and all("\n" not in line for line in lines)
    assert lines[0] == "spark01: ok, every figure at least 0.8 of the published one"
    assert "v0.6.5 has no published figures of its own; those of v0.5.0 stand for it" in lines[-1]


def test_a_plain_spark_is_held_to_the_plain_decode():
    report = verify(dict(at(1.0), decode=20.0), state(speculation="plain"), speculation="plain")
    assert [row["figure"] for row in report["figures"]][2] == "decode_2k" and report["verdict"] == "ok"


def test_the_scale_multiplies_the_published_figures():
    report = verify(at(4.0), state(), scale=4)
    assert report["verdict"] == "ok" and report["figures"][0]["reference"] == 3840.0
    assert "scaled by 4 (ds4_verify_reference_scale)" in report_lines(report)[-1]
    assert verify(at(1.0), state(), scale=4)["verdict"] == "slow"


def test_half_speed_on_a_throttled_gpu_names_the_throttling_first():
    memory = {"total": 128 << 30, "available": 1 << 30, "swap_used": 3 << 30}
    report = verify(at(0.5), state(gpus=parse_gpus(HOT), persistence=False, memory=memory))
    assert report["verdict"] == "slow" and report["lowest_ratio"] == 0.5
    assert [c["cause"] for c in report["causes"]] == ["gpu-throttled", "memory-pressure", "persistence-off"]
    first = report["causes"][0]["text"]
    assert "sw_thermal_slowdown active" in first and "SM clock 1209 of 2418 MHz" in first and "96 C" in first
    lines = report_lines(report)
    assert lines[0].startswith("spark01: SLOW, prefill @2k, prefill @12k, DSpark decode @2k, aggregate")
    assert lines[-3].startswith("  cause 1: GPU 0 is held back: sw_thermal_slowdown")


def test_a_build_without_the_gpus_arch_comes_before_everything_else():
    report = verify(
        at(0.5),
        state(
            native_archs=["sm_75"], gpus=parse_gpus(HOT), gpu_apps=[{"pid": 9, "name": "x", "used_mib": 1}]
        ),
    )
    assert [c["cause"] for c in report["causes"]] == [
        "build-without-native-arch",
        "gpu-throttled",
        "other-gpu-processes",
    ]
    assert "no native code for the GPU's sm_121 (its build stamp lists sm_75)" in report["causes"][0]["text"]
    # sm_121a cubins are native code for sm_121.
    assert verify(at(0.5), state(native_archs=["sm_121a"]))["causes"] == []


def test_speculation_off_explains_only_the_decode_figures():
    measured = dict(at(1.0), decode=14.0, aggregate_12=30.0)
    report = verify(measured, state(speculation="plain"))
    assert report["slow"] == ["dspark_decode", "aggregate_12"]
    assert [c["cause"] for c in report["causes"]] == ["speculation-off"]
    assert report["causes"][0]["figures"] == ["dspark_decode", "aggregate_12"]


def test_a_slow_spark_with_nothing_found_says_so_and_other_requests_are_a_cause():
    report = verify(at(0.5), state())
    assert report[
        "causes"
    ] == [] and "  no cause found in the GPU's state, the build or the memory" in report_lines(report)
    busy = verify(at(0.5), state(other_requests=3))
    assert busy["causes"][0]["text"] == "the engine served 3 other request(s) while it was measured"


def test_no_reference_is_not_judged_and_a_missing_figure_is_unknown():
    report = verify(at(1.0), state(), reference=None)
    assert report["verdict"] == "unknown" and all(row["ratio"] is None for row in report["figures"])
    assert report_lines(report)[0] == (
        "spark01: not judged: no published figure for deepseek-v4-flash 0731 at v0.6.5 or before"
    )
    partial = verify(dict(at(1.0), aggregate_12=None), state())
    assert partial["verdict"] == "unknown" and partial["figures"][-1]["verdict"] == "unknown"


@pytest.mark.parametrize("bad", [0, 1.5, "x", True, None])
def test_a_bad_min_ratio_is_refused(bad):
    with pytest.raises(VerifyError, match="ds4_verify_min_ratio"):
        verify(at(1.0), state(), min_ratio=bad)


@pytest.mark.parametrize("bad", [0, -1, "x", True])
def test_a_bad_scale_is_refused(bad):
    with pytest.raises(VerifyError, match="ds4_verify_reference_scale"):
        verify(at(1.0), state(), scale=bad)


def test_the_summary_the_status_and_the_metrics_carry():
    report = verify(at(0.5), state(gpus=parse_gpus(HOT)))
    summary = summary_of(copy.deepcopy(report))
    assert (
        summary["verdict"] == "slow"
        and summary["cause"] == "gpu-throttled"
        and summary["lowest_ratio"] == 0.5
    )
    assert summary["ratios"]["prefill_2k"] == 0.5
    assert summary_of(None) is None and summary_of({"format": 99}) is None
    assert report["format"] == ds4_verify.FORMAT


def test_a_low_clock_is_a_cause_only_on_a_busy_gpu_without_a_reason():
    busy = "0, 60, 30.0, [N/A], 900, 2418, 0x0000000000000000, Not Active, Not Active, Not Active, Not Active"
    idle = "0, 40, 11.7, [N/A], 208, 2418, 0x0000000000000001, Not Active, Not Active, Not Active, Not Active"
    report = verify(at(0.5), state(gpus=parse_gpus(busy)))
    assert [c["cause"] for c in report["causes"]] == ["clocks-low"]
    assert "900 of 2418 MHz" in report["causes"][0]["text"]
    assert verify(at(0.5), state(gpus=parse_gpus(idle)))["causes"] == []


# --- the module -----------------------------------------------------------------------------------------


@pytest.fixture
def spark(tmp_path, monkeypatch):
    """The module on a Spark of the test's: the engine measured at half the published speed, nvidia-smi
    reporting a throttled GB10, a release stamped for sm_121."""
    from ansible.module_utils.basic import AnsibleModule
    from ansible_collections.ds4.fleet.plugins.modules import ds4_verify as verify_module

    release = tmp_path / "v0.6.5"
    release.mkdir()
    (release / ".ds4-build.json").write_text(
        json.dumps({"release": "v0.6.5", "sass_archs": {"ds4-server": ["sm_121"]}})
    )
    answers = {
        "systemctl": "0\n",
        "--query-gpu=index,compute_cap,persistence_mode": "0, 12.1, Enabled\n",
        "--query-compute-apps=pid,process_name,used_memory": "",
    }

    def run_command(self, argv, **kwargs):
        key = argv[0] if argv[0] == "systemctl" else argv[1]
        return 0, answers.get(key, HOT + "\n"), ""

    monkeypatch.setattr(AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, **kw: f"/usr/bin/{name}")
    monkeypatch.setattr(verify_module, "read_inflight", lambda url: (0, "/metrics"))
    monkeypatch.setattr(verify_module, "measure_figures", lambda url, **kw: at(0.5))
    args = {
        "url": "http://127.0.0.1:8000",
        "fact": str(tmp_path / "ds4_verify.fact"),
        "release_dir": str(release),
        "catalog": catalog(REFERENCE),
        "generation": "0731",
        "speculation": "dspark",
        "spark": "spark01",
    }
    return verify_module, args, tmp_path / "ds4_verify.fact"


def test_the_module_reports_records_the_verification_and_changes_nothing_else(spark):
    module, args, fact = spark
    rc, result = run_module(module, args)
    assert rc == 0 and result["changed"] is False, result
    assert result["report"]["verdict"] == "slow" and result["report"]["causes"][0]["cause"] == "gpu-throttled"
    assert result["lines"] == report_lines(result["report"]) and result["lines"][0].startswith(
        "spark01: SLOW"
    )
    assert json.loads(fact.read_text())["verified_at"] == result["report"]["verified_at"]
    assert oct(fact.stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize(
    ("generation", "family"),
    [
        ("vision-exp", "deepseek-v4-flash-vision"),
        ("v4.1", "deepseek-v4.1-flash"),
        ("glm-5.3", "glm-5.3-flash"),
        ("qwen3.8", "qwen3.8-flash-next"),
        ("legacy", "deepseek-v4-flash"),
    ],
)
def test_a_family_without_published_figures_is_said_so_and_never_held_to_another(
    spark, shipped_catalog, generation, family
):
    # The engine's authors published one-Spark figures for V4 Flash 0731 alone (engine contract): no other
    # generation, of its family or another, is held to them.
    module, args, fact = spark
    rc, result = run_module(
        module, dict(args, catalog=shipped_catalog, generation=generation, speculation="plain")
    )
    assert rc == 0, result
    report = result["report"]
    assert (report["family"], report["verdict"], report["reference"]) == (family, "unknown", None)
    assert (
        result["lines"][0]
        == f"spark01: not judged: no published figure for {family} {generation}: none published"
    )
    assert json.loads(fact.read_text())["family"] == family


def test_v4_flash_0731_is_held_to_its_published_figures(spark, shipped_catalog):
    module, args, _fact = spark
    rc, result = run_module(module, dict(args, catalog=shipped_catalog))
    assert rc == 0, result
    report = result["report"]
    assert (report["family"], report["reference"]["release"]) == ("deepseek-v4-flash", "v0.5.0")
    assert report["verdict"] == "slow" and report["reference"]["figures"]["decode_2k"] == 20.0


def test_in_check_mode_the_module_measures_and_writes_no_record(spark):
    module, args, fact = spark
    rc, result = run_module(module, dict(args, _ansible_check_mode=True))
    assert rc == 0 and result["report"]["verdict"] == "slow" and not fact.exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"min_ratio": 1.5}, "ds4_verify_min_ratio is a number above 0 and at most 1: 1.5"),
        ({"scale": 0}, "ds4_verify_reference_scale is a number above 0: 0"),
        ({"generation": "0801"}, "ds4_model_generation '0801' is not a generation of ds4_model_catalog"),
        ({"runs": 0}, "runs must be 1 or more: 0"),
    ],
)
def test_the_module_refuses_bad_settings_before_it_measures(spark, change, message):
    module, args, fact = spark
    rc, result = run_module(module, dict(args, **change))
    assert rc == 1 and message in result["msg"] and not fact.exists(), result


def test_an_engine_that_does_not_answer_is_said_and_nothing_is_verified(spark, monkeypatch):
    module, args, fact = spark
    from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import EngineUnreachable

    def refused(url):
        raise EngineUnreachable("http://127.0.0.1:8000/metrics could not be reached: refused")

    monkeypatch.setattr(module, "read_inflight", refused)
    rc, result = run_module(module, args)
    assert rc == 1 and result["msg"].startswith("the engine does not answer, nothing verified: ")
    assert not fact.exists()


def test_an_upstream_engine_without_metrics_or_stats_is_verified_its_other_requests_unknown(
    spark, monkeypatch
):
    # Upstream serves neither /metrics nor /v1/stats (engine contract): found verifying a tensor pair in the
    # pair scenario, where verify.yml failed every upstream Spark for it. The figures are measured; whether
    # other requests shared the engine is not known, and so not a cause.
    module, args, fact = spark
    from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import ProbeError

    def unknown(url):
        raise ProbeError(
            "the engine at http://127.0.0.1:8000 reports no requests in flight: "
            "http://127.0.0.1:8000/metrics answered HTTP 404, "
            "and http://127.0.0.1:8000/v1/stats answered HTTP 404"
        )

    monkeypatch.setattr(module, "read_inflight", unknown)
    rc, result = run_module(module, args)
    assert rc == 0, result
    report = result["report"]
    assert report["state"]["other_requests"] is None and report["verdict"] == "slow"
    assert "other-requests" not in [cause["cause"] for cause in report["causes"]]
    assert fact.exists()


def test_without_nvidia_smi_the_gpu_is_unread_and_the_spark_still_verified(spark, monkeypatch):
    from ansible.module_utils.basic import AnsibleModule

    module, args, fact = spark
    monkeypatch.setattr(AnsibleModule, "get_bin_path", lambda self, name, **kw: None)
    rc, result = run_module(module, args)
    state = result["report"]["state"]
    assert rc == 0 and result["report"]["verdict"] == "slow", result
    assert state["gpus"] is None and state["gpu_apps"] is None and state["arch"] is None
    assert result["report"]["causes"] == []


FALLBACK = {
    "build_target": {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]},
    "make_target_reason": "built without the Spark target, with make cuda CUDA_ARCH=sm_121, because its "
    "Makefile's cuda-spark passes an empty CUDA_ARCH",
}


def test_a_gb10_built_without_the_spark_target_is_named_among_the_causes():
    report = verify(at(0.5), state(build=FALLBACK, gpus=parse_gpus(HOT)))
    assert [c["cause"] for c in report["causes"]] == ["build-without-spark-target", "gpu-throttled"]
    text = report["causes"][0]["text"]
    assert text.startswith(
        "the running release was built without the Spark target (make cuda CUDA_ARCH=sm_121): "
    )
    assert "cuda-spark passes an empty CUDA_ARCH" in text
    assert any(
        line.startswith("  cause 1: the running release was built without the Spark target")
        for line in report_lines(report)
    )
    # Built with cuda-spark, or for another arch, or stamped before: no such cause, or no reason recorded.
    spark = {"build_target": {"arch": "sm_121", "make_target": "cuda-spark", "make_args": []}}
    assert verify(at(0.5), state(build=spark))["causes"] == []
    h200 = {"build_target": {"arch": "sm_90", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_90"]}}
    assert verify(at(0.5), state(build=h200, arch="sm_90", native_archs=["sm_90"]))["causes"] == []
    older = verify(at(0.5), state(build={"build_target": FALLBACK["build_target"]}))["causes"][0]["text"]
    assert "built before the role chose the target from the release's Makefile" in older
    # A fast Spark has no causes, however it was built.
    assert verify(at(1.0), state(build=FALLBACK))["causes"] == []


# --- a pair (issue 42): held to the published two-Spark figures --------------------------------------

PAIR_REFERENCE = {
    "source": "the engine's published two-Spark figures",
    "stamp": "commit ba00a8a",
    "figures": {"prefill_2k": 122, "decode_2k": 11.4},
}


TENSOR_REFERENCE = {
    "source": "upstream docs/DISTRIBUTED.md",
    "stamp": "2026-10-02",
    "figures": {"decode_2k": 26.0, "dspark_decode": 44.0},
}


def pair_catalog():
    shipped = catalog(REFERENCE)
    shipped["0731"]["quantizations"] = {
        "q4": {"name": None, "approx_bytes": 153000000000, "pair_reference": PAIR_REFERENCE}
    }
    return shipped


def test_the_workloads_of_a_pair_are_the_2k_prompt_alone():
    engine = Engine(122.0, 11.4)
    measured = measure_figures(
        "http://x", decode_tokens=64, concurrent=12, runs=2, timeout=5, stream=engine, pair=True
    )
    assert (measured["prefill_2k"], measured["decode"]) == (122.0, 11.4)
    assert measured["prefill_12k"] is None and measured["aggregate_12"] is None
    assert len(engine.prompts) == 2


@pytest.mark.parametrize("speculation", ["dspark", "plain"])
def test_a_pair_at_the_two_spark_figures_is_ok_though_far_below_one_sparks(speculation):
    reference = ds4_catalog.pair_reference_figures(pair_catalog(), "0731", "q4")
    measured = {"prefill_2k": 120.0, "decode": 11.0, "prefill_12k": None, "aggregate_12": None}
    report = judge(
        host="spark04",
        release="v0.6.5",
        generation="0731",
        speculation=speculation,
        reference=reference,
        measured=measured,
        state=state(),
        scale=1,
        min_ratio=0.8,
        now=1000.0,
        pair=True,
    )
    assert report["verdict"] == "ok" and report["pair"] is True and report["pair_mode"] == "pipeline"
    assert [(r["figure"], r["reference"], r["ratio"]) for r in report["figures"]] == [
        ("prefill_2k", 122, 0.98),
        ("decode_2k", 11.4, 0.96),
    ]
    lines = report_lines(report)
    assert lines[0] == "spark04: ok, every figure at least 0.8 of the published one"
    assert "reference: 0731 (two Sparks serving q4 as a pair), stamped commit ba00a8a" in lines[-1]
    # Held to one Spark's figures instead, the same pair would be slow on each of them.
    single = verify(measured, state(), speculation=speculation)
    assert single["verdict"] == "slow"


def test_a_pair_at_half_its_figures_is_slow():
    reference = ds4_catalog.pair_reference_figures(pair_catalog(), "0731", "q4")
    report = judge(
        host="spark04",
        release="v0.6.5",
        generation="0731",
        speculation="dspark",
        reference=reference,
        measured={"prefill_2k": 61.0, "decode": 11.4},
        state=state(),
        scale=1,
        min_ratio=0.8,
        now=1000.0,
        pair=True,
    )
    assert report["verdict"] == "slow" and report["slow"] == ["prefill_2k"]


def test_the_module_holds_a_pair_to_its_quantizations_two_spark_figures(spark, monkeypatch):
    module, args, _fact = spark
    seen = {}

    def measure(url, **kw):
        seen.update(kw)
        return {
            "prefill_2k": 122.0,
            "decode": 11.4,
            "prefill_12k": None,
            "aggregate_12": None,
            "problems": [],
        }

    monkeypatch.setattr(module, "measure_figures", measure)
    rc, result = run_module(module, dict(args, catalog=pair_catalog(), pair=True, quantization="q4"))
    assert rc == 0, result
    assert seen["pair"] is True
    assert result["report"]["reference"]["figures"] == PAIR_REFERENCE["figures"]
    assert result["report"]["verdict"] == "ok"
    assert [row["figure"] for row in result["report"]["figures"]] == ["prefill_2k", "decode_2k"]
    rc, result = run_module(module, dict(args, catalog=pair_catalog(), pair=True, quantization="mxfp4"))
    assert rc == 0 and result["report"]["verdict"] == "unknown"
    assert (
        "no published figure for deepseek-v4-flash 0731 at v0.6.5 or before for a pair" in result["lines"][0]
    )


def test_the_module_holds_a_tensor_pair_to_the_tensor_figures_and_says_its_mode(spark, monkeypatch):
    module, args, _fact = spark
    tensor = pair_catalog()
    tensor["0731"]["tensor_reference"] = {"q2": TENSOR_REFERENCE}
    monkeypatch.setattr(
        module, "measure_figures", lambda url, **kw: {"prefill_2k": 900.0, "decode": 44.0, "problems": []}
    )
    for speculation, held in (("dspark", ("dspark_decode", 44.0)), ("plain", ("decode_2k", 26.0))):
        rc, result = run_module(
            module,
            dict(
                args,
                catalog=tensor,
                pair=True,
                pair_mode="tensor",
                quantization="q2",
                speculation=speculation,
            ),
        )
        assert rc == 0, result
        report = result["report"]
        assert (report["pair"], report["pair_mode"]) == (True, "tensor")
        assert report["reference"]["figures"] == TENSOR_REFERENCE["figures"]
        assert "two Sparks serving q2 in tensor mode" in report["reference"]["note"]
        # The tensor prefill is published at 32k alone: no 2k prefill row.
        assert [(row["figure"], row["reference"]) for row in report["figures"]] == [held], speculation
    rc, result = run_module(module, dict(args, catalog=tensor, pair=True, quantization="q4"))
    assert result["report"]["pair_mode"] == "pipeline"
    rc, result = run_module(module, args)
    assert result["report"]["pair_mode"] is None


def test_the_shipped_runs_and_answer_length_reach_the_measurement(spark, monkeypatch):
    """The sandbox verifies with one run and 32-token answers; a Spark with the role's shipped defaults
    (ds4_verify_runs, ds4_verify_decode_tokens, as the verify task passes them) measures with those."""
    import yaml

    module, args, _fact = spark
    root = Path(__file__).resolve().parents[5]
    shipped = yaml.safe_load((root / "roles" / "ds4_fleet" / "defaults" / "main.yml").read_text())
    seen = {}

    def measure(url, **kwargs):
        seen.update(kwargs)
        return at(0.5)

    monkeypatch.setattr(module, "measure_figures", measure)
    passed = {"runs": shipped["ds4_verify_runs"], "decode_tokens": shipped["ds4_verify_decode_tokens"]}
    rc, result = run_module(module, dict(args, **passed))
    assert rc == 0, result
    assert (seen["runs"], seen["decode_tokens"]) == (2, 128) == (passed["runs"], passed["decode_tokens"])
