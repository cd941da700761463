"""Drain: wait until the running engine holds no request, or a time limit passes, and say what was seen.

Before a Spark is switched to another release its engine restarts, and the first SIGTERM makes it stop
accepting and finish what it holds. Waiting here first, with the Spark already out of the load balancer,
keeps that restart from holding a long generation hostage for up to ds4_stop_timeout: the switch starts
once nothing is in flight, or once the drain timeout says it may not wait longer.

The engine reports requests in flight in two places: `/metrics` (Prometheus text, the gauge
`ds4_requests_inflight`) and `/v1/stats` with `Accept: application/json` (`server.requests_inflight`).
`/metrics` is read first; `/v1/stats` when it is missing or lacks the gauge. An engine that does not
answer at all holds no request to wait for.

This file is also how the collection reaches the engine at all: engine_url() (from ds4_host and
ds4_port; the filter ds4.fleet.engine_url gives the roles the same), request_failure() and json_post()
serve every module that calls it (ds4_smoke, ds4_perf, ds4_host_status).

Standard library only and self-contained: the module runs on the Spark, and the watchdog imports this
file there with nothing else of the collection present.
"""

from __future__ import annotations

import json
import math
import re
import time
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


def _plural(count: int) -> str:
    return f"{count} request{'' if count == 1 else 's'}"


def drain(
    base_url: str,
    timeout: float = 300.0,
    interval: float = 1.0,
    request_timeout: float = 5.0,
    wait: bool = True,
    clock: Any = time.monotonic,
    sleep: Any = time.sleep,
    read: Any = read_inflight,
) -> dict:
    """Poll the engine until no request is in flight or `timeout` seconds pass; a busy engine is no error.

    Returns what was seen: `drained` (nothing in flight at the end, or no engine answering), `answering`,
    `inflight_at_start`, `inflight_at_end`, `inflight_max`, `waited_s`, `polls`, `source`, `timed_out`,
    `url` and a one-sentence `message`. With `wait` false it reads once and reports (check mode).
    An engine that answers but says nothing of what it holds (a release before /metrics and /v1/stats)
    is not waited for: `drained` is false and `source` null, and the engine's own SIGTERM drain remains.
    """
    started = clock()
    report = {
        "url": base_url,
        "answering": True,
        "drained": False,
        "timed_out": False,
        "inflight_at_start": None,
        "inflight_at_end": None,
        "inflight_max": None,
        "polls": 0,
        "source": None,
        "waited_s": 0.0,
    }
    while True:
        try:
            inflight, source = read(base_url, request_timeout)
        except EngineUnreachable as exc:
            report["waited_s"] = round(clock() - started, 3)
            return _not_answering(report, exc)
        except ProbeError as exc:
            report["waited_s"] = round(clock() - started, 3)
            report["message"] = f"cannot tell how many requests are in flight, so not waiting: {exc}"
            return report
        elapsed = clock() - started
        _record_look(report, inflight, source, elapsed)
        message = _verdict(report, inflight, elapsed, wait, timeout)
        if message:
            report["message"] = message
            return report
        sleep(max(0.0, min(interval, timeout - elapsed)))


def _not_answering(report: dict, exc: EngineUnreachable) -> dict:
    """An engine that does not answer holds nothing to wait for, whether it never did or stopped."""
    report["answering"] = False
    report["drained"] = True
    if report["polls"] == 0:
        report["message"] = f"the engine is not answering, so no request is in flight to wait for ({exc})"
    else:
        report["message"] = (
            f"the engine stopped answering after {report['waited_s']:g} s with "
            f"{_plural(report['inflight_at_end'])} in flight at the last look ({exc})"
        )
    return report


def _record_look(report: dict, inflight: int, source: str, elapsed: float) -> None:
    report["polls"] += 1
    report["source"] = source
    if report["inflight_at_start"] is None:
        report["inflight_at_start"] = inflight
    report["inflight_at_end"] = inflight
    report["inflight_max"] = max(inflight, report["inflight_max"] or 0)
    report["waited_s"] = round(elapsed, 3)


def _verdict(report: dict, inflight: int, elapsed: float, wait: bool, timeout: float) -> str | None:
    """The message that ends the drain after this look (drained, check mode, time out), or None to go on."""
    source = report["source"]
    if inflight == 0:
        report["drained"] = True
        if report["inflight_at_start"] == 0:
            return f"no request in flight ({source})"
        return (
            f"drained: {_plural(report['inflight_at_start'])} in flight at the start, none after "
            f"{elapsed:.1f} s ({source})"
        )
    if not wait:
        return f"{_plural(inflight)} in flight ({source}); check mode does not wait for them"
    if elapsed >= timeout:
        report["timed_out"] = True
        return (
            f"drain timeout: {_plural(inflight)} still in flight after {elapsed:.1f} s (limit "
            f"{timeout:g} s, {source}); going on, and the engine finishes them on its SIGTERM"
        )
    return None
