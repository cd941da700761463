"""Talking to the engine over HTTP: where it listens, what it answers, and how many requests it holds.

The engine reports requests in flight in two places: `/metrics` (Prometheus text, the gauge
`ds4_requests_inflight`) and `/v1/stats` with `Accept: application/json` (`server.requests_inflight`).
`/metrics` is read first; `/v1/stats` when it is missing or lacks the gauge (read_inflight). The drain
(_service/drain.py) waits on that; the watchdog reads /v1/models and a pair's route here.

This file is how the collection reaches the engine at all: engine_url() (from ds4_host and
ds4_port; the filter ds4.fleet.engine_url gives the roles the same), request_failure() and json_post()
serve every module that calls it (ds4_smoke, ds4_perf, ds4_host_status).

Standard library only and self-contained: the watchdog imports this file on the Spark, with nothing
else of the collection present.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.request
from typing import Any

METRIC = "ds4_requests_inflight"
METRICS_PATH = "/metrics"
STATS_PATH = "/v1/stats"
MODELS_PATH = "/v1/models"
# The smallest request that crosses a pair's route: one token of a one-word prompt. The engine contract
# names no report of the route; only a request says whether the worker is there.
ROUTE_PATH = "/v1/completions"
ROUTE_PROBE = {"prompt": "ping", "max_tokens": 1, "temperature": 0}
# Who asks, as the User-Agent: an engine's access log can tell the drain's looks from the watchdog's
# probes and from status reads (and a test can wait for the drain's own look).
AGENT_DRAIN = "ds4-fleet-drain"
AGENT_WATCHDOG = "ds4-fleet-watchdog"
AGENT_STATUS = "ds4-fleet-status"


class EngineUnreachable(Exception):
    """The engine did not answer HTTP at all (refused, timed out, reset)."""


class ProbeError(Exception):
    """The engine answered, but neither /metrics nor /v1/stats said how many requests are in flight."""


def engine_url(host: str, port: int) -> str:
    """The base URL that reaches an engine listening on `host`:`port` from the Spark itself.

    A wildcard listen address is reached on loopback; an IPv6 address goes in brackets.
    """
    host = (host or "").strip()
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "[::1]"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{int(port)}"


def split_sample(line: str) -> tuple[str, str, str] | None:
    """A Prometheus sample line -> (name, the series as written: name and labels, the value's text); None
    for a line that is no sample (a comment, no value, a value that is no number). A timestamp is dropped.
    """
    name = re.split(r"[{\s]", line, maxsplit=1)[0]
    rest = line[len(name) :]
    if rest.startswith("{"):
        close = rest.rfind("}")
        if close < 0:
            return None
        rest = rest[close + 1 :]
    fields = rest.split()
    if not name or name.startswith("#") or not fields:
        return None
    try:
        float(fields[0])
    except ValueError:
        return None
    return name, line[: len(line) - len(rest)], fields[0]


def parse_prometheus(text: str, name: str = METRIC) -> float | None:
    """The value of the series `name` in Prometheus text, summed over its label sets; None when absent.

    A non-finite value (NaN, +Inf) counts as absent: it says nothing about requests in flight.
    """
    total, seen = 0.0, False
    for raw in text.splitlines():
        sample = split_sample(raw.strip())
        # Another series whose name starts with this one (ds4_requests_inflight_max) is another name.
        if sample is None or sample[0] != name:
            continue
        value = float(sample[2])
        if math.isfinite(value):
            total += value
            seen = True
    return total if seen else None


def request_failure(url: str, exc: OSError, timeout: float, finish: str = "answer") -> str:
    """A request to the engine that went wrong, in words: an HTTP error with the start of its body, a
    timeout (`did not <finish> within`), or no connection at all. For every caller of the engine."""
    if isinstance(exc, urllib.error.HTTPError):
        detail = exc.read(500).decode("utf-8", "replace").strip()
        return f"{url} answered HTTP {exc.code}: {detail}"
    if isinstance(exc, TimeoutError):
        return f"{url} did not {finish} within {timeout:g} s"
    return f"{url} could not be reached: {getattr(exc, 'reason', exc)}"


def json_object(raw: Any) -> dict:
    """The JSON object the engine sent; ValueError saying what came instead, for the caller's message."""
    try:
        value = json.loads(raw)
    except ValueError:
        raise ValueError("something that is not JSON") from None
    if not isinstance(value, dict):
        raise ValueError("JSON that is not an object")
    return value


def json_post(url: str, body: dict) -> dict:
    """A POST of `body` as JSON, as the engine's OpenAI-style endpoints take it: the arguments of
    ansible.module_utils.urls.open_url, which the modules that post call (this file imports nothing of
    Ansible: the watchdog runs it on the Spark without)."""
    return {
        "url": url,
        "data": json.dumps(body).encode(),
        "method": "POST",
        "headers": {"Content-Type": "application/json"},
    }


def _get(
    url: str, timeout: float, accept: str | None = None, agent: str = AGENT_DRAIN, body: dict | None = None
) -> tuple[int, bytes]:
    """GET `url` (POST `body` as JSON when given): (status, body); an HTTP error is returned, no answer at
    all raises EngineUnreachable."""
    headers = {"User-Agent": agent}
    if accept:
        headers["Accept"] = accept
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        # The standard library's opener (what its urlopen builds), not Ansible's open_url, on purpose: the
        # watchdog runs this file on the Spark without Ansible.
        with urllib.request.build_opener().open(request, timeout=timeout) as response:
            return response.status, response.read(1 << 20)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(1 << 16)
    except (urllib.error.URLError, OSError) as exc:
        raise EngineUnreachable(request_failure(url, exc, timeout)) from exc


def read_stats(base_url: str, timeout: float = 5.0, agent: str = AGENT_DRAIN) -> dict:
    """The engine's /v1/stats as JSON; ProbeError when it answers something else."""
    url = base_url.rstrip("/") + STATS_PATH
    status, body = _get(url, timeout, accept="application/json", agent=agent)
    if status != 200:
        raise ProbeError(f"{url} answered HTTP {status}")
    try:
        return json_object(body)
    except ValueError as exc:
        raise ProbeError(f"{url} answered {exc}: {body[:120]!r}") from None


def _inflight_of_stats(stats: dict, url: str) -> int:
    server = stats.get("server")
    value = server.get("requests_inflight") if isinstance(server, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ProbeError(f"{url} has no server.requests_inflight: {json.dumps(stats)[:160]}")
    return int(value)


def read_metrics(base_url: str, timeout: float = 5.0, agent: str = AGENT_DRAIN) -> tuple[int, str]:
    """The engine's /metrics: (HTTP status, text); EngineUnreachable when it does not answer at all."""
    status, body = _get(base_url.rstrip("/") + METRICS_PATH, timeout, agent=agent)
    return status, body.decode("utf-8", "replace")


def read_models(base_url: str, timeout: float = 5.0, agent: str = AGENT_WATCHDOG) -> int:
    """The HTTP status of the engine's /v1/models, the one path every lineage serves (upstream serves no
    /metrics nor /v1/stats); EngineUnreachable when it does not answer at all."""
    status, _body = _get(base_url.rstrip("/") + MODELS_PATH, timeout, agent=agent)
    return status


def read_route(base_url: str, timeout: float = 5.0, agent: str = AGENT_WATCHDOG) -> tuple[int, str]:
    """A pair's coordinator asked for one token (ROUTE_PROBE): (HTTP status, body), which say whether its
    route reaches its worker; EngineUnreachable when it does not answer at all."""
    status, body = _get(base_url.rstrip("/") + ROUTE_PATH, timeout, agent=agent, body=ROUTE_PROBE)
    return status, body.decode("utf-8", "replace")


def read_inflight(base_url: str, timeout: float = 5.0, agent: str = AGENT_DRAIN) -> tuple[int, str]:
    """(requests in flight, where it was read: "/metrics" or "/v1/stats").

    EngineUnreachable when the engine does not answer; ProbeError when it answers but neither place
    says how many requests it holds.
    """
    base = base_url.rstrip("/")
    status, text = read_metrics(base, timeout, agent)
    if status == 200:
        value = parse_prometheus(text)
        if value is not None and value >= 0:
            return int(value), METRICS_PATH
    stats_url = base + STATS_PATH
    try:
        stats = read_stats(base, timeout, agent)
    except ProbeError as exc:
        raise ProbeError(
            f"the engine at {base} reports no requests in flight: {base + METRICS_PATH} answered HTTP "
            f"{status}{' without ' + METRIC if status == 200 else ''}, and {exc}"
        ) from exc
    return _inflight_of_stats(stats, stats_url), STATS_PATH
