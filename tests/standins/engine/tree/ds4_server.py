"""STAND-IN for `ds4-server`, the ds4 engine's OpenAI-compatible HTTP server (test infrastructure of
ds4-fleet, NOT the real engine).

It validates the model files, takes the single-instance lock, "loads" for DS4_STANDIN_LOAD_DELAY seconds,
then serves the contract's endpoints with answers from the fixed table in ds4_common. Stand-in only: a
prompt containing `[[standin-sleep:SECONDS]]` is answered after that long, and one containing
`[[standin-hold:NAME]]` only once a test releases it (the file NAME in DS4_STANDIN_HOLD_DIR), to test
draining.
"""

import json
import os
import re
import signal
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import ds4_common as common
import ds4_dist as dist
import ds4_tensor as tensor
from ds4_common import Option

try:
    # The fork's own endpoints (its requests in flight, its counters): linked into the fork's releases
    # alone; upstream's source has no such file and its server answers 404 there.
    import ds4_fork_api as fork_api
except ImportError:
    fork_api = None

PROGRAM = "ds4-server"
KV_BANK_FILE = "ds4-kv-banks.json"  # Guess: the real engine's bank file names are not in the contract.
UPDATE_INTERVAL_S = 24 * 3600
# Stand-in only: a request in flight that a test arranges rather than times. `[[standin-hold:NAME]]` in a
# prompt holds its answer until the file NAME exists in DS4_STANDIN_HOLD_DIR (a file, so that a test can
# release it while the listener is closed for a drain), or HOLD_LIMIT_S passes, so nothing hangs for ever.
# `GET /standin/holds` lists the open holds and, for each, how many times the fork's endpoints
# (ds4_fork_api) reported the requests in flight while it was held: a test waits until a drain has looked
# before releasing.
HOLD_MARKER = re.compile(r"\[\[standin-hold:([A-Za-z0-9_.-]{1,64})\]\]")
HOLD_DIR = "/run/ds4-standin"
HOLD_LIMIT_S = 600
HOLD_POLL_S = 0.05
STANDIN_HOLDS = "/standin/holds"
# Stand-in only: the text of this file in DS4_STANDIN_HOLD_DIR, when it exists, is appended as it is to
# every /metrics answer, so that a test makes the engine print lines that break the text format.
METRICS_EXTRA = "metrics-extra.txt"


def server_options(build: common.Build) -> list[Option]:
    return (
        common.model_options(build)
        + [
            Option(("--host",), "host", "str", "address to listen on (default 127.0.0.1)", "ADDR"),
            Option(("--port",), "port", "int", "port to listen on (default 8000)", "PORT"),
            Option(("--cors",), "cors", "flag", "allow any origin and answer CORS preflights"),
            Option(
                ("--kv-disk-dir",), "kv_disk_dir", "str", "persist KV banks in DIR (off by default)", "DIR"
            ),
            Option(
                ("--kv-disk-space-mb",), "kv_disk_space_mb", "int", "disk budget for KV (default 4096)", "N"
            ),
            Option(("--mem-floor-gb",), "mem_floor_gb", "int", "memory kept free (default 4)", "N"),
        ]
        + update_options(build)
        + common.dist_options()
        + tensor.options(build)
        + tensor.server_options(build)
        + common.identity_options(build)
    )


def update_options(build: common.Build) -> list[Option]:
    """The fork's release check; upstream has no releases to check against (guess: nor the flags)."""
    if build.upstream:
        return []
    return [
        Option(("--check-update",), "check_update", "flag", "compare with the release feed and exit"),
        Option(("--no-update-check",), "no_update_check", "flag", "no daily release check"),
    ]


class BadRequest(Exception):
    pass


class QueueFull(Exception):
    pass


class RouteIncomplete(Exception):
    """A coordinator without its worker: the request cannot cross the layers."""


class State:
    """What the handlers share: configuration, counters, the client slots and the KV bank count."""

    def __init__(self, build: common.Build, opts: dict, model_path: str, speculation: common.Speculation):
        self.build = build
        self.model_path = model_path
        self.speculation = speculation
        self.context = opts["ctx"] or build.default_context
        self.max_tokens = opts["tokens"] or common.DEFAULT_TOKENS
        self.cors = opts["cors"]
        self.kv_disk_dir = opts["kv_disk_dir"]
        self.kv_disk_space_mb = 4096 if opts["kv_disk_space_mb"] is None else opts["kv_disk_space_mb"]
        self.max_clients = int(common.env_number("DS4_SERVER_MAX_CLIENTS", 256))
        self.max_queue = int(common.env_number("DS4_SERVER_MAX_QUEUE", 256))
        self.slots = threading.BoundedSemaphore(max(self.max_clients, 1))
        self.cond = threading.Condition()
        self.connections = 0  # open client connections: what a drain waits for
        self.inflight = 0  # generation requests being answered or queued
        self.queued = 0
        self.requests_total = 0
        self.banks = 0
        self.prompts_seen: set[str] = set()
        # stand-in only: name -> {"reads": int, "readers": {User-Agent: int}, "requests": int}
        self.holds: dict[str, dict] = {}
        self.started = time.monotonic()
        self.route: dist.Route | None = None  # a coordinator's route through its worker (or tensor.Route)

    # --- KV banks: one per distinct prompt, persisted only with --kv-disk-dir ---

    def kv_file(self) -> str:
        return os.path.join(self.kv_disk_dir, KV_BANK_FILE)

    def restore_banks(self) -> None:
        try:
            os.makedirs(self.kv_disk_dir, exist_ok=True)
        except OSError as error:
            raise common.EngineError(
                f"ds4: cannot use KV disk dir '{self.kv_disk_dir}': {error.strerror}"
            ) from None
        try:
            with open(self.kv_file(), encoding="utf-8") as stream:
                saved = json.load(stream)
        except FileNotFoundError:
            common.log(f"ds4: kv disk: {self.kv_disk_dir}, {self.kv_disk_space_mb} MB, empty")
            return
        except (OSError, ValueError) as error:
            common.log(f"ds4: kv disk: ignoring unreadable {self.kv_file()}: {error}")
            return
        if saved.get("model") == self.model_path:
            self.banks = int(saved.get("banks", 0))
        common.log(
            f"ds4: kv disk: {self.kv_disk_dir}, {self.kv_disk_space_mb} MB, restored {self.banks} banks"
        )

    def persist_banks(self) -> None:
        record = {"format": "ds4-standin-kv/1", "model": self.model_path, "banks": self.banks}
        temporary = self.kv_file() + ".tmp"
        try:
            with open(temporary, "w", encoding="utf-8") as stream:
                json.dump(record, stream)
                stream.write("\n")
            os.replace(temporary, self.kv_file())
        except OSError as error:
            common.log(f"ds4: kv disk: cannot persist banks in {self.kv_disk_dir}: {error.strerror}")
            return
        common.log(f"ds4: kv disk: persisted KV banks ({self.banks}) to {self.kv_disk_dir}")

    # --- generation ---

    def generate(
        self, prompt: str, max_tokens: int, on_prefilled=None, on_token=None
    ) -> tuple[str, bool, int, int]:
        """Answer `prompt` within a client slot, paced at the release's speed (common.Pace):
        (text, truncated, prompt tokens, completion tokens). A stream sends its events from `on_prefilled()`
        and `on_token(word)` as the generation goes."""
        with self.cond:
            if self.inflight >= self.max_clients + self.max_queue:
                raise QueueFull
            self.inflight += 1
            self.queued += 1
            self.requests_total += 1
        self.slots.acquire()
        try:
            with self.cond:
                self.queued -= 1
            clean, delay = common.split_sleep_marker(prompt)
            if delay:
                time.sleep(delay)
            for name in HOLD_MARKER.findall(clean):
                self.hold(name)
            clean = HOLD_MARKER.sub("", clean)
            words = common.answer_for(clean, self.build.flavour).split()
            with self.cond:
                if clean not in self.prompts_seen:
                    self.prompts_seen.add(clean)
                    self.banks += 1
            answer = words[:max_tokens]
            if self.route is not None:
                try:
                    self.route.forward(common.count_tokens(clean))
                except ConnectionError:
                    raise RouteIncomplete from None
            pair = self.route.speeds() if self.route is not None else None
            pace = common.Pace(self.build.flavour, common.count_tokens(clean), self.speculation.mode, pair)
            pace.prefill()
            try:
                if on_prefilled:
                    on_prefilled()
                for index, word in enumerate(answer, 1):
                    pace.token(index)
                    if on_token:
                        on_token(word)
            finally:
                pace.done()
            return (" ".join(answer), len(words) > max_tokens, common.count_tokens(clean), len(answer))
        finally:
            self.slots.release()
            with self.cond:
                self.inflight -= 1
                self.cond.notify_all()

    # --- stand-in only: holds ---

    def hold(self, name: str) -> None:
        """Wait until a test releases the hold `name` (requests holding the same name share its count)."""
        released = os.path.join(os.environ.get("DS4_STANDIN_HOLD_DIR") or HOLD_DIR, name)
        with self.cond:
            entry = self.holds.setdefault(name, {"reads": 0, "readers": {}, "requests": 0})
            entry["requests"] += 1
        deadline = time.monotonic() + HOLD_LIMIT_S
        while not os.path.exists(released) and time.monotonic() < deadline:
            time.sleep(HOLD_POLL_S)
        with self.cond:
            entry["requests"] -= 1
            if entry["requests"] == 0 and self.holds.get(name) is entry:
                del self.holds[name]

    def open_holds(self) -> dict:
        with self.cond:
            return {name: {**entry, "readers": dict(entry["readers"])} for name, entry in self.holds.items()}

    def inflight_report(self, agent: str) -> dict:
        """stats() for the fork's endpoints (ds4_fork_api), counted against every open hold, in all and per
        User-Agent (a test waits for the drain's own look, which a watchdog's probe must not stand in for)."""
        with self.cond:
            for entry in self.holds.values():
                entry["reads"] += 1
                entry["readers"][agent] = entry["readers"].get(agent, 0) + 1
        return self.stats()

    # --- reports ---

    def stats(self) -> dict:
        with self.cond:
            report = {
                "server": {
                    "requests_inflight": self.inflight,
                    "requests_total": self.requests_total,
                    "uptime_seconds": round(time.monotonic() - self.started, 3),
                    "model": self.model_path,
                    "context": self.context,
                    # Guess: the contract names the field, not its values; this engine always builds them.
                    "artifact_source": "built",
                    "speculative": self.speculation.mode,
                },
                "backpressure": {
                    "queue_depth": self.queued,
                    "max_clients": self.max_clients,
                    "max_queue": self.max_queue,
                },
                "cache": {
                    "banks_live": self.banks,
                    "kv_disk_dir": self.kv_disk_dir,
                    "kv_disk_space_mb": self.kv_disk_space_mb,
                },
            }
        if self.route is not None:
            # Guess: the contract names no report of the route; this one says whether it is complete.
            report["dist"] = self.route.report()
        return report

    def model_object(self) -> dict:
        return {
            "id": common.MODEL_ID,
            "object": "model",
            "owned_by": "ds4.c",
            "name": common.MODEL_NAME,
            "context_length": self.context,
            "created": int(time.time() - (time.monotonic() - self.started)),
        }


def stats_text(stats: dict) -> str:
    lines = [
        f"{section}.{key}: {value}" for section, values in stats.items() for key, value in values.items()
    ]
    return "\n".join(lines) + "\n"


def metrics_text(stats: dict) -> str:
    server, backpressure, cache = stats["server"], stats["backpressure"], stats["cache"]
    series = [
        (
            "ds4_requests_inflight",
            "gauge",
            "Generation requests answered or queued.",
            server["requests_inflight"],
        ),
        ("ds4_requests_total", "counter", "Generation requests accepted.", server["requests_total"]),
        ("ds4_uptime_seconds", "gauge", "Seconds since the server listened.", server["uptime_seconds"]),
        ("ds4_context_tokens", "gauge", "Context size in tokens.", server["context"]),
        ("ds4_queue_depth", "gauge", "Requests waiting for a client slot.", backpressure["queue_depth"]),
        ("ds4_kv_banks_live", "gauge", "KV cache banks held.", cache["banks_live"]),
    ]
    if "dist" in stats:
        complete = 1 if stats["dist"]["route_complete"] else 0
        series.append(
            ("ds4_dist_route_complete", "gauge", "1 while the worker's slice is registered.", complete)
        )
    lines = []
    for name, kind, help_text, value in series:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {value}"]
    return "\n".join(lines) + "\n"


def metrics_extra() -> str:
    try:
        with open(os.path.join(os.environ.get("DS4_STANDIN_HOLD_DIR") or HOLD_DIR, METRICS_EXTRA)) as extra:
            return extra.read()
    except FileNotFoundError:
        return ""


def text_of(content) -> str:
    """Message content as text: a string, or a list of parts carrying `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part["text"] for part in content if isinstance(part, dict) and "text" in part)
    raise BadRequest("message content must be a string or a list of parts")


def last_user_text(messages) -> str:
    if not isinstance(messages, list):
        raise BadRequest("'messages' must be a list")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return text_of(message.get("content", ""))
    raise BadRequest("'messages' has no user message")


class Handler(BaseHTTPRequestHandler):
    server_version = "ds4-server"
    sys_version = ""
    # A client that connects and goes quiet must not hold a drain open for ever.
    timeout = 60

    @property
    def state(self) -> State:
        return self.server.state

    def log_request(self, code="-", size="-"):
        """Generation requests are logged by the handler with their token counts; the rest is quiet."""

    def log_message(self, format, *args):
        common.log(f"{PROGRAM}: {self.address_string()} {format % args}")

    def end_headers(self):
        if self.state.cors:
            self.send_header("Access-Control-Allow-Origin", "*")
        super().end_headers()

    def send_body(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, status: int, payload: dict) -> None:
        self.send_body(status, (json.dumps(payload) + "\n").encode(), "application/json")

    def send_error_json(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self.send_json(status, {"error": {"message": message, "type": kind}})

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [self.state.model_object()]})
        elif path.startswith("/v1/models/"):
            wanted = urllib.parse.unquote(path[len("/v1/models/") :])
            if wanted == common.MODEL_ID:
                self.send_json(200, self.state.model_object())
            else:
                self.send_error_json(404, f"model '{wanted}' not found")
        elif fork_api and path == fork_api.STATS_PATH:
            stats = self.state.inflight_report(self.headers.get("User-Agent", ""))
            if "application/json" in self.headers.get("Accept", ""):
                self.send_json(200, stats)
            else:
                self.send_body(200, stats_text(stats).encode(), "text/plain; charset=utf-8")
        elif fork_api and path == fork_api.METRICS_PATH:
            text = metrics_text(self.state.inflight_report(self.headers.get("User-Agent", "")))
            body = (text + metrics_extra()).encode()
            self.send_body(200, body, "text/plain; version=0.0.4; charset=utf-8")
        elif path == STANDIN_HOLDS:
            self.send_json(200, self.state.open_holds())
        else:
            self.send_error_json(404, "unknown endpoint")

    def do_OPTIONS(self):
        if not self.state.cors:
            self.send_error_json(404, "unknown endpoint")
            return
        self.send_response(204)
        self.send_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
        self.send_header("Access-Control-Allow-Headers", "Authorization, Content-Type")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        path = urllib.parse.urlsplit(self.path).path
        endpoint = ENDPOINTS.get(path)
        if endpoint is None:
            self.send_error_json(404, "unknown endpoint")
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            self.send_error_json(400, "invalid JSON body")
            return
        if not isinstance(body, dict):
            self.send_error_json(400, "the request body must be a JSON object")
            return
        started = time.monotonic()
        try:
            status, tokens = endpoint(self, body)
        except BadRequest as error:
            self.send_error_json(400, str(error))
            return
        except QueueFull:
            self.send_error_json(503, "server busy: client queue is full", "server_error")
            return
        except RouteIncomplete:
            self.send_error_json(503, dist.ROUTE_INCOMPLETE)
            common.log(f"{PROGRAM}: POST {path} 503 {dist.ROUTE_INCOMPLETE}")
            return
        except (BrokenPipeError, ConnectionResetError):
            status, tokens = 499, (0, 0)
        common.log(
            f"{PROGRAM}: POST {path} {status} prompt {tokens[0]} tok, answer {tokens[1]} tok, "
            f"{time.monotonic() - started:.2f} s"
        )

    # --- the generation endpoints: each returns (status, (prompt tokens, completion tokens)) ---

    def requested_max_tokens(self, body: dict, *keys: str) -> int:
        for key in keys:
            if body.get(key) is not None:
                value = body[key]
                if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                    raise BadRequest(f"'{key}' must be a positive integer")
                return value
        return self.state.max_tokens

    def post_chat_completions(self, body: dict):
        prompt = last_user_text(body.get("messages"))
        max_tokens = self.requested_max_tokens(body, "max_completion_tokens", "max_tokens")
        if body.get("stream"):
            stream = Stream(self, "chatcmpl", "chat.completion.chunk", body)
            text, truncated, prompt_tokens, completion_tokens = self.state.generate(
                prompt,
                max_tokens,
                lambda: stream.send({"delta": {"role": "assistant", "content": ""}}),
                lambda word: stream.send({"delta": {"content": word + " "}}),
            )
            stream.finish({"delta": {}}, "length" if truncated else "stop", prompt_tokens, completion_tokens)
            return 200, (prompt_tokens, completion_tokens)
        text, truncated, prompt_tokens, completion_tokens = self.state.generate(prompt, max_tokens)
        finish = "length" if truncated else "stop"
        ident = f"chatcmpl-{self.state.requests_total}"
        self.send_json(
            200,
            {
                "id": ident,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": common.MODEL_ID,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": finish,
                    }
                ],
                "usage": usage(prompt_tokens, completion_tokens),
            },
        )
        return 200, (prompt_tokens, completion_tokens)

    def post_completions(self, body: dict):
        prompt = body.get("prompt")
        if isinstance(prompt, list) and all(isinstance(part, str) for part in prompt):
            prompt = "\n".join(prompt)
        if not isinstance(prompt, str):
            raise BadRequest("'prompt' must be a string")
        max_tokens = self.requested_max_tokens(body, "max_tokens")
        if body.get("stream"):
            stream = Stream(self, "cmpl", "text_completion", body)
            text, truncated, prompt_tokens, completion_tokens = self.state.generate(
                prompt, max_tokens, stream.start, lambda word: stream.send({"text": word + " "})
            )
            stream.finish({"text": ""}, "length" if truncated else "stop", prompt_tokens, completion_tokens)
            return 200, (prompt_tokens, completion_tokens)
        text, truncated, prompt_tokens, completion_tokens = self.state.generate(prompt, max_tokens)
        finish = "length" if truncated else "stop"
        ident = f"cmpl-{self.state.requests_total}"
        self.send_json(
            200,
            {
                "id": ident,
                "object": "text_completion",
                "created": int(time.time()),
                "model": common.MODEL_ID,
                "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
                "usage": usage(prompt_tokens, completion_tokens),
            },
        )
        return 200, (prompt_tokens, completion_tokens)

    def post_responses(self, body: dict):
        given = body.get("input")
        prompt = given if isinstance(given, str) else last_user_text(given)
        max_tokens = self.requested_max_tokens(body, "max_output_tokens")
        text, truncated, prompt_tokens, completion_tokens = self.state.generate(prompt, max_tokens)
        self.send_json(
            200,
            {
                "id": f"resp_{self.state.requests_total}",
                "object": "response",
                "created_at": int(time.time()),
                "model": common.MODEL_ID,
                "status": "incomplete" if truncated else "completed",
                "output": [
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text}],
                    }
                ],
                "output_text": text,
                "usage": {
                    "input_tokens": prompt_tokens,
                    "output_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )
        return 200, (prompt_tokens, completion_tokens)

    def post_messages(self, body: dict):
        prompt = last_user_text(body.get("messages"))
        max_tokens = self.requested_max_tokens(body, "max_tokens")
        text, truncated, prompt_tokens, completion_tokens = self.state.generate(prompt, max_tokens)
        self.send_json(
            200,
            {
                "id": f"msg_{self.state.requests_total}",
                "type": "message",
                "role": "assistant",
                "model": common.MODEL_ID,
                "content": [{"type": "text", "text": text}],
                "stop_reason": "max_tokens" if truncated else "end_turn",
                "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens},
            },
        )
        return 200, (prompt_tokens, completion_tokens)

    def chunk(self, ident: str, kind: str, choice: dict, finish) -> dict:
        return {
            "id": ident,
            "object": kind,
            "created": int(time.time()),
            "model": common.MODEL_ID,
            "choices": [{"index": 0, **choice, "finish_reason": finish}],
        }


ENDPOINTS = {
    "/v1/chat/completions": Handler.post_chat_completions,
    "/v1/completions": Handler.post_completions,
    "/v1/responses": Handler.post_responses,
    "/v1/messages": Handler.post_messages,
}


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


class Stream:
    """Server-sent events of one generation, sent as it goes; the HTTP/1.0 connection closing ends the
    stream. The headers go out once the prompt is prefilled, as the engine sends its first event then.
    With `stream_options: {"include_usage": true}` the last event before [DONE] carries the usage, with
    empty choices, as the engine's does."""

    def __init__(self, handler: Handler, prefix: str, kind: str, body: dict):
        self.handler = handler
        self.prefix = prefix
        self.kind = kind
        options = body.get("stream_options")
        self.include_usage = isinstance(options, dict) and options.get("include_usage") is True
        self.ident = None

    def start(self) -> None:
        if self.ident is not None:
            return
        self.ident = f"{self.prefix}-{self.handler.state.requests_total}"
        self.handler.send_response(200)
        self.handler.send_header("Content-Type", "text/event-stream")
        self.handler.send_header("Cache-Control", "no-cache")
        self.handler.end_headers()

    def event(self, event: dict) -> None:
        self.handler.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
        self.handler.wfile.flush()

    def send(self, choice: dict, finish=None) -> None:
        self.start()
        self.event(self.handler.chunk(self.ident, self.kind, choice, finish))

    def finish(self, choice: dict, finish: str, prompt_tokens: int, completion_tokens: int) -> None:
        self.send(choice, finish)
        if self.include_usage:
            last = self.handler.chunk(self.ident, self.kind, {}, None)
            self.event(dict(last, choices=[], usage=usage(prompt_tokens, completion_tokens)))
        self.handler.wfile.write(b"data: [DONE]\n\n")


class EngineHTTPServer(ThreadingHTTPServer):
    """Counts open connections, so a drain knows when the last client is done."""

    daemon_threads = True

    def __init__(self, address, state: State):
        self.state = state
        super().__init__(address, Handler)

    def server_bind(self):
        # HTTPServer.server_bind resolves the host's FQDN, which can stall for seconds without DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request, client_address):
        # socketserver would print a bare traceback; the engine's stderr carries only prefixed lines.
        error = sys.exc_info()[1]
        common.log(f"{PROGRAM}: error serving {client_address[0]}: {type(error).__name__}: {error}")

    def process_request(self, request, client_address):
        with self.state.cond:
            self.state.connections += 1
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.state.cond:
                self.state.connections -= 1
                self.state.cond.notify_all()


class EngineHTTPServer6(EngineHTTPServer):
    address_family = socket.AF_INET6


def update_loop(build: common.Build) -> None:
    """The engine's own release check: once after start-up, then once a day; logs only news."""
    while True:
        try:
            message = common.update_message(common.fetch_latest(common.update_url()), build.version)
            if message.startswith("update available"):
                common.log(f"{PROGRAM}: {message}")
        except (OSError, ValueError) as error:
            common.log(f"{PROGRAM}: update check failed: {error}")
        time.sleep(UPDATE_INTERVAL_S)


class Signals:
    """First SIGTERM/SIGINT asks for a drain; a second one exits 130 at once.

    The handler only sets a flag (and, the second time, exits): it must not take a lock the interrupted
    main thread may be holding.
    """

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self.handle)
        signal.signal(signal.SIGINT, self.handle)

    def handle(self, signum, frame):
        if self.requested:
            common.log(f"{PROGRAM}: second signal, exiting at once")
            os._exit(130)
        self.requested = True


def serve(build: common.Build, opts: dict, signals: Signals) -> int:
    tensor.check_options(opts, PROGRAM)
    if not opts.get("tensor_parallel"):
        dist.check_options(opts)
    model_path = common.resolve_model_path(opts["model"])
    speculation = common.choose_speculation(opts)
    common.check_family_options(model_path, opts, speculation)
    common.acquire_engine_lock()
    common.load_models(model_path, speculation)
    common.load_family_files(opts)
    link = tensor.prepare(opts, model_path) if opts.get("tensor_parallel") else None
    if opts.get("batched_session"):
        common.log(f"ds4: batched sessions {opts['batched_session']}")
    if opts["role"] == "worker":
        context = opts["ctx"] or build.default_context
        if not common.wait_for_load(lambda: signals.requested):
            common.log(f"{PROGRAM}: shutdown requested while loading")
            return 0
        return dist.run_worker(build, opts, context, model_path, lambda: signals.requested)
    state = State(build, opts, model_path, speculation)
    mem_floor = opts["mem_floor_gb"]
    if mem_floor is None:
        mem_floor = common.env_number("DS4_MEM_FLOOR_GB", 4)
    common.log(
        f"ds4: backend {common.backend_name(build, opts['cuda'])}, context {state.context}, "
        f"memory floor {mem_floor:g} GiB, max clients {state.max_clients}, max queue {state.max_queue}, "
        f"continuous {'on' if common.env_flag('DS4_SERVER_CONTINUOUS') else 'off'}"
    )
    if state.kv_disk_dir:
        state.restore_banks()
    if not common.wait_for_load(lambda: signals.requested):
        common.log(f"{PROGRAM}: shutdown requested while loading")
        return 0

    if link is not None:
        state.route = tensor.Route(build, state.context, model_path, link, speculation.mode)
        state.route.listen(*opts["listen"])
    elif opts["role"] == "coordinator":
        state.route = dist.Route(build, opts["layers"], state.context, model_path)
        state.route.listen(*opts["listen"])
    host = opts["host"] or "127.0.0.1"
    port = 8000 if opts["port"] is None else opts["port"]
    server_class = EngineHTTPServer6 if ":" in host else EngineHTTPServer
    try:
        server = server_class((host, port), state)
    except OSError as error:
        raise common.EngineError(f"{PROGRAM}: cannot listen on {host}:{port}: {error.strerror}") from None
    state.started = time.monotonic()
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    shown_host = f"[{host}]" if ":" in host else host
    common.log(f"{PROGRAM}: serving {common.MODEL_ID} from '{model_path}' with context {state.context}")
    common.log(f"{PROGRAM}: listening on http://{shown_host}:{server.server_address[1]}")
    if not (build.upstream or opts["no_update_check"] or common.env_flag("DS4_NO_UPDATE_CHECK")):
        threading.Thread(target=update_loop, args=(build,), daemon=True).start()

    while not signals.requested:
        time.sleep(0.1)
    server.shutdown()
    server.server_close()
    common.log(f"{PROGRAM}: shutdown requested, draining requests")
    with state.cond:
        while state.connections:
            state.cond.wait(0.1)
    if state.kv_disk_dir:
        state.persist_banks()
    common.log(f"{PROGRAM}: drained, exiting")
    return 0


def start(build: common.Build, opts: dict) -> int:
    if opts.get("check_update"):
        return common.check_update_command(build)
    signals = Signals()
    common.log(f"{build.version_line()} starting")
    if build.spark_advisory:
        common.log(build.spark_advisory)
    return serve(build, opts, signals)


def main(argv: list[str], build: common.Build) -> int:
    return common.run_program(
        argv, build, "[options]", server_options(build), lambda opts: start(build, opts)
    )
