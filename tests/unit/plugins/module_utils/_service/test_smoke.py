"""The smoke test's client against a small HTTP server that answers as told (not the engine stand-in:
here only our handling of answers, errors and time-outs is under test)."""

import json
import threading

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._service.smoke import SmokeError, smoke
from local_http import Handler, local_http

HOLD = "hold"  # no answer until the test ends: the client's time-out must fire


class Canned(Handler):
    # (status, body bytes, seconds to wait or HOLD); set per test
    reply = (200, b"", 0.0)
    seen = []
    release = threading.Event()

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        Canned.seen.append((self.path, json.loads(self.rfile.read(length))))
        status, body, delay = Canned.reply
        if delay == HOLD:
            Canned.release.wait(30)  # a hang guard
            return
        threading.Event().wait(delay)
        self.answer(status, body)


@pytest.fixture
def server():
    Canned.seen = []
    Canned.release.clear()
    with local_http(Canned) as url:
        yield url
        Canned.release.set()


def completion(text):
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()


def test_a_matching_answer_passes_and_reports_answer_and_latency(server):
    Canned.reply = (200, completion("The capital of France is Paris."), 0.2)
    result = smoke(server + "/")
    assert result["answer"] == "The capital of France is Paris."
    # At least the engine's 0.2 s, and in seconds: within the smoke test's own time-out (300 s).
    assert 0.2 <= result["latency_s"] < 300
    assert result["url"] == server + "/v1/chat/completions"
    path, body = Canned.seen[0]
    assert path == "/v1/chat/completions"
    assert body == {
        "model": "deepseek-v4-flash",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}],
    }


def test_a_wrong_answer_fails_naming_the_pattern_and_the_answer(server):
    Canned.reply = (200, completion("The capital of France is Lyon."), 0)
    with pytest.raises(
        SmokeError,
        match=r"does not match '\[Pp\]aris' \(ds4_smoke_expect\): 'The capital of France is Lyon\.'",
    ):
        smoke(server)


def test_prompt_pattern_and_token_limit_are_the_callers(server):
    Canned.reply = (200, completion("forty-two"), 0)
    assert smoke(server, prompt="Meaning?", expect=r"^forty", max_tokens=8)["answer"] == "forty-two"
    assert Canned.seen[0][1]["max_tokens"] == 8


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ((503, b'{"error":{"message":"busy"}}', 0), r"answered HTTP 503: .*busy"),
        ((200, b"<html>not json</html>", 0), r"not a chat completion"),
        ((200, b'{"choices": []}', 0), r"not a chat completion"),
        ((200, json.dumps({"choices": [{"message": {"content": None}}]}).encode(), 0), r"non-text message"),
    ],
)
def test_bad_answers_fail_with_what_came_back(server, reply, message):
    Canned.reply = reply
    with pytest.raises(SmokeError, match=message):
        smoke(server)


def test_a_slow_engine_fails_after_the_timeout(server):
    Canned.reply = (200, completion("Paris"), HOLD)
    with pytest.raises(SmokeError, match=r"did not answer within 0.5 s"):
        smoke(server, timeout=0.5)


def test_nothing_listening_says_it_could_not_be_reached():
    with pytest.raises(SmokeError, match=r"127.0.0.1:9/v1/chat/completions could not be reached"):
        smoke("http://127.0.0.1:9")


def test_a_bad_pattern_names_the_variable():
    with pytest.raises(SmokeError, match=r"ds4_smoke_expect is not a regular expression: '\[P'"):
        smoke("http://127.0.0.1:9", expect="[P")


def proofs(*seen):
    """A prove() that answers each of `seen` in turn."""
    answers = list(seen)
    return lambda: answers.pop(0)


def test_a_listener_that_is_not_the_engines_is_never_asked(server):
    Canned.reply = (200, completion("Paris"), 0)
    stranger = {
        "problem": "127.0.0.1:8000 is held by pid 38 (python3) of user nobody (uid 65534)",
        "inode": 7,
    }
    with pytest.raises(SmokeError, match=r"^not asked, .*: 127\.0\.0\.1:8000 is held by pid 38 \(python3\)"):
        smoke(server, prove=proofs(stranger))
    assert Canned.seen == []


def test_an_answer_is_trusted_only_when_the_same_socket_held_the_port_throughout(server):
    Canned.reply = (200, completion("Paris"), 0)
    engine = {"problem": None, "inode": 7}
    assert smoke(server, prove=proofs(engine, engine))["answer"] == "Paris"
    with pytest.raises(SmokeError, match=r"listener changed while it answered \(socket 7, then 8\)"):
        smoke(server, prove=proofs(engine, {"problem": None, "inode": 8}))
    with pytest.raises(SmokeError, match=r"listener changed while it answered \(nothing listens"):
        smoke(server, prove=proofs(engine, {"problem": "nothing listens on 127.0.0.1:8000", "inode": None}))
