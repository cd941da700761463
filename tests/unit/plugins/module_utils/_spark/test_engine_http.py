"""Reading the engine (_spark/engine_http.py) against a small HTTP server whose requests in flight a test
sets (tests/unit/inflight_engine.py)."""

import pytest
from ansible_collections.ds4.fleet.plugins.filter.ds4_engine import FilterModule as EngineFilters
from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import (
    AGENT_DRAIN,
    AGENT_WATCHDOG,
    EngineUnreachable,
    ProbeError,
    engine_url,
    parse_prometheus,
    read_inflight,
    split_sample,
)
from inflight_engine import METRICS, Engine


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (METRICS.format(n=3), 3),
        ("ds4_requests_inflight 0\n", 0),
        # Label sets add up: requests in flight per endpoint are still requests in flight.
        ('ds4_requests_inflight{endpoint="chat"} 2\nds4_requests_inflight{endpoint="completions"} 1\n', 3),
        # A timestamp after the value is allowed by the format.
        ("ds4_requests_inflight 4 1780000000000\n", 4),
        # A longer name that starts with ours is another series.
        ("ds4_requests_inflight_max 9\nds4_requests_inflight 1\n", 1),
        ("ds4_requests_inflight_max 9\n", None),
        ("# ds4_requests_inflight 5\n", None),
        ("ds4_requests_inflight NaN\n", None),
        ("ds4_requests_inflight +Inf\n", None),
        ("ds4_requests_inflight oops\n", None),
        ("", None),
    ],
)
def test_prometheus_text_gives_the_gauge_or_none(text, value):
    assert parse_prometheus(text) == value


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("0.0.0.0", "http://127.0.0.1:8000"),
        ("", "http://127.0.0.1:8000"),
        ("::", "http://[::1]:8000"),
        ("fd00::5", "http://[fd00::5]:8000"),
        ("[fd00::5]", "http://[fd00::5]:8000"),
        ("spark01.lan", "http://spark01.lan:8000"),
    ],
)
def test_the_engine_is_reached_where_it_listens_and_a_wildcard_on_loopback(host, url):
    assert engine_url(host, 8000) == url
    # The roles reach it through the filter, which is this same function.
    assert EngineFilters().filters()["engine_url"](host, "8000") == url


def test_requests_in_flight_are_read_from_metrics_first(engine):
    Engine.inflight = 2
    assert read_inflight(engine) == (2, "/metrics")
    assert [path for path, _ in Engine.seen] == ["/metrics"]


def test_without_metrics_the_json_stats_answer(engine):
    Engine.inflight, Engine.metrics = 5, None
    assert read_inflight(engine) == (5, "/v1/stats")
    assert Engine.seen == [("/metrics", None), ("/v1/stats", "application/json")]


def test_metrics_without_the_gauge_fall_back_to_the_stats(engine):
    Engine.inflight, Engine.metrics = 1, "other"
    assert read_inflight(engine) == (1, "/v1/stats")


def test_an_engine_that_says_nothing_of_its_requests_is_a_probe_error(engine):
    Engine.metrics, Engine.stats = None, False
    with pytest.raises(ProbeError, match=r"/metrics answered HTTP 404, and .*/v1/stats answered HTTP 404"):
        read_inflight(engine)


def test_each_read_says_who_asks_so_the_drain_is_told_from_the_watchdog(engine):
    Engine.inflight, Engine.metrics = 1, None
    read_inflight(engine)
    read_inflight(engine, agent=AGENT_WATCHDOG)
    assert Engine.agents == [AGENT_DRAIN, AGENT_DRAIN, AGENT_WATCHDOG, AGENT_WATCHDOG]


def test_an_engine_that_is_down_is_unreachable(closed_port):
    with pytest.raises(EngineUnreachable, match="could not be reached"):
        read_inflight(f"http://127.0.0.1:{closed_port}", timeout=2)


@pytest.mark.parametrize(
    ("line", "sample"),
    [
        ("ds4_requests_inflight 2", ("ds4_requests_inflight", "ds4_requests_inflight", "2")),
        (
            'ds4_tokens_total{kind="out"} 17 1700000000',
            ("ds4_tokens_total", 'ds4_tokens_total{kind="out"}', "17"),
        ),
        ('ds4_x{a="}"} 3', ("ds4_x", 'ds4_x{a="}"}', "3")),
        ("ds4_x NaN", ("ds4_x", "ds4_x", "NaN")),
        ("# HELP ds4_x what it is", None),
        ("ds4_x", None),
        ("ds4_x{a=1 3", None),
        ("ds4_x three", None),
    ],
)
def test_a_sample_line_splits_into_name_series_and_value(line, sample):
    # The one reader of a sample line's name, series and value, under parse_prometheus.
    assert split_sample(line) == sample
