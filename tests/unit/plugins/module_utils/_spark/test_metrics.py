"""The textfile's series: the engine's own /metrics checked line by line against the Prometheus text
exposition format (version 0.0.4) before any of it is copied, so that one bad line never makes
node_exporter drop the whole file."""

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._spark.metrics import (
    check_exposition,
    engine_series,
    gpu_command,
    parse_gpus,
    render,
)

GOOD = (
    "# HELP ds4_requests_inflight Generation requests answered or queued.\n"
    "# TYPE ds4_requests_inflight gauge\n"
    "ds4_requests_inflight 2\n"
    "# HELP ds4_uptime_seconds Seconds since the server listened.\n"
    "# TYPE ds4_uptime_seconds gauge\n"
    "ds4_uptime_seconds 12.5\n"
)


def kept(text):
    return engine_series(text)[0]


def dropped(text):
    return engine_series(text)[1]


# --- the two defects of issue 29 ------------------------------------------------------------------------


def test_an_unquoted_label_value_is_dropped_and_counted_not_copied():
    text = GOOD + "ds4_tokens_total{model=deepseek} 5\n"
    assert kept(text) == GOOD
    assert dropped(text) == ["line 7: a label value not in double quotes: ds4_tokens_total{model=deepseek} 5"]


def test_a_second_type_line_for_a_family_is_dropped_and_counted_not_copied():
    text = GOOD + "# TYPE ds4_uptime_seconds counter\n"
    assert kept(text) == GOOD
    assert dropped(text) == [
        "line 7: a second TYPE line for ds4_uptime_seconds, or one after its samples: "
        "# TYPE ds4_uptime_seconds counter"
    ]


# --- what passes ----------------------------------------------------------------------------------------


def test_a_well_formed_exposition_passes_as_it_is():
    assert engine_series(GOOD) == (GOOD, [])


def test_an_empty_or_absent_exposition_gives_nothing():
    assert engine_series("") == ("", [])
    assert engine_series(None) == ("", [])


@pytest.mark.parametrize(
    "value", ["0", "-3", "12.5", "1e3", "-1.5E-7", ".5", "5.", "+2", "NaN", "+Inf", "-Inf", "Inf"]
)
def test_every_float_the_format_allows_is_a_value(value):
    assert kept(f"ds4_x {value}\n") == f"ds4_x {value}\n"


def test_a_timestamp_is_checked_and_left_out_since_node_exporter_refuses_them():
    assert engine_series("ds4_x 1 1700000000000\nds4_y 2 -5\n") == ("ds4_x 1\nds4_y 2\n", [])


def test_escaped_label_values_pass_as_written():
    line = r'ds4_x{path="C:\\DIR\\FILE.TXT",error="Cannot find file:\n\"FILE.TXT\""} 1.458255915e9'
    assert engine_series(line + "\n") == (line + "\n", [])


def test_blanks_between_the_tokens_and_a_trailing_comma_are_written_the_usual_way():
    text = 'ds4_x { a = "1" ,\tb="2", }  3\t 1700000000000 \n  ds4_y{} 4\n'
    assert engine_series(text) == ('ds4_x{a="1",b="2"} 3\nds4_y 4\n', [])


def test_a_help_text_keeps_its_escapes():
    text = "# HELP ds4_x A \\\\ backslash\\nand a line.\nds4_x 1\n"
    assert engine_series(text) == (text, [])


def test_comments_and_an_openmetrics_eof_are_left_out_without_counting():
    text = "# a comment\n#\n# HELP\n" + GOOD + "# EOF\n"
    assert engine_series(text) == (GOOD, [])


def test_a_histogram_and_a_summary_keep_their_samples_in_one_family():
    text = (
        "# HELP ds4_latency_seconds Request latency.\n"
        "# TYPE ds4_latency_seconds histogram\n"
        'ds4_latency_seconds_bucket{le="0.5"} 3\n'
        'ds4_latency_seconds_bucket{le="+Inf"} 4\n'
        "ds4_latency_seconds_sum 1.5\n"
        "ds4_latency_seconds_count 4\n"
        "# TYPE ds4_prefill_seconds summary\n"
        'ds4_prefill_seconds{quantile="0.9"} 0.2\n'
        "ds4_prefill_seconds_sum 3\n"
        "ds4_prefill_seconds_count 20\n"
    )
    assert engine_series(text) == (text, [])
    # A second TYPE through a member's name is a second TYPE of the family.
    assert dropped(text + "# TYPE ds4_latency_seconds_count counter\n") == [
        "line 11: a second TYPE line for ds4_latency_seconds, or one after its samples: "
        "# TYPE ds4_latency_seconds_count counter"
    ]


def test_help_and_type_without_samples_are_left_out():
    assert engine_series("# HELP ds4_x Nothing yet.\n# TYPE ds4_x gauge\n") == ("", [])


# --- what is dropped, and why ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("ds4-x 1", "a metric name that is not [a-zA-Z_:][a-zA-Z0-9_:]*"),
        ("9ds4 1", "a metric name that is not [a-zA-Z_:][a-zA-Z0-9_:]*"),
        ("ds4_x", "no value"),
        ("ds4_x one", "a value that is not a float"),
        ("ds4_x 0x1p3", "a value that is not a float"),
        ("ds4_x 1_000", "a value that is not a float"),
        ("ds4_x nan1", "a value that is not a float"),
        ("ds4_x 1 1.5", "a timestamp that is not an integer"),
        ("ds4_x 1 2 3", "more after the timestamp"),
        ('ds4_x{a="1"', "labels without their closing brace"),
        ('ds4_x{a="1} 2', "a label value without its closing quote"),
        ('ds4_x{a="1"b="2"} 3', "labels not separated by commas"),
        ("ds4_x{a} 1", "a label without = and a value"),
        ('ds4_x{1a="1"} 1', "a label name that is not [a-zA-Z_][a-zA-Z0-9_]*"),
        ('ds4_x{__name__="y"} 1', "a label name beginning with __, which is reserved"),
        ('ds4_x{a="1",a="2"} 1', "the label a twice"),
        ('ds4_x{a="\\t"} 1', 'an escape other than \\\\, \\" and \\n in a label value'),
        ('ds4_x{a="1",,} 1', "a label name that is not [a-zA-Z_][a-zA-Z0-9_]*"),
        ('ds4_x{a="1"}} 1', "a value that is not a float"),
        ("# TYPE ds4_x", "a TYPE line without a type"),
        ("# TYPE ds4_x meter", "a type that is not counter, gauge, histogram, summary or untyped"),
        ("# TYPE ds4-x gauge", "a metric name that is not [a-zA-Z_:][a-zA-Z0-9_:]*"),
        ("# HELP ds4-x text", "a metric name that is not [a-zA-Z_:][a-zA-Z0-9_:]*"),
        ('# HELP ds4_x say "\\t"', "an escape other than \\\\ and \\n in a HELP text"),
    ],
)
def test_a_malformed_line_is_dropped_with_the_reason(line, why):
    text, lost = engine_series(GOOD + line + "\n")
    assert text == GOOD
    assert lost == [f"line 7: {why}: {line}"]


def test_a_second_help_line_is_dropped():
    text = "# HELP ds4_x One.\n# HELP ds4_x Two.\nds4_x 1\n"
    assert engine_series(text) == (
        "# HELP ds4_x One.\nds4_x 1\n",
        ["line 2: a second HELP line for ds4_x, or one after its samples: # HELP ds4_x Two."],
    )


def test_a_type_after_the_familys_samples_is_dropped_and_the_samples_stay_untyped():
    text = "ds4_x 1\n# TYPE ds4_x gauge\n"
    assert engine_series(text) == (
        "ds4_x 1\n",
        ["line 2: a second TYPE line for ds4_x, or one after its samples: # TYPE ds4_x gauge"],
    )


def test_samples_of_a_family_after_another_family_began_are_dropped():
    text = 'ds4_x 1\nds4_y 2\nds4_x{a="1"} 3\n# HELP ds4_y Late.\n'
    assert engine_series(text) == (
        "ds4_x 1\nds4_y 2\n",
        [
            'line 3: a sample of ds4_x apart from the family\'s other lines: ds4_x{a="1"} 3',
            "line 4: a second HELP line for ds4_y, or one after its samples: # HELP ds4_y Late.",
        ],
    )


def test_help_or_type_of_a_family_after_another_family_began_is_dropped():
    text = "# HELP ds4_x X.\nds4_y 1\n# TYPE ds4_x gauge\nds4_x 2\n"
    assert engine_series(text) == (
        "ds4_y 1\n",
        [
            "line 3: a TYPE line for ds4_x apart from the family's other lines: # TYPE ds4_x gauge",
            "line 4: a sample of ds4_x apart from the family's other lines: ds4_x 2",
        ],
    )


def test_carriage_returns_at_the_ends_of_lines_are_taken_off():
    assert engine_series("# TYPE ds4_x gauge\r\nds4_x 1\r\n") == ("# TYPE ds4_x gauge\nds4_x 1\n", [])


def test_a_series_given_twice_is_dropped_the_second_time():
    # node_exporter fills a label a sample lacks with "": the same series as an empty value.
    text = 'ds4_x{a="1",b=""} 1\nds4_x{b="",a="1"} 2\nds4_x{a="1"} 3\nds4_x 4\nds4_x{c=""} 5\n'
    assert engine_series(text) == (
        'ds4_x{a="1",b=""} 1\nds4_x 4\n',
        [
            'line 2: the series ds4_x{a="1"} a second time: ds4_x{b="",a="1"} 2',
            'line 3: the series ds4_x{a="1"} a second time: ds4_x{a="1"} 3',
            'line 5: the series ds4_x a second time: ds4_x{c=""} 5',
        ],
    )


def test_a_bucket_or_quantile_that_is_no_float_is_dropped():
    text = (
        "# TYPE ds4_h histogram\n"
        'ds4_h_bucket{le="high"} 1\n'
        'ds4_h_bucket{le="1"} 1\n'
        "# TYPE ds4_s summary\n"
        'ds4_s{quantile="most"} 1\n'
    )
    assert engine_series(text) == (
        '# TYPE ds4_h histogram\nds4_h_bucket{le="1"} 1\n',
        [
            'line 2: an le label that is not a float: ds4_h_bucket{le="high"} 1',
            'line 5: a quantile label that is not a float: ds4_s{quantile="most"} 1',
        ],
    )


def test_garbage_counts_a_line_each_and_leaves_the_good_lines_alone():
    garbage = "<html><body>502 Bad Gateway</body></html>\n\x00\x01binary\n{}\n= 1\n"
    text, lost = engine_series(GOOD + garbage + "ds4_after 1\n")
    assert text == GOOD + "ds4_after 1\n"
    assert len(lost) == 4


# --- only the engine's own series are copied ------------------------------------------------------------


def test_other_names_and_our_own_prefix_are_left_out_without_counting():
    text = (
        "# TYPE go_goroutines gauge\ngo_goroutines 8\n"
        "process_open_fds 3\n"
        "# TYPE ds4_spark_engine_up gauge\nds4_spark_engine_up 1\n"
    ) + GOOD
    assert engine_series(text) == (GOOD, [])


def test_a_bad_line_of_another_name_counts_too():
    # It is the engine's output that is wrong, whatever the name; its good lines are still copied.
    assert engine_series(GOOD + "go_x{a=b} 1\n") == (
        GOOD,
        ["line 7: a label value not in double quotes: go_x{a=b} 1"],
    )


# --- the checker itself ---------------------------------------------------------------------------------


def test_check_exposition_returns_the_families_in_order_with_their_help_type_and_samples():
    families, lost = check_exposition('# TYPE b counter\nb{x="1"} 2 17\nb_total 1\n# HELP a A.\na 3\n')
    assert lost == []
    assert [(f.name, f.kind, f.help, f.samples) for f in families] == [
        ("b", "counter", None, ['b{x="1"} 2']),
        ("b_total", None, None, ["b_total 1"]),
        ("a", None, "A.", ["a 3"]),
    ]


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
