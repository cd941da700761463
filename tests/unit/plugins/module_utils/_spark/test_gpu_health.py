"""The GPUs' health read from nvidia-smi (_spark/gpu_health.py): each field in base units, a field the GPU
does not report as None, the throttle reasons that are active."""

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._spark.gpu_health import gpu_command, parse_gpus

# --- GPU health, from nvidia-smi ------------------------------------------------------------------------

# As the real tool printed them with --format=csv,noheader,nounits: an H200 (2026-12-02, driver 580.159.04);
# a GB10 as the GPU stand-in prints it, without a power limit.
H200 = "0, 36, 77.50, 700.00, 345, 1980, 0x0000000000000001, Not Active, Not Active, Not Active, Not Active\n"
GB10 = "0, 40, 11.70, [N/A], 208, 2418, 0x0000000000000001, Not Active, Not Active, Not Active, Not Active\n"
THROTTLED = "0, 96, 11.70, [N/A], 1209, 2418, 0x000000000000004C, Active, Not Active, Active, Not Active\n"


def test_the_gpu_query_asks_for_each_field_in_order_without_units():
    assert gpu_command() == [
        "nvidia-smi",
        "--query-gpu=index,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,"
        "clocks_event_reasons.active,clocks_event_reasons.hw_thermal_slowdown,"
        "clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.sw_power_cap,"
        "clocks_event_reasons.hw_power_brake_slowdown",
        "--format=csv,noheader,nounits",
    ]


def test_an_h200s_health_reads_in_base_units():
    assert parse_gpus(H200) == [
        {
            "gpu": "0",
            "temperature_celsius": 36.0,
            "power_draw_watts": 77.5,
            "power_limit_watts": 700.0,
            "sm_clock_hertz": 345e6,
            "sm_clock_max_hertz": 1980e6,
            "clocks_event_reasons": 1,
            "reasons": {
                "hw_thermal_slowdown": 0,
                "sw_thermal_slowdown": 0,
                "sw_power_cap": 0,
                "hw_power_brake_slowdown": 0,
            },
        }
    ]


@pytest.mark.parametrize("missing", ["[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", ""])
def test_a_field_the_gpu_does_not_report_is_none_never_zero(missing):
    gpu = parse_gpus(GB10.replace("[N/A]", missing))[0]
    assert gpu["power_limit_watts"] is None and gpu["power_draw_watts"] == 11.7
    line = "0, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]\n"
    assert parse_gpus(line) == [
        {
            "gpu": "0",
            "temperature_celsius": None,
            "power_draw_watts": None,
            "power_limit_watts": None,
            "sm_clock_hertz": None,
            "sm_clock_max_hertz": None,
            "clocks_event_reasons": None,
            "reasons": dict.fromkeys(("hw_thermal_slowdown", "sw_thermal_slowdown", "sw_power_cap",
                                      "hw_power_brake_slowdown")),
        }
    ]  # fmt: skip


def test_a_throttled_gpu_says_which_reasons_are_active():
    gpu = parse_gpus(THROTTLED)[0]
    assert gpu["clocks_event_reasons"] == 0x4C and gpu["temperature_celsius"] == 96
    assert gpu["reasons"] == {
        "hw_thermal_slowdown": 1,
        "sw_thermal_slowdown": 0,
        "sw_power_cap": 1,
        "hw_power_brake_slowdown": 0,
    }


def test_every_gpu_is_read_and_a_line_without_every_field_is_not():
    text = H200 + H200.replace("0, 36", "1, 41") + "2, 40, 11.70\nNo devices were found\n\n"
    assert [gpu["gpu"] for gpu in parse_gpus(text)] == ["0", "1"]
    assert parse_gpus("") == []
