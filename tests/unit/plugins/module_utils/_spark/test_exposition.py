"""The engine's own /metrics checked line by line against the Prometheus text exposition format (version
0.0.4, _spark/exposition.py) before the textfile copies any of it (metrics.engine_series), so that one bad
line never makes node_exporter drop the whole file."""

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._spark.exposition import check_exposition
from ansible_collections.ds4.fleet.plugins.module_utils._spark.metrics import engine_series

GOOD = (
    "# HELP ds4_requests_inflight Generation requests answered or queued.\n"
    "# TYPE ds4_requests_inflight gauge\n"
    "ds4_requests_inflight 2\n"
    "# HELP ds4_uptime_seconds Seconds since the server listened.\n"
    "# TYPE ds4_uptime_seconds gauge\n"
    "ds4_uptime_seconds 12.5\n"
)


def series(text):
    """The textfile's view of the engine's TEXT: (the lines kept, the lines dropped with why)."""
    return engine_series(check_exposition(text or ""))


def kept(text):
    return series(text)[0]


def dropped(text):
    return series(text)[1]


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
    assert series(GOOD) == (GOOD, [])


def test_an_empty_or_absent_exposition_gives_nothing():
    assert series("") == ("", [])
    assert series(None) == ("", [])


@pytest.mark.parametrize(
    "value", ["0", "-3", "12.5", "1e3", "-1.5E-7", ".5", "5.", "+2", "NaN", "+Inf", "-Inf", "Inf"]
)
def test_every_float_the_format_allows_is_a_value(value):
    assert kept(f"ds4_x {value}\n") == f"ds4_x {value}\n"


def test_a_timestamp_is_checked_and_left_out_since_node_exporter_refuses_them():
    assert series("ds4_x 1 1700000000000\nds4_y 2 -5\n") == ("ds4_x 1\nds4_y 2\n", [])


def test_escaped_label_values_pass_as_written():
    line = r'ds4_x{path="C:\\DIR\\FILE.TXT",error="Cannot find file:\n\"FILE.TXT\""} 1.458255915e9'
    assert series(line + "\n") == (line + "\n", [])


def test_blanks_between_the_tokens_and_a_trailing_comma_are_written_the_usual_way():
    text = 'ds4_x { a = "1" ,\tb="2", }  3\t 1700000000000 \n  ds4_y{} 4\n'
    assert series(text) == ('ds4_x{a="1",b="2"} 3\nds4_y 4\n', [])


def test_a_help_text_keeps_its_escapes():
    text = "# HELP ds4_x A \\\\ backslash\\nand a line.\nds4_x 1\n"
    assert series(text) == (text, [])


def test_comments_and_an_openmetrics_eof_are_left_out_without_counting():
    text = "# a comment\n#\n# HELP\n" + GOOD + "# EOF\n"
    assert series(text) == (GOOD, [])


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
    assert series(text) == (text, [])
    # A second TYPE through a member's name is a second TYPE of the family.
    assert dropped(text + "# TYPE ds4_latency_seconds_count counter\n") == [
        "line 11: a second TYPE line for ds4_latency_seconds, or one after its samples: "
        "# TYPE ds4_latency_seconds_count counter"
    ]


def test_help_and_type_without_samples_are_left_out():
    assert series("# HELP ds4_x Nothing yet.\n# TYPE ds4_x gauge\n") == ("", [])


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
    text, lost = series(GOOD + line + "\n")
    assert text == GOOD
    assert lost == [f"line 7: {why}: {line}"]


def test_a_second_help_line_is_dropped():
    text = "# HELP ds4_x One.\n# HELP ds4_x Two.\nds4_x 1\n"
    assert series(text) == (
        "# HELP ds4_x One.\nds4_x 1\n",
        ["line 2: a second HELP line for ds4_x, or one after its samples: # HELP ds4_x Two."],
    )


def test_a_type_after_the_familys_samples_is_dropped_and_the_samples_stay_untyped():
    text = "ds4_x 1\n# TYPE ds4_x gauge\n"
    assert series(text) == (
        "ds4_x 1\n",
        ["line 2: a second TYPE line for ds4_x, or one after its samples: # TYPE ds4_x gauge"],
    )


def test_samples_of_a_family_after_another_family_began_are_dropped():
    text = 'ds4_x 1\nds4_y 2\nds4_x{a="1"} 3\n# HELP ds4_y Late.\n'
    assert series(text) == (
        "ds4_x 1\nds4_y 2\n",
        [
            'line 3: a sample of ds4_x apart from the family\'s other lines: ds4_x{a="1"} 3',
            "line 4: a second HELP line for ds4_y, or one after its samples: # HELP ds4_y Late.",
        ],
    )


def test_help_or_type_of_a_family_after_another_family_began_is_dropped():
    text = "# HELP ds4_x X.\nds4_y 1\n# TYPE ds4_x gauge\nds4_x 2\n"
    assert series(text) == (
        "ds4_y 1\n",
        [
            "line 3: a TYPE line for ds4_x apart from the family's other lines: # TYPE ds4_x gauge",
            "line 4: a sample of ds4_x apart from the family's other lines: ds4_x 2",
        ],
    )


def test_carriage_returns_at_the_ends_of_lines_are_taken_off():
    assert series("# TYPE ds4_x gauge\r\nds4_x 1\r\n") == ("# TYPE ds4_x gauge\nds4_x 1\n", [])


def test_a_series_given_twice_is_dropped_the_second_time():
    # node_exporter fills a label a sample lacks with "": the same series as an empty value.
    text = 'ds4_x{a="1",b=""} 1\nds4_x{b="",a="1"} 2\nds4_x{a="1"} 3\nds4_x 4\nds4_x{c=""} 5\n'
    assert series(text) == (
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
    assert series(text) == (
        '# TYPE ds4_h histogram\nds4_h_bucket{le="1"} 1\n',
        [
            'line 2: an le label that is not a float: ds4_h_bucket{le="high"} 1',
            'line 5: a quantile label that is not a float: ds4_s{quantile="most"} 1',
        ],
    )


def test_garbage_counts_a_line_each_and_leaves_the_good_lines_alone():
    garbage = "<html><body>502 Bad Gateway</body></html>\n\x00\x01binary\n{}\n= 1\n"
    text, lost = series(GOOD + garbage + "ds4_after 1\n")
    assert text == GOOD + "ds4_after 1\n"
    assert len(lost) == 4


# --- only the engine's own series are copied ------------------------------------------------------------


def test_other_names_and_our_own_prefix_are_left_out_without_counting():
    text = (
        "# TYPE go_goroutines gauge\ngo_goroutines 8\n"
        "process_open_fds 3\n"
        "# TYPE ds4_spark_engine_up gauge\nds4_spark_engine_up 1\n"
    ) + GOOD
    assert series(text) == (GOOD, [])


def test_a_bad_line_of_another_name_counts_too():
    # It is the engine's output that is wrong, whatever the name; its good lines are still copied.
    assert series(GOOD + "go_x{a=b} 1\n") == (
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
