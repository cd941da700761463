#!/usr/bin/env python3
"""A bounded client load against a ds4 endpoint: a few concurrent clients, streaming and not.

Runs anywhere Python 3.11 runs (standard library only): the gateway benchmark and the gateway scenario's
tests copy it into a sandbox container and run it there. Each client sends requests one after another,
in turn a streamed chat completion, a plain chat completion and an Anthropic message, until --requests
each are sent or the file --stop-file appears (then each finishes the request it holds). Each request
has a whole-request limit of --timeout seconds.

A request counts as ok when it answered HTTP 200 with the whole answer: for a plain one, a JSON body with
the answer's text; for a stream, events up to a finish_reason and `data: [DONE]`. Everything else
(refused, reset, a 5xx, a stream cut short, a time-out) is a failure, recorded with why.

It prints one JSON document: counts, latency percentiles in milliseconds, and with --raw every request
(client, kind, start and end as Unix times, ok, error).

    python3 gateway_load.py --url https://gw01:8443 --key KEY --insecure --clients 4 --requests 50
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import ssl
import threading
import time
import urllib.parse

QUESTION = "What is the capital of France? Answer in one sentence."
KINDS = ("stream", "chat", "messages")


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile, or None when there are no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(share / 100 * len(ordered))) - 1]


class Client:
    """One HTTP(S) connection, opened again after every error, to the endpoint at `url`."""

    def __init__(self, url: str, key: str | None, insecure: bool, timeout: float, keep_alive: bool):
        parts = urllib.parse.urlsplit(url)
        self.https = parts.scheme == "https"
        self.host, self.port = parts.hostname, parts.port or (443 if self.https else 80)
        self.key, self.timeout, self.keep_alive = key, timeout, keep_alive
        self.context = ssl._create_unverified_context() if insecure else ssl.create_default_context()
        self.conn = None

    def connection(self):
        if self.conn is None:
            if self.https:
                self.conn = http.client.HTTPSConnection(
                    self.host, self.port, timeout=self.timeout, context=self.context
                )
            else:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self.conn

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def send(self, method: str, path: str, body: dict | None):
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        if not self.keep_alive:
            headers["Connection"] = "close"
        data = json.dumps(body).encode() if body is not None else None
        conn = self.connection()
        conn.request(method, path, body=data, headers=headers)
        return conn.getresponse()

    def request(self, kind: str) -> str | None:
        """Send one request of `kind`; None when it was answered in full, else why not."""
        try:
            return self._request(kind)
        # Anything at all: an answer of an unexpected shape (KeyError, IndexError...) is a failed request
        # too, recorded with why, not a client thread that dies and leaves its requests uncounted.
        except Exception as exc:
            self.close()
            return f"{type(exc).__name__}: {exc}"
        finally:
            if not self.keep_alive:
                self.close()

    def _request(self, kind: str) -> str | None:
        messages = [{"role": "user", "content": QUESTION}]
        if kind == "models":
            response = self.send("GET", "/v1/models", None)
            body = response.read()
            if response.status != 200:
                return f"HTTP {response.status}: {body[:120]!r}"
            return None if json.loads(body).get("data") else f"no models: {body[:120]!r}"
        if kind == "messages":
            response = self.send(
                "POST", "/v1/messages", {"model": "deepseek-v4-flash", "max_tokens": 64, "messages": messages}
            )
            body = response.read()
            if response.status != 200:
                return f"HTTP {response.status}: {body[:120]!r}"
            text = "".join(part.get("text", "") for part in json.loads(body).get("content", []))
            return None if text else f"an empty answer: {body[:120]!r}"
        body = {"model": "deepseek-v4-flash", "max_tokens": 64, "messages": messages}
        if kind == "stream":
            body["stream"] = True
        response = self.send("POST", "/v1/chat/completions", body)
        if response.status != 200:
            return f"HTTP {response.status}: {response.read()[:120]!r}"
        if kind == "chat":
            answer = json.loads(response.read())
            text = answer["choices"][0]["message"]["content"]
            return None if text else "an empty answer"
        finished = done = False
        text = ""
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            choice = json.loads(line[6:])["choices"][0]
            text += choice.get("delta", {}).get("content") or ""
            finished = finished or choice.get("finish_reason") is not None
        response.read()
        if not (finished and done and text):
            return f"the stream ended early (finish_reason seen: {finished}, [DONE] seen: {done})"
        return None


def run_client(index: int, args, stop: threading.Event, records: list) -> None:
    client = Client(args.url, args.key, args.insecure, args.timeout, not args.no_keep_alive)
    kinds = (args.kind,) if args.kind else KINDS
    sent = 0
    while sent < args.requests and not stop.is_set():
        if args.stop_file and os.path.exists(args.stop_file):
            break
        kind = kinds[(index + sent) % len(kinds)]
        start = time.time()
        began = time.perf_counter()
        error = client.request(kind)
        records.append(
            {
                "client": index,
                "kind": kind,
                "start": start,
                "end": start + (time.perf_counter() - began),
                "ms": (time.perf_counter() - began) * 1000,
                "ok": error is None,
                "error": error,
            }
        )
        sent += 1
        if args.pause:
            time.sleep(args.pause)
    client.close()


def summary(records: list[dict], wall: float) -> dict:
    ok = [r["ms"] for r in records if r["ok"]]
    by_kind = {}
    for kind in sorted({r["kind"] for r in records}):
        mine = [r for r in records if r["kind"] == kind]
        by_kind[kind] = {"sent": len(mine), "failed": sum(not r["ok"] for r in mine)}
    return {
        "sent": len(records),
        "failed": sum(not r["ok"] for r in records),
        "by_kind": by_kind,
        "wall_s": round(wall, 3),
        "p50_ms": percentile(ok, 50),
        "p99_ms": percentile(ok, 99),
        "errors": sorted({r["error"] for r in records if r["error"]})[:10],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the endpoint, http://HOST:PORT or https://HOST:PORT")
    parser.add_argument("--key", help="the API key, sent as Authorization: Bearer KEY")
    parser.add_argument("--insecure", action="store_true", help="do not verify the TLS certificate")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=50, help="requests per client at most")
    parser.add_argument("--kind", choices=(*KINDS, "models"), help="only this kind of request")
    parser.add_argument("--stop-file", help="stop sending once this file exists")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between two requests of a client")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one request may take")
    parser.add_argument("--no-keep-alive", action="store_true", help="a new connection for every request")
    parser.add_argument("--raw", action="store_true", help="list every request too")
    args = parser.parse_args()
    records: list[dict] = []
    stop = threading.Event()
    started = time.perf_counter()
    threads = [
        threading.Thread(target=run_client, args=(i, args, stop, records), daemon=True)
        for i in range(args.clients)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = summary(records, time.perf_counter() - started)
    if args.raw:
        result["requests"] = sorted(records, key=lambda r: r["start"])
    print(json.dumps(result))


if __name__ == "__main__":
    main()
