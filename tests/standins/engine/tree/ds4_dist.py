"""STAND-IN for the ds4 engine's distributed (pipeline, layer-split) mode: test infrastructure of ds4-fleet,
NOT the real engine. Linked into every program beside ds4_common.

What the engine contract says, followed: the worker (`--role worker --layers K+1:output --coordinator HOST
PORT`) is started first and waits for its coordinator; the coordinator (`--role coordinator --layers 0:K
--listen HOST PORT`) owns layer 0 and serves the HTTP API; the worker's context must be at least the
coordinator's (rejected at registration); a request while the route is incomplete answers
`coordinator route does not start at layer 0`; plain TCP, no authentication; both sides built from the
same commit.

Guesses where the contract is silent: the wire format (one JSON object a line: the worker's hello, the
coordinator's answer, then the coordinator's pings and forwards, each answered); the stand-in compares
the release and flavour where the real engine compares its commit, and the model's file name; the
wording of the refusals and log lines; a refused worker exits 1; a worker whose coordinator goes away
waits for it again, and a coordinator whose worker goes away waits for another; HTTP 503 for a request
while the route is incomplete; the worker serves no HTTP API.
"""

import contextlib
import json
import os
import re
import socket
import threading
import time

import ds4_common as common

ROLES = ("worker", "coordinator")
PROTOCOL = "ds4-dist-standin/1"
ROUTE_INCOMPLETE = "coordinator route does not start at layer 0"
# How often each side looks for the other: a worker for its coordinator, a coordinator's heartbeat.
RETRY_S = 0.2
HEARTBEAT_S = 0.5
# A worker that answers nothing for this long is gone (a hung or frozen peer, not only a closed socket).
ANSWER_TIMEOUT_S = 5.0
_SLICE = re.compile(r"([0-9]+):([0-9]+|output)")


class Refused(Exception):
    """A worker the coordinator does not take, with why."""


def parse_slice(text: str) -> tuple[int, int | None]:
    """`A:B` -> (A, B), B None for `output`."""
    match = _SLICE.fullmatch(text or "")
    if not match:
        raise common.EngineError(f"ds4: invalid --layers {text!r}: expected A:B (B a layer or output)", 2)
    last = None if match.group(2) == "output" else int(match.group(2))
    if last is not None and last < int(match.group(1)):
        raise common.EngineError(f"ds4: invalid --layers {text!r}: the slice is empty", 2)
    return int(match.group(1)), last


def check_options(opts: dict) -> None:
    """The distributed flags go together: a role needs its slice and its peer's address."""
    role = opts.get("role")
    if role is None:
        if opts.get("layers") or opts.get("listen") or opts.get("coordinator"):
            raise common.EngineError("ds4: --layers, --listen and --coordinator need --role", 2)
        return
    if role not in ROLES:
        raise common.EngineError(f"ds4: invalid --role {role!r}: worker or coordinator", 2)
    if not opts.get("layers"):
        raise common.EngineError(f"ds4: --role {role} needs --layers A:B", 2)
    first, last = parse_slice(opts["layers"])
    if role == "worker":
        if not opts.get("coordinator") or opts.get("listen"):
            raise common.EngineError("ds4: --role worker needs --coordinator HOST PORT (and no --listen)", 2)
        if last is not None:
            raise common.EngineError("ds4: a worker's slice runs to the output: --layers K:output", 2)
    else:
        if not opts.get("listen") or opts.get("coordinator"):
            raise common.EngineError(
                "ds4: --role coordinator needs --listen HOST PORT (and no --coordinator)", 2
            )
        if last is None:
            raise common.EngineError("ds4: a coordinator's slice ends before the worker's: --layers 0:K", 2)


def pair_speeds() -> tuple[float, float]:
    """Prefill and decode factors of two Sparks against one, from the published figures (Q4 over a 10 GbE
    link: prefill 122 tok/s, generation 11.4 tok/s @2k; one Spark: 960 and 20.0)."""
    return 122.0 / 960.0, 11.4 / 20.0


def _send(stream, message: dict) -> None:
    stream.write((json.dumps(message) + "\n").encode())
    stream.flush()


def _receive(stream) -> dict:
    line = stream.readline()
    if not line:
        raise ConnectionError("connection closed")
    return json.loads(line)


class Lines:
    """One JSON object a line from a socket read with a timeout: a timed-out read raises TimeoutError and
    loses nothing, so that the next read goes on (a socket's makefile() is unusable after a timeout)."""

    def __init__(self, connection: socket.socket):
        self.connection = connection
        self.buffer = b""

    def readline(self) -> bytes:
        while b"\n" not in self.buffer:
            chunk = self.connection.recv(65536)
            if not chunk:
                return b""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line + b"\n"


# --- the coordinator ------------------------------------------------------------------------------------


class Route:
    """The coordinator's side: who listens on --listen, the worker registered, and the path a request
    takes through it. Complete while a worker of the next slice is registered and answering."""

    def __init__(self, build: common.Build, layers: str | None, context: int, model_path: str):
        self.build = build
        # No slice for a route that splits every layer (ds4_tensor.Route).
        self.first, self.last = parse_slice(layers) if layers else (None, None)
        self.context = context
        self.model = os.path.basename(model_path)
        self.lock = threading.Lock()
        self.worker = None  # (socket, reader, writer, peer text)
        self.registrations = 0
        self.heartbeats = 0  # pings the registered worker answered
        self.listener = None

    def listen(self, host: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((host, port))
        except OSError as error:
            raise common.EngineError(f"ds4: dist: cannot listen on {host}:{port}: {error.strerror}") from None
        listener.listen(4)
        self.listener = listener
        common.log(f"ds4: dist: {self.what()}, listening for a worker on {host}:{port}")
        threading.Thread(target=self._accept_loop, daemon=True).start()
        threading.Thread(target=self._heartbeat_loop, daemon=True).start()

    def what(self) -> str:
        return f"coordinator layers {self.first}:{self.last}"

    def registered(self, hello: dict) -> str:
        return f"layers {hello['layers']}"

    def speeds(self) -> tuple[float, float]:
        return pair_speeds()

    @property
    def complete(self) -> bool:
        return self.worker is not None

    def _judge(self, hello: dict) -> None:
        if hello.get("hello") != PROTOCOL:
            raise Refused(f"not a ds4 worker (protocol {hello.get('hello')!r})")
        if (hello.get("version"), hello.get("flavour")) != (self.build.version, self.build.flavour):
            raise Refused(
                f"worker built from {hello.get('version')} ({hello.get('flavour')}), coordinator from "
                f"{self.build.version} ({self.build.flavour}): both sides must be built from the same commit"
            )
        if hello.get("model") != self.model:
            raise Refused(
                f"worker holds {hello.get('model')!r}, coordinator {self.model!r}: the same GGUF on both"
            )
        first, _ = parse_slice(str(hello.get("layers")))
        if first != self.last + 1:
            raise Refused(
                f"worker slice {hello.get('layers')} does not follow the coordinator's "
                f"{self.first}:{self.last}"
            )
        if not isinstance(hello.get("ctx"), int) or hello["ctx"] < self.context:
            raise Refused(
                f"worker context {hello.get('ctx')} is below the coordinator's allocation {self.context}"
            )
        if self.worker is not None:
            raise Refused("the route is complete: a worker is already registered")

    def _accept_loop(self) -> None:
        while True:
            try:
                connection, address = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._register, args=(connection, address), daemon=True).start()

    def _register(self, connection: socket.socket, address) -> None:
        peer = f"{address[0]}:{address[1]}"
        connection.settimeout(ANSWER_TIMEOUT_S)
        reader, writer = connection.makefile("rb"), connection.makefile("wb")
        try:
            hello = _receive(reader)
            with self.lock:
                self._judge(hello)
                answer = {"ok": True, "ctx": self.context}
                if self.first is not None:  # a tensor route has no slice
                    answer["layers"] = f"{self.first}:{self.last}"
                _send(writer, answer)
                self.worker = (connection, reader, writer, peer)
                self.registrations += 1
            common.log(f"ds4: dist: worker {peer} registered, {self.registered(hello)}: route complete")
        except Refused as refusal:
            common.log(f"ds4: dist: refused worker {peer}: {refusal}")
            with contextlib.suppress(OSError):
                _send(writer, {"error": str(refusal)})
            connection.close()
        except (OSError, ValueError, ConnectionError) as error:
            common.log(f"ds4: dist: worker {peer} failed to register: {error}")
            connection.close()

    def exchange(self, message: dict) -> dict:
        """Send `message` down the route and wait for the worker's answer; a failure drops the worker."""
        with self.lock:
            if self.worker is None:
                raise ConnectionError(ROUTE_INCOMPLETE)
            connection, reader, writer, peer = self.worker
            try:
                _send(writer, message)
                return _receive(reader)
            except (OSError, ValueError, ConnectionError) as error:
                self.worker = None
                connection.close()
                common.log(f"ds4: dist: worker {peer} lost ({error}): route incomplete, waiting for a worker")
                raise ConnectionError(ROUTE_INCOMPLETE) from None

    def _heartbeat_loop(self) -> None:
        count = 0
        while True:
            time.sleep(HEARTBEAT_S)
            if self.worker is not None:
                count += 1
                with contextlib.suppress(ConnectionError):
                    self.exchange({"ping": count})
                    self.heartbeats += 1

    def forward(self, prompt_tokens: int) -> None:
        """A request's activations through the worker's slice and back; ConnectionError when the route is
        incomplete or breaks."""
        self.exchange({"forward": prompt_tokens})

    def report(self) -> dict:
        return {
            "role": "coordinator",
            "layers": f"{self.first}:{self.last}",
            "route_complete": self.complete,
            "worker": self.worker[3] if self.worker else None,
            "registrations": self.registrations,
            "heartbeats": self.heartbeats,
        }


# --- the worker -----------------------------------------------------------------------------------------


def run_worker(
    build: common.Build, opts: dict, context: int, model_path: str, stopping, hello=None, what=None
) -> int:
    """Wait for the coordinator, register, answer its route until it goes away, then wait again. A refusal
    at registration exits 1; a stop request exits 0. `hello` and `what` are another mode's (ds4_tensor)."""
    host, port = opts["coordinator"]
    hello = hello or {
        "hello": PROTOCOL,
        "version": build.version,
        "flavour": build.flavour,
        "layers": opts["layers"],
        "ctx": context,
        "model": os.path.basename(model_path),
    }
    what = what or f"worker layers {opts['layers']}"
    common.log(f"ds4: dist: {what}, waiting for the coordinator at {host}:{port}")
    waiting_logged = True
    while not stopping():
        try:
            connection = socket.create_connection((host, int(port)), timeout=ANSWER_TIMEOUT_S)
        except OSError:
            if not waiting_logged:
                common.log(f"ds4: dist: waiting for the coordinator at {host}:{port}")
                waiting_logged = True
            time.sleep(RETRY_S)
            continue
        reader, writer = Lines(connection), connection.makefile("wb")
        try:
            _send(writer, hello)
            answer = _receive(reader)
        except (OSError, ValueError, ConnectionError) as error:
            common.log(f"ds4: dist: registration with {host}:{port} failed: {error}")
            connection.close()
            time.sleep(RETRY_S)
            continue
        if "error" in answer:
            connection.close()
            raise common.EngineError(f"ds4: dist: the coordinator refused this worker: {answer['error']}")
        common.log(
            f"ds4: dist: registered with the coordinator at {host}:{port}"
            + (f" (its layers {answer['layers']})" if answer.get("layers") else "")
        )
        connection.settimeout(RETRY_S)
        _serve_route(reader, writer, stopping)
        connection.close()
        if stopping():
            break
        common.log(f"ds4: dist: coordinator at {host}:{port} lost; waiting for it again")
        waiting_logged = True
    common.log(f"{build.program}: shutdown requested, worker leaving the route")
    return 0


def _serve_route(reader, writer, stopping) -> None:
    """Answer the coordinator's pings and forwards until it goes away or a stop is asked."""
    while not stopping():
        try:
            message = _receive(reader)
        except TimeoutError:
            continue
        except (OSError, ValueError, ConnectionError):
            return
        try:
            _send(
                writer,
                {"pong": message.get("ping")} if "ping" in message else {"done": message.get("forward")},
            )
        except OSError:
            return
