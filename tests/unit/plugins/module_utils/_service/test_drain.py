"""The drain (_service/drain.py): waiting until the engine holds no request, against a small HTTP server
whose requests in flight a test sets and changes over time (tests/unit/inflight_engine.py), and the module
ds4_drain on top."""

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._service.drain import drain
from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import EngineUnreachable
from ansible_collections.ds4.fleet.plugins.modules import ds4_drain
from inflight_engine import Engine, FakeClock
from module_runner import run_module


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
