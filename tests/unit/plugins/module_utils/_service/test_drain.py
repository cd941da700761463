"""The drain against a small HTTP server whose requests in flight a test sets and changes over time (not
the engine stand-in: only our reading of /metrics and /v1/stats, the waiting and the report are tested)."""

import json
import socket

import pytest
from ansible_collections.ds4.fleet.plugins.filter.ds4_engine import FilterModule as EngineFilters
from ansible_collections.ds4.fleet.plugins.module_utils._spark.drain import (
    AGENT_DRAIN,
    AGENT_WATCHDOG,
    EngineUnreachable,
    ProbeError,
    drain,
    engine_url,
    parse_prometheus,
    read_inflight,
    split_sample,
)
from ansible_collections.ds4.fleet.plugins.modules import ds4_drain
from local_http import Handler, local_http
from module_runner import run_module

METRICS = """# HELP ds4_requests_inflight Generation requests answered or queued.
# TYPE ds4_requests_inflight gauge
ds4_requests_inflight {n}
# HELP ds4_uptime_seconds Seconds since the server listened.
# TYPE ds4_uptime_seconds gauge
ds4_uptime_seconds 12.5
"""


class Engine(Handler):
    """Answers /metrics and /v1/stats from `inflight`, which a test sets, or lets drop to 0 once it has
    been reported `finish_after_reads` more times: requests finishing during a drain, arranged, not timed."""

    inflight = 0
    finish_after_reads = None
    # "gauge": /metrics has ds4_requests_inflight; "other": it answers without it; None: 404, as on a
    # release without /metrics.
    metrics = "gauge"
    stats = True
    seen = []
    agents = []

    @staticmethod
    def report():
        """The requests in flight, as this report of them says; counts down `finish_after_reads`."""
        inflight = Engine.inflight
        if Engine.finish_after_reads is not None:
            Engine.finish_after_reads -= 1
            if Engine.finish_after_reads == 0:
                Engine.inflight, Engine.finish_after_reads = 0, None
        return inflight

    def do_GET(self):
        Engine.seen.append((self.path, self.headers.get("Accept")))
        Engine.agents.append(self.headers.get("User-Agent"))
        if self.path == "/metrics" and Engine.metrics:
            text = METRICS.format(n=Engine.report()) if Engine.metrics == "gauge" else "other_metric 1\n"
            self.answer(200, text.encode(), "text/plain; version=0.0.4")
        elif self.path == "/v1/stats" and Engine.stats:
            if self.headers.get("Accept") == "application/json":
                body = {"server": {"requests_inflight": Engine.report(), "uptime_seconds": 12.5}}
                self.answer(200, json.dumps(body).encode(), "application/json")
            else:
                self.answer(200, f"server.requests_inflight: {Engine.report()}\n".encode(), "text/plain")
        else:
            self.answer(404, b'{"error":{"message":"unknown endpoint"}}', "application/json")


@pytest.fixture
def engine():
    Engine.inflight, Engine.finish_after_reads = 0, None
    Engine.metrics, Engine.stats, Engine.seen, Engine.agents = "gauge", True, [], []
    with local_http(Engine) as url:
        yield url


@pytest.fixture
def closed_port():
    """A loopback port nothing listens on: an engine that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeClock:
    """A clock that moves only when the drain sleeps: the waiting logic tested without waiting."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


# --- reading ---


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


# --- waiting ---


def test_an_idle_engine_is_drained_at_the_first_look(engine):
    report = drain(engine, timeout=10, interval=0.1)
    assert report["drained"] and report["answering"] and not report["timed_out"]
    assert (report["inflight_at_start"], report["inflight_at_end"], report["polls"]) == (0, 0, 1)
    assert report["message"] == "no request in flight (/metrics)"


def test_the_drain_waits_until_the_requests_in_flight_finish(engine):
    Engine.inflight, Engine.finish_after_reads = 2, 3
    clock = FakeClock()
    report = drain(engine, timeout=10, interval=0.1, clock=clock, sleep=clock.sleep)
    assert report["drained"] and not report["timed_out"]
    assert (report["inflight_at_start"], report["inflight_at_end"], report["inflight_max"]) == (2, 0, 2)
    assert (report["polls"], report["waited_s"]) == (4, pytest.approx(0.3))
    assert report["message"] == "drained: 2 requests in flight at the start, none after 0.3 s (/metrics)"


def test_a_drain_that_times_out_reports_what_is_still_in_flight_and_does_not_fail(engine):
    Engine.inflight = 1
    clock = FakeClock()
    report = drain(engine, timeout=0.5, interval=0.2, clock=clock, sleep=clock.sleep)
    assert report["timed_out"] and not report["drained"] and report["answering"]
    assert (report["inflight_at_end"], report["polls"], report["waited_s"]) == (1, 4, pytest.approx(0.5))
    assert report["message"] == (
        "drain timeout: 1 request still in flight after 0.5 s (limit 0.5 s, /metrics); going on, and the "
        "engine finishes them on its SIGTERM"
    )


def test_a_drain_timeout_of_zero_looks_once(engine):
    Engine.inflight = 3
    report = drain(engine, timeout=0, interval=5)
    assert report["polls"] == 1 and report["timed_out"]


def test_an_engine_that_is_down_has_nothing_to_drain(closed_port):
    report = drain(f"http://127.0.0.1:{closed_port}", timeout=10, request_timeout=2)
    assert report["drained"] and not report["answering"] and report["polls"] == 0
    assert report["inflight_at_start"] is None
    assert report["message"].startswith("the engine is not answering, so no request is in flight to wait for")


def test_an_engine_that_stops_while_draining_ends_the_wait():
    looks = iter([(2, "/metrics"), (1, "/metrics"), EngineUnreachable("down")])

    def fake_read(url, timeout):
        look = next(looks)
        if isinstance(look, Exception):
            raise look
        return look

    clock = iter(range(100)).__next__
    report = drain("http://x", timeout=50, interval=1, clock=clock, sleep=lambda s: None, read=fake_read)
    assert report["drained"] and not report["answering"]
    assert report["inflight_at_end"] == 1 and report["polls"] == 2
    assert (
        "stopped answering" in report["message"]
        and "1 request in flight at the last look" in report["message"]
    )


def test_an_engine_that_says_nothing_of_its_requests_is_not_waited_for(engine):
    Engine.metrics, Engine.stats = None, False
    report = drain(engine, timeout=10)
    assert not report["drained"] and report["answering"] and report["source"] is None
    assert report["message"].startswith("cannot tell how many requests are in flight, so not waiting")


def test_without_waiting_one_look_reports_what_is_in_flight(engine):
    Engine.inflight = 4
    report = drain(engine, timeout=10, wait=False)
    assert report["polls"] == 1 and not report["drained"] and not report["timed_out"]
    assert report["message"] == "4 requests in flight (/metrics); check mode does not wait for them"


# --- the module ---


def drain_module(args):
    return run_module(ds4_drain, args)


def test_the_module_waits_and_changes_nothing(engine):
    Engine.inflight, Engine.finish_after_reads = 1, 2
    port = int(engine.rsplit(":", 1)[1])
    code, out = drain_module({"host": "0.0.0.0", "port": port, "interval": 0.1})
    assert code == 0 and out["changed"] is False
    assert out["drained"] and (out["inflight_at_start"], out["polls"]) == (1, 3) and out["url"] == engine


def test_the_module_in_check_mode_does_not_wait(engine):
    Engine.inflight = 2
    port = int(engine.rsplit(":", 1)[1])
    code, out = drain_module({"port": port, "_ansible_check_mode": True})
    assert code == 0 and out["polls"] == 1 and out["inflight_at_end"] == 2 and not out["drained"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"port": 0}, "port must be 1 to 65535: 0"),
        ({"interval": 0}, "interval must be a positive number of seconds: 0.0"),
        ({"timeout": -1}, "timeout must be a positive number of seconds: -1.0"),
    ],
)
def test_the_module_refuses_impossible_settings(args, message):
    code, out = drain_module(args)
    assert code == 1 and out["failed"] and out["msg"] == message


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
    # The one reader of sample lines: parse_prometheus here, ds4_metrics.engine_series on the Spark.
    assert split_sample(line) == sample
