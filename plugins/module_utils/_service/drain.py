"""Drain: wait until the running engine holds no request, or a time limit passes, and say what was seen.

Before a Spark is switched to another release its engine restarts, and the first SIGTERM makes it stop
accepting and finish what it holds. Waiting here first, with the Spark already out of the load balancer,
keeps that restart from holding a long generation hostage for up to ds4_stop_timeout: the switch starts
once nothing is in flight, or once the drain timeout says it may not wait longer. An engine that does not
answer at all holds no request to wait for. How many it holds is read by _spark/engine_http.py.
"""

from __future__ import annotations

import time
from typing import Any

from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import (
    EngineUnreachable,
    ProbeError,
    read_inflight,
)


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
