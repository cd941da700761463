"""The speed gate: the measurement's client against a small SSE server that answers as told (only our timing,
parsing and errors are under test here; the stand-in engine's own speeds are tested with the stand-in),
the comparison and its noise bound, the choice of a baseline, the history file and the module."""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._perf import gate as ds4_perf
from ansible_collections.ds4.fleet.plugins.module_utils._perf.gate import (
    PerfError,
    PerfSettingError,
    build_prompt,
    compare,
    evaluate,
    load_history,
    measure,
    plan,
    run_figures,
    setup_of,
    stream_once,
    write_history,
)
from ansible_collections.ds4.fleet.plugins.modules import ds4_perf as perf_module
from module_runner import run_module

# --- a canned streaming engine -------------------------------------------------------------------------


HOLD = "hold"  # a step's seconds: send nothing more until the test ends (a client's time-out must fire)


class VirtualClock:
    """The measurement's clock (ds4_perf's `time`), moved only by the stand-in's steps: a step moves it by its
    seconds and is sent; the next waits until the client has read the clock since (it reads it once for each
    event it receives). Every timing is then exact, however slowly the machine runs the test."""

    def __init__(self):
        self.now, self.reads = 0.0, 0
        self.changed = threading.Condition()

    def monotonic(self):
        with self.changed:
            self.reads += 1
            self.changed.notify_all()
            return self.now

    time = staticmethod(time.time)

    def step(self, seconds, read_since):
        """Wait until the client has read the clock more than `read_since` times (None: no wait), then move
        it; the count of reads to wait beyond for the next step."""
        with self.changed:
            if read_since is not None:
                assert self.changed.wait_for(lambda: self.reads > read_since, timeout=30), (
                    "no read of the clock"
                )
            self.now += seconds
            return self.reads


class Streamer(BaseHTTPRequestHandler):
    """Answers each POST with `script`: (seconds, bytes to send) steps, then closes. The seconds pass on
    `clock`; HOLD keeps the stream open, silent, until `release` is set (at the test's end)."""

    script = []
    status = 200
    seen = []
    clock = VirtualClock()
    release = threading.Event()

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        Streamer.seen.append(json.loads(self.rfile.read(length)))
        self.send_response(Streamer.status)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        read_since = None
        for seconds, data in Streamer.script:
            if seconds == HOLD:
                Streamer.release.wait(30)  # a hang guard
                return
            read_since = Streamer.clock.step(seconds, read_since)
            self.wfile.write(data)
            self.wfile.flush()

    def log_message(self, *args):
        pass


def event(payload) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def chunk(delta, finish=None):
    return event(
        {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def usage_event(prompt, completion, cached=0):
    details = {"cached_tokens": cached, "cache_write_tokens": prompt - cached}
    return event(
        {
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": details,
            },
        }
    )


def script(prefill=0.3, tokens=4, gap=0.05, usage=True, prompt=600, cached=0):
    steps = [(prefill, b": prefill\n\n" + chunk({"role": "assistant"}))]
    steps += [(gap, chunk({"content": f"{n}\n"})) for n in range(1, tokens + 1)]
    steps.append((0, chunk({}, "length")))
    if usage:
        steps.append((0, usage_event(prompt, tokens, cached)))
    steps.append((0, b"data: [DONE]\n\n"))
    return steps


@pytest.fixture
def engine(monkeypatch):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Streamer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    Streamer.seen, Streamer.status, Streamer.script = [], 200, script()
    Streamer.clock = VirtualClock()
    Streamer.release.clear()
    monkeypatch.setattr(ds4_perf, "time", Streamer.clock)
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    Streamer.release.set()
    httpd.shutdown()
    httpd.server_close()


# --- measuring ------------------------------------------------------------------------------------------


def test_the_prompt_starts_with_its_nonce_and_asks_for_a_long_answer():
    prompt = build_prompt(2048, 256, "abc123")
    assert prompt.startswith("Measurement abc123.\n")
    assert prompt.endswith("Count upward from 1 to 512, one number per line.")
    assert 1500 <= len(prompt.split()) <= 1600
    assert build_prompt(2048, 256, "abc123") == prompt


def test_a_stream_is_timed_from_its_first_event_to_its_last_choice(engine):
    timed = stream_once(engine, "question", 4, timeout=10)
    # Prefill: from the request to the first event with a choice (0.3 s); decode: from there to the last
    # (four gaps of 0.05 s); the usage event and [DONE] after it count for neither.
    assert timed["prefill_s"] == pytest.approx(0.3) and timed["decode_s"] == pytest.approx(0.2)
    assert timed["usage"]["prompt_tokens"] == 600
    body = Streamer.seen[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 4 and body["temperature"] == 0
    assert body["messages"] == [{"role": "user", "content": "question"}]


def test_figures_come_from_the_usage_and_leave_cached_tokens_out():
    usage = {"prompt_tokens": 1200, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 200}}
    figures = run_figures({"prefill_s": 0.5, "decode_s": 2.0, "usage": usage})
    assert (figures["prefill_tps"], figures["decode_tps"], figures["problems"]) == (2000.0, 50.0, [])
    assert figures["cached_tokens"] == 200


@pytest.mark.parametrize(
    ("usage", "prefill", "decode", "problem"),
    [
        (None, None, None, "reported no usage"),
        ({"prompt_tokens": 1000}, 2000.0, None, "no decode figure: None tokens generated"),
        ({"prompt_tokens": 1000, "completion_tokens": 1}, 2000.0, None, "no decode figure: 1 tokens"),
        ({"completion_tokens": 100}, None, 50.0, "no prefill figure: None prompt tokens"),
        (
            {
                "prompt_tokens": 1000,
                "completion_tokens": 100,
                "prompt_tokens_details": {"cached_tokens": 1000},
            },
            None,
            50.0,
            "no prefill figure: 1000 prompt tokens, 1000 from the cache",
        ),
        ({"prompt_tokens": "many", "completion_tokens": True}, None, None, "no prefill figure"),
    ],
)
def test_missing_or_partial_usage_leaves_that_figure_out_and_says_why(usage, prefill, decode, problem):
    figures = run_figures({"prefill_s": 0.5, "decode_s": 2.0, "usage": usage})
    assert (figures["prefill_tps"], figures["decode_tps"]) == (prefill, decode)
    assert any(problem in p for p in figures["problems"]), figures["problems"]


def test_the_best_run_counts_and_every_prompt_is_new():
    prompts, timings = [], iter([(0.5, 2.0), (0.4, 2.5), (0.8, 1.6)])

    def stream(url, prompt, max_tokens, timeout, model):
        prompts.append(prompt)
        prefill_s, decode_s = next(timings)
        return {
            "prefill_s": prefill_s,
            "decode_s": decode_s,
            "usage": {"prompt_tokens": 800, "completion_tokens": 80},
        }

    result = measure("http://x", 1000, 80, 3, 10, stream=stream)
    assert (result["prefill_tps"], result["decode_tps"]) == (2000.0, 50.0)
    assert len(result["runs"]) == 3 and len({p.splitlines()[0] for p in prompts}) == 3


def test_a_stream_without_usage_still_times_but_gives_no_figures(engine):
    Streamer.script = script(usage=False)
    result = measure(engine, 100, 4, 1, 10)
    assert (result["prefill_tps"], result["decode_tps"]) == (None, None)
    assert "the engine reported no usage in its stream" in result["runs"][0]["problems"]


@pytest.mark.parametrize(
    ("status", "steps", "message"),
    [
        (503, [(0, b'{"error":{"message":"busy"}}')], r"answered HTTP 503: .*busy"),
        (200, [(0, b"data: [DONE]\n\n")], r"streamed no completion events"),
        (200, [(0, b"data: {not json\n\n")], r"streamed something that is not JSON"),
        (200, [(0, b"data: [1, 2]\n\n")], r"streamed JSON that is not an object"),
        (200, [(HOLD, b"")], r"did not finish the measurement within 0.5 s"),
    ],
)
def test_an_engine_that_cannot_be_measured_fails_with_what_came_back(engine, status, steps, message):
    Streamer.status, Streamer.script = status, steps
    with pytest.raises(PerfError, match=message):
        stream_once(engine, "q", 4, timeout=0.5)


def test_nothing_listening_says_it_could_not_be_reached():
    with pytest.raises(PerfError, match=r"127.0.0.1:9/v1/chat/completions could not be reached"):
        stream_once("http://127.0.0.1:9", "q", 4, timeout=2)


# --- comparing -----------------------------------------------------------------------------------------

OLD = {"release": "v0.6.5", "commit": "a" * 40, "prefill_tps": 1000.0, "decode_tps": 40.0}


@pytest.mark.parametrize(
    ("prefill", "decode", "regressed"),
    [
        (1000.0, 40.0, []),
        (950.0, 37.0, []),  # -5%, -7.5%: noise within the bound
        (900.0, 36.0, []),  # exactly -10% is still within it
        (1300.0, 50.0, []),  # faster
        (1000.0, 28.0, ["decode"]),  # -30%
        (750.0, 40.0, ["prefill"]),  # the wrong-arch build: -25% prefill
        (890.0, 35.9, ["prefill", "decode"]),
    ],
)
def test_a_drop_beyond_the_bound_is_a_regression(prefill, decode, regressed):
    result = compare({"prefill_tps": prefill, "decode_tps": decode}, OLD, 10)
    assert result["regressed"] == regressed and result["missing"] == []
    assert result["metrics"]["decode"]["change_pct"] == round((decode - 40.0) / 40.0 * 100, 1)


@pytest.mark.parametrize(
    ("new", "old", "missing"),
    [
        ({"prefill_tps": None, "decode_tps": 20.0}, OLD, ["prefill"]),
        ({"prefill_tps": 500.0, "decode_tps": 20.0}, {"prefill_tps": 1000.0}, ["decode"]),
        (
            {"prefill_tps": 500.0, "decode_tps": 20.0},
            {"prefill_tps": 0, "decode_tps": "fast"},
            ["prefill", "decode"],
        ),
        ({}, OLD, ["prefill", "decode"]),
    ],
)
def test_a_figure_missing_on_either_side_is_not_compared(new, old, missing):
    result = compare(new, old, 10)
    assert result["missing"] == missing
    assert not set(result["regressed"]) & set(missing)


@pytest.mark.parametrize("bad", [0, 100, -5, "ten", None, True, "150"])
def test_a_bound_outside_0_to_100_names_the_variable(bad):
    with pytest.raises(
        PerfSettingError, match=r"ds4_perf_max_regression is a percentage above 0 and below 100"
    ):
        compare({}, OLD, bad)


# --- baselines and records -----------------------------------------------------------------------------

MODELS = {"base": "base-0731.gguf", "dspark": "drafter-0731.gguf"}
SETTINGS = {"args": ["--cuda", "-c", "524288"], "env": {"DS4_CONT_DSPARK": "1"}}
NEW = {"release": "v0.6.5.2", "commit": "b" * 40}
PREV = {"release": "v0.6.5", "commit": "a" * 40}


def record(release, verdict="passed", models=MODELS, settings=SETTINGS, **figures):
    return {
        **release,
        "models": models,
        "settings": settings,
        "verdict": verdict,
        "prefill_tps": 1000.0,
        "decode_tps": 40.0,
        **figures,
    }


def test_a_first_install_is_measured_as_a_baseline():
    decision = plan([], NEW, None, MODELS, SETTINGS)
    assert decision["measure"] and decision["baseline"] is None
    assert decision["why"] == "first measurement on this Spark"


def test_a_run_that_switched_nothing_measures_nothing_when_the_figures_are_on_record():
    history = [record(NEW)]
    decision = plan(history, NEW, NEW, MODELS, SETTINGS)
    assert not decision["measure"] and decision["on_record"] is history[0]


def test_a_spark_provisioned_before_the_gate_gets_its_baseline_on_the_next_run():
    decision = plan([record(PREV)], NEW, NEW, MODELS, SETTINGS)
    assert decision["measure"] and decision["baseline"] is None
    assert "no figures of v0.6.5.2 on this model set, launch settings and measurement yet" in decision["why"]


def test_a_switch_compares_with_the_newest_figures_of_the_release_replaced():
    old, newer = record(PREV, decode_tps=30.0), record(PREV, decode_tps=41.0)
    history = [old, newer, record(PREV, "rolled-back"), record(NEW, "rolled-back")]
    decision = plan(history, NEW, PREV, MODELS, SETTINGS)
    assert decision["measure"] and decision["baseline"] is newer


@pytest.mark.parametrize(
    ("models", "settings"),
    [
        ({"base": "base-legacy.gguf"}, SETTINGS),
        (MODELS, {"args": ["--cuda", "-c", "65536"], "env": {"DS4_CONT_DSPARK": "1"}}),
    ],
)
def test_a_changed_model_set_or_settings_starts_a_new_baseline(models, settings):
    decision = plan([record(PREV)], NEW, PREV, models, settings)
    assert decision["measure"] and decision["baseline"] is None
    assert (
        decision["why"] == "the model set, launch settings or measurement changed since v0.6.5 was measured"
    )


def test_a_release_replaced_that_was_never_measured_gives_no_baseline():
    decision = plan([record({"release": "v0.6.3", "commit": None})], NEW, PREV, MODELS, SETTINGS)
    assert decision["baseline"] is None and decision["why"] == "v0.6.5, which ran before, was never measured"


def test_a_moved_tag_is_another_build():
    moved = {"release": "v0.6.5", "commit": "c" * 40}
    assert plan([record(PREV)], NEW, moved, MODELS, SETTINGS)["baseline"] is None
    assert plan([record({"release": "v0.6.5", "commit": None})], NEW, moved, MODELS, SETTINGS)["baseline"]


def measured(prefill, decode, problems=()):
    return {
        "prefill_tps": prefill,
        "decode_tps": decode,
        "prompt_tokens": 1600,
        "completion_tokens": 256,
        "runs": [{"problems": list(problems)}] * 3,
    }


def test_a_slower_release_is_rolled_back_with_both_figures_in_the_message():
    outcome = evaluate(
        measured(1001.0, 28.0), NEW, record(PREV), "compared", MODELS, SETTINGS, 10, "enforce", 5.0
    )
    assert outcome["failed"] and outcome["record"]["verdict"] == "rolled-back"
    assert outcome["message"] == (
        "v0.6.5.2: prefill 1001.0 tok/s against 1000.0 tok/s of v0.6.5 (+0.1%); decode 28.0 tok/s against "
        "40.0 tok/s of v0.6.5 (-30.0%): decode slower than ds4_perf_max_regression (10%) allows on this Spark"
    )
    assert outcome["record"]["baseline"]["decode_tps"] == 40.0
    assert outcome["record"]["change_pct"] == {"prefill": 0.1, "decode": -30.0}
    assert outcome["record"]["measured_at"] == 5.0


def test_under_warn_a_slower_release_is_kept_and_says_so():
    outcome = evaluate(measured(1000.0, 28.0), NEW, record(PREV), "compared", MODELS, SETTINGS, 10, "warn")
    assert not outcome["failed"] and outcome["record"]["verdict"] == "kept-slower"
    assert outcome["message"].endswith("kept, as ds4_perf_gate is warn")


def test_a_release_within_the_bound_passes():
    outcome = evaluate(measured(960.0, 38.2), NEW, record(PREV), "compared", MODELS, SETTINGS, 10, "enforce")
    assert not outcome["failed"] and outcome["record"]["verdict"] == "passed"
    assert outcome["message"].endswith("(-4.5%): within ds4_perf_max_regression (10%)")


def test_a_baseline_records_and_passes_saying_why():
    outcome = evaluate(
        measured(1000.0, 40.0), NEW, None, "first measurement on this Spark", MODELS, SETTINGS, 10, "enforce"
    )
    assert not outcome["failed"] and outcome["record"]["verdict"] == "baseline"
    assert outcome["message"] == (
        "v0.6.5.2: prefill 1000.0 tok/s, decode 40.0 tok/s; recorded as the baseline, nothing compared "
        "(first measurement on this Spark)"
    )


def test_partial_figures_pass_on_what_can_be_compared_and_say_what_could_not():
    outcome = evaluate(
        measured(990.0, None, ["no decode figure: 1 tokens generated"]),
        NEW, record(PREV), "compared", MODELS, SETTINGS, 10, "enforce",
    )  # fmt: skip
    assert not outcome["failed"]
    assert "decode no figure against 40.0 tok/s of v0.6.5" in outcome["message"]
    assert (
        "not compared, for want of a figure: decode (no decode figure: 1 tokens generated)"
        in outcome["message"]
    )


def test_the_setup_leaves_the_listen_address_out():
    launch = {
        "settings": {"base_model": "/g/base.gguf", "dspark_model": "/g/drafter.gguf", "mtp_model": None},
        "args": ["--cuda", "-m", "/g/base.gguf", "--host", "0.0.0.0", "--port", "8001", "-c", "4096"],
        "env": {"DS4_CONT_DSPARK": "1"},
    }
    models, settings = setup_of(launch)
    assert models == {"base": "base.gguf", "dspark": "drafter.gguf"}
    assert settings == {
        "args": ["--cuda", "-m", "/g/base.gguf", "-c", "4096"],
        "env": {"DS4_CONT_DSPARK": "1"},
    }
    with pytest.raises(PerfSettingError, match="launch must be the result of ds4_launch_config"):
        setup_of({"args": []})


def test_the_history_keeps_the_newest_records_and_never_writes_through_a_link(tmp_path):
    fact = tmp_path / "facts.d" / "ds4_perf.fact"
    assert load_history(str(fact)) == []
    write_history(str(fact), [{"n": n} for n in range(30)], keep=20)
    assert [r["n"] for r in load_history(str(fact))] == list(range(10, 30))
    assert oct(fact.stat().st_mode & 0o777) == "0o644"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("theirs")
    fact.unlink()
    fact.symlink_to(elsewhere)
    write_history(str(fact), [{"n": 1}], keep=20)
    assert elsewhere.read_text() == "theirs" and not fact.is_symlink()


@pytest.mark.parametrize("content", ["{broken", '{"history": "no"}', "[]"])
def test_a_damaged_history_is_refused(tmp_path, content):
    fact = tmp_path / "ds4_perf.fact"
    fact.write_text(content)
    with pytest.raises(PerfSettingError, match="measurement history"):
        load_history(str(fact))


# --- the module ----------------------------------------------------------------------------------------


def release_dir(tmp_path, release, commit):
    where = tmp_path / "releases" / release
    where.mkdir(parents=True)
    (where / ".ds4-build.json").write_text(json.dumps({"release": release, "commit": commit}))
    return str(where)


def args(engine, tmp_path, release, replaced="", **extra):
    return {
        "url": engine,
        "fact": str(tmp_path / "facts.d" / "ds4_perf.fact"),
        "release_dir": release,
        "replaced_dir": replaced,
        "launch": {"settings": {"base_model": "/g/base.gguf"}, "args": ["--cuda"], "env": {}},
        "prompt_tokens": 64,
        "decode_tokens": 4,
        "runs": 2,
        **extra,
    }


def test_the_module_records_a_baseline_then_measures_nothing_then_gates_a_slower_release(engine, tmp_path):
    old = release_dir(tmp_path, "v0.6.5", "a" * 40)
    new = release_dir(tmp_path, "v0.6.5.3", "b" * 40)
    Streamer.script = script(prefill=0.1, gap=0.05)
    rc, first = run_module(perf_module, args(engine, tmp_path, old))
    assert rc == 0 and first["changed"] and first["record"]["verdict"] == "baseline", first
    assert "first measurement on this Spark" in first["message"]

    rc, again = run_module(perf_module, args(engine, tmp_path, old, old))
    assert rc == 0 and not again["changed"] and not again["measured"], again
    assert len(Streamer.seen) == 2

    Streamer.script = script(prefill=0.1, gap=0.15)  # decode three times slower
    rc, slower = run_module(perf_module, args(engine, tmp_path, new, old))
    assert rc == 1 and slower["failed"] and slower["changed"], slower
    assert "decode slower than ds4_perf_max_regression (10%) allows" in slower["msg"]
    assert f"of v0.6.5 ({slower['record']['change_pct']['decode']:+.1f}%)" in slower["msg"]
    history = json.loads((tmp_path / "facts.d" / "ds4_perf.fact").read_text())["history"]
    assert [r["verdict"] for r in history] == ["baseline", "rolled-back"]

    rc, kept = run_module(perf_module, args(engine, tmp_path, new, old, gate="warn"))
    assert rc == 0 and kept["record"]["verdict"] == "kept-slower", kept


def test_the_module_refuses_bad_settings_before_measuring(engine, tmp_path):
    old = release_dir(tmp_path, "v0.6.5", "a" * 40)
    rc, result = run_module(perf_module, args(engine, tmp_path, old, runs=0))
    assert rc == 1 and result["msg"] == "runs must be 1 or more: 0"
    rc, result = run_module(perf_module, args(engine, tmp_path, old, max_regression=0))
    assert rc == 1 and "ds4_perf_max_regression" in result["msg"]
    assert Streamer.seen == [] and not os.path.exists(tmp_path / "facts.d")


def test_the_module_fails_when_the_engine_cannot_be_measured(tmp_path):
    old = release_dir(tmp_path, "v0.6.5", "a" * 40)
    rc, result = run_module(perf_module, args("http://127.0.0.1:9", tmp_path, old))
    assert rc == 1 and result["msg"].startswith("the speed measurement failed: "), result
    assert load_history(str(tmp_path / "facts.d" / "ds4_perf.fact")) == []


def test_another_measurement_shape_starts_a_new_baseline(engine, tmp_path):
    old = release_dir(tmp_path, "v0.6.5", "a" * 40)
    new = release_dir(tmp_path, "v0.6.5.2", "b" * 40)
    Streamer.script = script(prefill=0.05, gap=0.02)
    rc, first = run_module(perf_module, args(engine, tmp_path, old))
    assert rc == 0 and first["record"]["settings"]["measurement"] == {"prompt_tokens": 64, "decode_tokens": 4}
    rc, other = run_module(perf_module, args(engine, tmp_path, new, old, prompt_tokens=128))
    assert rc == 0 and other["record"]["verdict"] == "baseline", other
    assert "launch settings or measurement changed since v0.6.5 was measured" in other["message"]
