"""The textfile (_spark/metrics.py render): what a Spark runs and how it fares, as Prometheus text for
node_exporter's textfile collector."""

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._spark.exposition import check_exposition
from ansible_collections.ds4.fleet.plugins.module_utils._spark.gpu_health import parse_gpus
from ansible_collections.ds4.fleet.plugins.module_utils._spark.metrics import render

# A throttled GB10 as nvidia-smi prints it (the cases of its reading: test_gpu_health.py).
THROTTLED = "0, 96, 11.70, [N/A], 1209, 2418, 0x000000000000004C, Active, Not Active, Active, Not Active\n"


def test_the_textfile_carries_the_gpus_health_and_leaves_out_what_it_does_not_report():
    text = render(
        fact=None,
        weights=[],
        unit={},
        watchdog={},
        watchdog_enabled=True,
        verdict="ok",
        engine_text="",
        free_bytes=None,
        next_bytes=None,
        now=1.0,
        gpus=parse_gpus(THROTTLED),
    )
    assert check_exposition(text)[1] == []
    samples = [line for line in text.splitlines() if line.startswith("ds4_spark_gpu")]
    assert samples == [
        "ds4_spark_gpu_query_success 1",
        'ds4_spark_gpu_temperature_celsius{gpu="0"} 96.0',
        'ds4_spark_gpu_power_draw_watts{gpu="0"} 11.7',
        'ds4_spark_gpu_sm_clock_hertz{gpu="0"} 1209000000.0',
        'ds4_spark_gpu_sm_clock_max_hertz{gpu="0"} 2418000000.0',
        'ds4_spark_gpu_clocks_event_reasons{gpu="0"} 76',
        'ds4_spark_gpu_clocks_event_active{gpu="0",reason="hw_thermal_slowdown"} 1',
        'ds4_spark_gpu_clocks_event_active{gpu="0",reason="sw_thermal_slowdown"} 0',
        'ds4_spark_gpu_clocks_event_active{gpu="0",reason="sw_power_cap"} 1',
        'ds4_spark_gpu_clocks_event_active{gpu="0",reason="hw_power_brake_slowdown"} 0',
    ]
    assert "power_limit" not in text


def test_the_info_series_names_the_family_generation_and_quantization_it_serves():
    fact = {
        "release": "v0.6.5",
        "family": "glm-5.3-flash",
        "generation": "glm-5.3",
        "quantization": "q2",
        "speculation": "mtp",
        "models": {"base": "GLM-5.3-Flash-Q2.gguf", "vision": "GLM-5.3-Flash-Vision-Encoder.gguf"},
    }
    common = dict(weights=[], unit={}, watchdog={}, watchdog_enabled=True, verdict="ok", engine_text="",
                  free_bytes=None, next_bytes=None, now=1.0, gpus=None)  # fmt: skip
    text = render(fact=fact, **common)
    assert check_exposition(text)[1] == []
    info = next(line for line in text.splitlines() if line.startswith("ds4_spark_info{"))
    for label in ('family="glm-5.3-flash"', 'generation="glm-5.3"', 'quantization="q2"', 'speculation="mtp"'):
        assert label in info, info
    # A fact written before families were recorded is of V4 Flash, the one family there was; its
    # quantization went unrecorded (a pair may serve q4): the label is empty, never a guess.
    older = {key: value for key, value in fact.items() if key not in ("family", "quantization")}
    lines = render(fact=older, **common).splitlines()
    info = next(line for line in lines if line.startswith("ds4_spark_info{"))
    assert 'family="deepseek-v4-flash"' in info and 'quantization=""' in info


def test_a_gpu_that_could_not_be_read_is_said_and_nothing_else():
    text = render(
        fact=None,
        weights=[],
        unit={},
        watchdog={},
        watchdog_enabled=True,
        verdict="ok",
        engine_text="",
        free_bytes=None,
        next_bytes=None,
        now=1.0,
        gpus=None,
    )
    assert [line for line in text.splitlines() if "gpu" in line and not line.startswith("#")] == [
        "ds4_spark_gpu_query_success 0"
    ]


def test_the_textfile_carries_the_last_verification_against_the_published_figures():
    verify = {
        "format": 1,
        "verified_at": 1700000000.5,
        "release": "v0.6.5",
        "verdict": "slow",
        "min_ratio": 0.8,
        "figures": [
            {"figure": "prefill_2k", "ratio": 0.97},
            {"figure": "aggregate_12", "ratio": 0.5},
            {"figure": "prefill_12k", "ratio": None},
        ],
    }
    common = dict(
        fact=None,
        weights=[],
        unit={},
        watchdog={},
        watchdog_enabled=True,
        verdict="ok",
        engine_text="",
        free_bytes=None,
        next_bytes=None,
        now=1.0,
        gpus=None,
    )
    text = render(**common, verify=verify)
    assert check_exposition(text)[1] == []
    assert [line for line in text.splitlines() if line.startswith("ds4_spark_verify")] == [
        "ds4_spark_verify_timestamp_seconds 1700000000.5",
        'ds4_spark_verify_ratio{figure="prefill_2k",release="v0.6.5"} 0.97',
        'ds4_spark_verify_ratio{figure="aggregate_12",release="v0.6.5"} 0.5',
        "ds4_spark_verify_min_ratio 0.8",
        "ds4_spark_verify_slow 1",
    ]
    # Never verified, or a fact that is not a verification: no series.
    assert "verify" not in render(**common)
    assert "verify" not in render(**common, verify={"verdict": "ok"})


@pytest.mark.parametrize(("lineage", "served"), [("fork", 1), ("upstream", 0), (None, 1)])
def test_the_textfile_says_whether_the_engine_serves_its_own_metrics(lineage, served):
    fact = {"release": "g67bd55c0a1b2", "commit": "67bd55c0a1b2" + "0" * 28, "models": {}}
    if lineage:
        fact["lineage"] = lineage
    text = render(
        fact=fact,
        weights=[],
        unit={},
        watchdog={},
        watchdog_enabled=True,
        verdict="ok",
        engine_text="",
        free_bytes=None,
        next_bytes=None,
        now=1.0,
        gpus=None,
    )
    assert check_exposition(text)[1] == []
    assert f"ds4_spark_engine_metrics_served {served}" in text.splitlines()
    assert f'lineage="{lineage or "fork"}"' in text and 'release="g67bd55c0a1b2"' in text
