"""The smoke test: one question to the running engine over HTTP, its answer matched against a pattern.

Over HTTP, against the service, because a second engine (the installer's CLI smoke test) can share
neither the Spark's memory with the running one nor the engine's lock. Standard library only (and
module_utils/_spark/engine_http.py, how the collection talks to the engine), so that the module needs nothing
installed on the host.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
from typing import TYPE_CHECKING

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import open_url
from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import json_post, request_failure

if TYPE_CHECKING:
    from collections.abc import Callable

# The shell installer's question and expectation (engine contract, "Smoke").
DEFAULT_PROMPT = "What is the capital of France? Answer in one sentence."
DEFAULT_EXPECT = "[Pp]aris"
DEFAULT_MODEL = "deepseek-v4-flash"


class SmokeError(Exception):
    """The engine could not be asked, or its answer was not what the smoke test expects."""


def compile_expect(expect: str) -> re.Pattern:
    try:
        return re.compile(expect)
    except re.error as exc:
        raise SmokeError(f"ds4_smoke_expect is not a regular expression: {expect!r} ({exc})") from exc


def chat_url(base_url: str) -> str:
    return base_url.rstrip("/") + "/v1/chat/completions"


def ask(base_url: str, prompt: str, model: str, max_tokens: int, timeout: float) -> tuple[str, float]:
    """POST one chat completion; return the answer's text and the seconds it took."""
    body = {"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": prompt}]}
    started = time.monotonic()
    try:
        with open_url(**json_post(chat_url(base_url), body), timeout=timeout) as response:
            raw = response.read()
    except (urllib.error.URLError, OSError, UrlsConnectionError) as exc:
        raise SmokeError(request_failure(chat_url(base_url), exc, timeout)) from exc
    latency = time.monotonic() - started
    try:
        answer = json.loads(raw)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise SmokeError(
            f"{chat_url(base_url)} answered something that is not a chat completion: {raw[:200]!r}"
        ) from exc
    if not isinstance(answer, str):
        raise SmokeError(f"{chat_url(base_url)} answered a non-text message: {answer!r}")
    return answer, latency


def smoke(
    base_url: str,
    prompt: str = DEFAULT_PROMPT,
    expect: str = DEFAULT_EXPECT,
    model: str = DEFAULT_MODEL,
    max_tokens: int = 64,
    timeout: float = 300.0,
    prove: Callable[[], dict] | None = None,
) -> dict:
    """Ask and check. Returns the answer and latency; raises SmokeError when it does not pass.

    `prove` (ds4_listener.prove for the engine's URL: {'problem', 'inode'}) is asked before the question,
    which a listener that is not the engine's never receives, and after the answer: the same socket held
    throughout is the engine's (no other could listen on its address meanwhile), so the answer is too."""
    pattern = compile_expect(expect)
    before = prove() if prove is not None else None
    if before and before["problem"]:
        raise SmokeError(f"not asked, the engine's port is not the engine's: {before['problem']}")
    answer, latency = ask(base_url, prompt, model, max_tokens, timeout)
    if prove is not None and before is not None:
        after = prove()
        if after["problem"] or after["inode"] != before["inode"]:
            raise SmokeError(
                "the answer is not the engine's: its listener changed while it answered ("
                + (after["problem"] or f"socket {before['inode']}, then {after['inode']}")
                + ")"
            )
    result = {"answer": answer, "latency_s": round(latency, 3), "url": chat_url(base_url), "expect": expect}
    if not pattern.search(answer):
        raise SmokeError(
            f"the engine's answer to {prompt!r} does not match {expect!r} (ds4_smoke_expect): {answer!r} "
            f"after {latency:.1f} s"
        )
    return result
