#!/usr/bin/env python3
"""STAND-IN for the Hugging Face weight hub and the engine's release feed. Test infrastructure only.

These machines cannot reach huggingface.co nor raw.githubusercontent.com, so tests and the sandbox's
`forge` point the product at this server instead. It follows the engine contract (docs/engine-contract.md
in the shared docs, "Sources and pins"):

- API port, like huggingface.co: `HEAD|GET /{org}/{repo}/resolve/{revision}/{file}` answers 302 with
  `X-Repo-Commit`, `X-Linked-Size`, `X-Linked-Etag` (the quoted LFS sha256) and a `Location` on the storage
  port. The storage port is a different origin on purpose: huggingface_hub 2.4 follows a redirect that stays
  on the hub's origin and then refuses the storage answer for lacking `X-Repo-Commit`; one that leaves the
  origin is where it stops and reads the metadata, as it does with the real CDN.
- Storage port, like the CDN: `GET|HEAD /_storage/<sha256>` with `Range` (206, 416), `ETag`, `Accept-Ranges`.
- The release feed, like raw.githubusercontent.com: `GET /Entrpi/ds4-on-spark/main/LATEST`.
- Control, for tests: `POST|GET|DELETE /_standin/faults`, `GET /_standin/holds`,
  `POST /_standin/holds/release`, `GET|PUT /_standin/network` and `PUT /_standin/feed` on the API port.
- The network between a Spark and the real hub, each a setting (`Network`): a cap per connection (CDNs pace
  each TCP connection well below a fast link), a cap shared by all connections (the site's uplink) and a
  round-trip delay. Only this server's answers are paced; the LAN between Sparks is not modelled here.

Where the contract is silent the behaviour is a guess, marked "guess" below. Stdlib only: the sandbox runs
this file with a bare Debian python3. It imports nothing of the product.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import hmac
import io
import json
import signal
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from dataclasses import asdict, dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHUNK = 1 << 20
DEFAULT_FEED = b"v0.6.5\n"
FEED_PATH = "/Entrpi/ds4-on-spark/main/LATEST"
FEED_FILE = "LATEST"  # the name set_fault() takes to disturb the feed like a weight file
MAX_CONTROL_BODY = 256 << 20  # a test may set a huge feed body over HTTP


@dataclass
class Fault:
    cut_after: int | None = None
    flip_offset: int | None = None
    throttle_bps: int | None = None
    status: int | None = None
    times: int | None = 1  # None: until cleared
    ignore_range: bool = False  # answer 200 with the whole body, as a server without Range support does
    etag: str | None = None  # the ETag this answer carries: a file replaced between two requests
    # Send this many bytes of the body, then the rest only once a test releases the file's hold: a transfer
    # in flight that a test arranges rather than times.
    hold_after: int | None = None

    def flips_only(self) -> bool:
        """Only a byte flipped: an answer that does not carry that byte is not disturbed by it."""
        others = (self.cut_after, self.throttle_bps, self.status, self.etag, self.hold_after)
        return self.flip_offset is not None and not self.ignore_range and all(v is None for v in others)


@dataclass
class Network:
    """The path to the hub: None or 0 means no limit. Applies to every answer of both ports."""

    conn_bps: int | None = None  # each connection's body rate (a CDN's per-connection pacing)
    link_bps: int | None = None  # all bodies together (the site's uplink)
    rtt_ms: float = 0  # one round trip before each answer, one more for a new connection (its handshake)


class _Link:
    """A rate shared by all connections: each write reserves the next free slot of the link's clock."""

    def __init__(self):
        self._lock = threading.Lock()
        self._free_at = 0.0

    def reserve(self, n: int, bps: int) -> float:
        """The time at which `n` more bytes have crossed a link of `bps`, if sent from now on."""
        with self._lock:
            self._free_at = max(self._free_at, time.monotonic()) + n / bps
            return self._free_at


@dataclass(frozen=True)
class _File:
    size: int
    sha256: str
    path: Path


class _Unsatisfiable(Exception):
    pass


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """(first, last) inclusive, or None to send the whole body; raises _Unsatisfiable for a 416.

    Forms a server may ignore under RFC 9110 (other units, several ranges, nonsense) give the whole body.
    """
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    try:
        if not first:
            suffix = int(last)
            if suffix <= 0 or size == 0:
                raise _Unsatisfiable
            return max(0, size - suffix), size - 1
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None
    if start >= size:
        raise _Unsatisfiable
    if end < start:
        return None
    return start, min(end, size - 1)


def _listen(host: str, port: int, hub: HubStandin, handler: type[BaseHTTPRequestHandler]) -> _Server:
    server_class = _Server6 if ":" in host else _Server
    server = server_class((host, port), handler)
    server.hub = hub
    if hub.tls is not None:
        # HTTPS, as the real hub and a site's mirror serve. The handshake happens in the request's thread, on
        # its first read, so that a slow client never holds up the others' accept.
        server.socket = hub.tls.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    return server


class _Server(ThreadingHTTPServer):
    hub: HubStandin

    def __init__(self, *args, **kwargs):
        self.live: set[socket.socket] = set()
        self.live_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def process_request_thread(self, request, client_address):
        # Tracked so that stop() also ends kept-alive and in-flight transfers, as a hub going away would.
        with self.live_lock:
            self.live.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.live_lock:
                self.live.discard(request)

    def close_live(self) -> None:
        with self.live_lock:
            for sock in self.live:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    role = "?"

    def handle(self):
        # The connection's handshake costs the client one round trip before its first request.
        self._round_trip()
        # A client that does not trust the certificate ends the handshake: its failure is the client's to
        # report, as a real server's log would not trace it.
        with contextlib.suppress(ssl.SSLError):
            super().handle()

    def handle_one_request(self):
        # Modelled as one wait after the request line is in, before the answer; idle waits are not paced.
        self._rtt_due = True
        super().handle_one_request()

    def send_response(self, code, message=None):
        if getattr(self, "_rtt_due", False):
            self._rtt_due = False
            self._round_trip()
        super().send_response(code, message)

    def _round_trip(self):
        rtt = self.server.hub.network.rtt_ms
        if rtt:
            time.sleep(rtt / 1000)

    def log_request(self, code="-", size="-"):
        # Method, path and status only: headers (and so tokens) and the long signed query are never logged.
        status = code.value if isinstance(code, HTTPStatus) else code
        self.log_message("%s %s %s", self.command, urllib.parse.urlsplit(self.path).path, status)

    def log_message(self, fmt, *args):
        sys.stderr.write(f"hub-standin {self.role} {self.client_address[0]} {fmt % args}\n")

    def _send_simple(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ):
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json(self, status: int, obj, headers: dict[str, str] | None = None):
        body = json.dumps(obj, sort_keys=True).encode() + b"\n"
        self._send_simple(status, body, "application/json; charset=utf-8", headers)

    def _serve_content(self, source, size: int, etag: str, content_type: str, names, headers=None):
        """Send a file or bytes with Range support; on a GET, apply the fault set for one of `names`."""
        try:
            asked = parse_range(self.headers.get("Range"), size) or (0, size - 1)
        except _Unsatisfiable:
            asked = (0, -1)
        held, fault = (
            self.server.hub.take_fault(names, lambda offset: asked[0] <= offset <= asked[1])
            if self.command == "GET"
            else (None, None)
        )
        if fault is not None and fault.status is not None:
            self.log_message("fault: status %d", fault.status)
            # The CDN and the hub send Retry-After with these; a client that honours it should not wait long.
            extra = {"Retry-After": "1"} if fault.status in (429, 503) else {}
            body = f"stand-in fault: status {fault.status}\n".encode()
            self._send_simple(fault.status, body, "text/plain; charset=utf-8", extra)
            return
        try:
            rng = None if fault and fault.ignore_range else parse_range(self.headers.get("Range"), size)
        except _Unsatisfiable:
            self._send_simple(416, b"", "text/plain", {"Content-Range": f"bytes */{size}"})
            return
        start, end = rng if rng else (0, size - 1)
        length = end - start + 1
        self.send_response(206 if rng else 200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("ETag", f'"{fault.etag if fault and fault.etag else etag}"')
        self.send_header("Accept-Ranges", "bytes")
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command == "HEAD" or length == 0:
            return
        network = self.server.hub.network
        try:
            with open(source, "rb") if isinstance(source, Path) else io.BytesIO(source) as f:
                if fault is None and not network.conn_bps and not network.link_bps:
                    # sendfile: the benchmark's ~1 GB/s over loopback needs the kernel to copy, not Python.
                    # Counted before it leaves (see HubStandin.content_bytes), then less what a file cut
                    # shorter since it was listed did not hold.
                    self.server.hub.count(length)
                    sent = self.connection.sendfile(f, start, length)
                    if sent < length:
                        self.server.hub.count(sent - length)
                else:
                    self._send_paced(f, start, length, fault or Fault(), network, held)
        except (BrokenPipeError, ConnectionResetError):
            self.log_message("client went away")
            self.close_connection = True

    def _send_paced(self, f, start: int, length: int, fault: Fault, network: Network, held: str | None):
        limit = length if fault.cut_after is None else min(length, fault.cut_after)
        hold_at = None if fault.hold_after is None else min(limit, fault.hold_after)
        rates = [r for r in (fault.throttle_bps, network.conn_bps) if r]
        bps = min(rates) if rates else None
        link = self.server.hub.link if network.link_bps else None
        # About 50 writes a second when paced, so the rate is smooth at any scale.
        fastest = min(r for r in (bps, network.link_bps) if r) if bps or link else None
        chunk = max(1, min(CHUNK, fastest // 50)) if fastest else CHUNK
        f.seek(start)
        sent = 0
        t0 = time.monotonic()
        while sent < limit:
            if sent == hold_at:
                self.server.hub.wait_hold(held)
                t0 = time.monotonic() - sent / bps if bps else t0
            end = hold_at if hold_at is not None and sent < hold_at else limit
            data = bytearray(f.read(min(chunk, end - sent)))
            if not data:
                break
            pos = start + sent
            if fault.flip_offset is not None and pos <= fault.flip_offset < pos + len(data):
                data[fault.flip_offset - pos] ^= 0xFF
            # Each chunk leaves when its last byte is due, so the client's clock sees the target rate: first
            # this connection's pace, then its turn on the shared link.
            due = t0 + (sent + len(data)) / bps if bps else 0.0
            if link is not None:
                _sleep_until(due)
                due = link.reserve(len(data), network.link_bps)
            _sleep_until(due)
            self.server.hub.count(len(data))  # before it leaves: see HubStandin.content_bytes
            self.wfile.write(data)
            sent += len(data)
        if sent < length:
            self.log_message("fault: cut after %d bytes", sent)
            # socketserver half-closes the socket after the handler returns: the client sees EOF mid-body.
            self.close_connection = True

    def _read_body(self) -> bytes | None:
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_CONTROL_BODY:
            self.close_connection = True
            self._send_json(400, {"error": "bad or too large Content-Length"})
            return None
        return self.rfile.read(n)


class _ApiHandler(_Handler):
    """huggingface.co, raw.githubusercontent.com (the feed) and the test control endpoints."""

    role = "api"

    def do_HEAD(self):
        self._get()

    def do_GET(self):
        self._get()

    def _get(self):
        path = urllib.parse.urlsplit(self.path).path
        hub = self.server.hub
        if path == FEED_PATH:
            feed = hub.feed
            self._serve_content(
                feed,
                len(feed),
                hashlib.sha256(feed).hexdigest(),
                "text/plain; charset=utf-8",
                [FEED_FILE],
                {"Cache-Control": "max-age=300"},
            )
        elif path == "/_standin/faults":
            self._send_json(200, {"faults": hub.faults()})
        elif path == "/_standin/network":
            self._send_json(200, asdict(hub.network))
        elif path == "/_standin/holds":
            self._send_json(200, {"holds": hub.holds()})
        elif path == "/_standin/stats":
            self._send_json(200, {"content_bytes": hub.content_bytes})
        elif len(parts := path.split("/")) >= 6 and parts[3] == "resolve":
            org, repo, _, revision, *file_parts = (urllib.parse.unquote(p) for p in parts[1:])
            self._resolve(f"{org}/{repo}", revision, "/".join(file_parts))
        else:
            self._send_json(404, {"error": "Not Found"})

    def _resolve(self, repo_id: str, revision: str, filename: str):
        hub = self.server.hub
        repo = hub.repo(repo_id)
        if repo is None:
            # guess: the real hub answers an anonymous request for a missing repo with 401 (so as not to
            # reveal private repos); the stand-in says 404, which huggingface_hub reads the same way.
            return self._hub_error(404, "RepoNotFound", "Repository not found")
        if repo["gated"]:
            denied = self._gate(repo_id)
            if denied:
                return self._hub_error(*denied)
        commit = repo["refs"].get(revision) or (revision if revision in repo["commits"] else None)
        if commit is None:
            return self._hub_error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        entry = repo["commits"][commit].get(filename)
        if entry is None:
            return self._hub_error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": commit})
        host = _url_host(self.headers.get("Host"), self.server.server_address[0])
        query = urllib.parse.urlencode(
            {
                "response-content-disposition": f'attachment; filename="{filename.rsplit("/", 1)[-1]}";',
                # guess: the CDN URL is signed and expires; the stand-in writes the field but never checks it.
                "Expires": str(int(time.time()) + 3600),
            }
        )
        location = f"{hub.scheme}://{host}:{hub.storage_port}/_storage/{entry.sha256}?{query}"
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("X-Linked-Size", str(entry.size))
        self.send_header("X-Linked-Etag", f'"{entry.sha256}"')
        self.send_header("ETag", f'"{entry.sha256}"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _gate(self, repo_id: str) -> tuple[int, str, str] | None:
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            msg = (
                f"Access to model {repo_id} is restricted. You must have access to it and be authenticated"
                " to access it. Please log in."
            )
            return 401, "GatedRepo", msg
        if not self.server.hub.token_ok(token.strip()):
            # guess: the real hub says 401 "Invalid credentials" for a token it does not know at all and
            # 403 for a known user not on the list; the stand-in has no users, so any wrong token is a 403.
            msg = f"Access to model {repo_id} is restricted and you are not in the authorized list."
            return 403, "GatedRepo", msg
        return None

    def _hub_error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        headers = {"X-Error-Code": code, "X-Error-Message": message, **(headers or {})}
        self._send_json(status, {"error": message}, headers)

    def do_POST(self):
        body = self._read_body()
        if body is None:
            return
        path = urllib.parse.urlsplit(self.path).path
        if path == "/_standin/holds/release":
            try:
                self.server.hub.release(json.loads(body)["file"])
            except (ValueError, KeyError, TypeError) as exc:
                return self._send_json(400, {"error": f"bad release: {exc!r}"})
            return self._send_json(200, {"holds": self.server.hub.holds()})
        if path != "/_standin/faults":
            return self._send_json(404, {"error": "Not Found"})
        try:
            spec = json.loads(body)
            if not isinstance(spec, dict):
                raise ValueError("expected a JSON object")
            file = spec.pop("file")
            self.server.hub.set_fault(file, **spec)
        except (ValueError, KeyError, TypeError) as exc:
            return self._send_json(400, {"error": f"bad fault: {exc!r}"})
        self._send_json(200, {"faults": self.server.hub.faults()})

    def do_DELETE(self):
        if self._read_body() is None:
            return
        if urllib.parse.urlsplit(self.path).path != "/_standin/faults":
            return self._send_json(404, {"error": "Not Found"})
        self.server.hub.clear_faults()
        self._send_json(200, {"faults": {}})

    def do_PUT(self):
        body = self._read_body()
        if body is None:
            return
        path = urllib.parse.urlsplit(self.path).path
        if path == "/_standin/network":
            try:
                spec = json.loads(body)
                if not isinstance(spec, dict):
                    raise ValueError("expected a JSON object")
                self.server.hub.set_network(**spec)
            except (ValueError, TypeError) as exc:
                return self._send_json(400, {"error": f"bad network: {exc!r}"})
            return self._send_json(200, asdict(self.server.hub.network))
        if path != "/_standin/feed":
            return self._send_json(404, {"error": "Not Found"})
        self.server.hub.set_feed(body)
        self._send_json(200, {"feed_bytes": len(body)})


class _StorageHandler(_Handler):
    """The CDN the hub redirects to: content by sha256, no authentication (the real URL is signed)."""

    role = "storage"

    def do_HEAD(self):
        self._get()

    def do_GET(self):
        self._get()

    def _get(self):
        split = urllib.parse.urlsplit(self.path)
        sha = split.path.removeprefix("/_storage/")
        hub = self.server.hub
        blob = hub.blob(sha) if split.path.startswith("/_storage/") else None
        if blob is None:
            return self._send_simple(404, b"Not Found\n", "text/plain; charset=utf-8")
        params = urllib.parse.parse_qs(split.query)
        # As S3/CloudFront do, the signed URL's response-content-disposition becomes the header.
        disposition = params.get("response-content-disposition", [None])[0]
        headers = {"Content-Disposition": disposition} if disposition else {}
        self._serve_content(
            blob.path, blob.size, sha, "application/octet-stream", hub.names_for(sha), headers
        )


def _sleep_until(when: float) -> None:
    delay = when - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _bracket(name: str) -> str:
    return f"[{name}]" if ":" in name else name


def _url_host(host_header: str | None, bound: str) -> str:
    """The host name the client used (so a redirect works inside a container network), ready for a URL."""
    name = urllib.parse.urlsplit(f"//{host_header}").hostname if host_header else None
    if not name:
        name = "127.0.0.1" if bound in ("0.0.0.0", "::") else bound
    return _bracket(name)


def _sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class HubStandin:
    """The hub (API) and storage servers over the data of make_weights.py (DIR/hub.json)."""

    def __init__(
        self, data_dir, host: str = "127.0.0.1", port: int = 0, storage_port: int = 0, network=None, tls=None
    ):
        self.data_dir = Path(data_dir)
        # An ssl.SSLContext (server side) to serve both the hub and its storage over HTTPS; None: plain HTTP.
        self.tls = tls
        self.network = Network()
        self.link = _Link()
        # Body bytes of weight files and the feed sent so far (GET /_standin/stats), each counted before it
        # leaves, so that a client that has read an answer finds it counted; an answer whose client went away
        # midway counts what was handed to its connection (all of it when unpaced).
        self.content_bytes = 0
        if network:
            self.set_network(**asdict(network) if isinstance(network, Network) else network)
        self.host = host
        self._port = port
        self._storage_port = storage_port
        self._lock = threading.Lock()
        self._faults: dict[str, Fault] = {}
        # file name -> {"released": Event, "waiting": GETs held now, "held": GETs that reached it}
        self._holds: dict[str, dict] = {}
        self._feed = DEFAULT_FEED
        self._repos: dict[str, dict] = {}
        self._blobs: dict[str, _File] = {}
        self._names: dict[str, set[str]] = {}
        self._servers: list[_Server] = []
        self._load(json.loads((self.data_dir / "hub.json").read_text()))

    def _load(self, doc: dict) -> None:
        if doc.get("format") != 1:
            raise ValueError(f"{self.data_dir / 'hub.json'}: format {doc.get('format')!r}, expected 1")
        self._tokens = list(doc.get("tokens", []))
        for repo_id, repo in doc["repos"].items():
            commits = {}
            for commit, content in repo["commits"].items():
                commits[commit] = files = {}
                for name, f in content["files"].items():
                    path = self.data_dir / f["blob"]
                    if path.stat().st_size != f["size"]:
                        raise ValueError(f"{path}: size {path.stat().st_size}, hub.json says {f['size']}")
                    files[name] = self._register(name, _File(f["size"], f["sha256"], path))
            self._repos[repo_id] = {
                "gated": bool(repo.get("gated")),
                "refs": dict(repo["refs"]),
                "commits": commits,
            }

    def _register(self, name: str, entry: _File) -> _File:
        self._blobs.setdefault(entry.sha256, entry)
        self._names.setdefault(entry.sha256, set()).add(name)
        return entry

    # -- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> HubStandin:
        api = _listen(self.host, self._port, self, _ApiHandler)
        storage = _listen(self.host, self._storage_port, self, _StorageHandler)
        self._servers = [api, storage]
        for role, server in zip(("api", "storage"), self._servers, strict=True):
            # A short poll interval: stop() waits for it, and tests stop many servers.
            threading.Thread(
                target=server.serve_forever, args=(0.1,), name=f"hub-standin-{role}", daemon=True
            ).start()
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.close_live()
            server.server_close()
        self._servers = []
        with self._lock:
            for hold in self._holds.values():
                hold["released"].set()  # into a closed connection: a held transfer ends with the server

    def __enter__(self) -> HubStandin:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._servers[0].server_address[1] if self._servers else self._port

    @property
    def storage_port(self) -> int:
        return self._servers[1].server_address[1] if self._servers else self._storage_port

    @property
    def scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://{_bracket(self.host)}:{self.port}"

    @property
    def storage_endpoint(self) -> str:
        return f"{self.scheme}://{_bracket(self.host)}:{self.storage_port}"

    # -- content ----------------------------------------------------------------------------------------

    def add_file(self, repo: str, name: str, path) -> dict:
        """Serve `path` as `name` in `repo` at its main commit (the repo is made, public, if new).

        The file is hashed once here and then read on each request, never copied. Unlike the real hub, adding
        a file makes no new commit: the main commit keeps its id, so revisions pinned by a test stay valid.
        """
        path = Path(path)
        entry = _File(path.stat().st_size, _sha256_file(path), path)
        with self._lock:
            if repo not in self._repos:
                commit = hashlib.sha1(f"ds4-standin\0{repo}\0".encode()).hexdigest()
                self._repos[repo] = {"gated": False, "refs": {"main": commit}, "commits": {commit: {}}}
            commit = self._repos[repo]["refs"]["main"]
            self._repos[repo]["commits"][commit][name] = self._register(name, entry)
        return {"repo": repo, "commit": commit, "name": name, "size": entry.size, "sha256": entry.sha256}

    def repo(self, repo_id: str) -> dict | None:
        with self._lock:
            return self._repos.get(repo_id)

    def blob(self, sha256: str) -> _File | None:
        with self._lock:
            return self._blobs.get(sha256)

    def names_for(self, sha256: str) -> list[str]:
        with self._lock:
            return sorted(self._names.get(sha256, ()))

    def token_ok(self, token: str) -> bool:
        return any(hmac.compare_digest(token, known) for known in self._tokens)

    # -- feed ---------------------------------------------------------------------------------------------

    @property
    def feed(self) -> bytes:
        return self._feed

    def set_feed(self, text_or_bytes) -> None:
        self._feed = text_or_bytes.encode() if isinstance(text_or_bytes, str) else bytes(text_or_bytes)

    # -- network ------------------------------------------------------------------------------------------

    def count(self, sent: int) -> None:
        with self._lock:
            self.content_bytes += sent

    def set_network(self, conn_bps=None, link_bps=None, rtt_ms=0) -> None:
        """Pace every answer from now on (see Network); no arguments: an unlimited, instant network."""
        for key, value in (("conn_bps", conn_bps), ("link_bps", link_bps), ("rtt_ms", rtt_ms)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value < 0
            ):
                raise ValueError(f"{key} must be a non-negative number, not {value!r}")
        self.network = Network(
            int(conn_bps) if conn_bps else None, int(link_bps) if link_bps else None, float(rtt_ms or 0)
        )

    # -- faults -------------------------------------------------------------------------------------------

    def set_fault(
        self, file, *, cut_after=None, flip_offset=None, throttle_bps=None, status=None, times=1,
        ignore_range=False, etag=None, hold_after=None,
    ):  # fmt: skip
        """Disturb the next `times` GETs of `file`'s content (None: until cleared); `file` may be LATEST. A
        flipped byte alone disturbs, and counts, only the GETs whose answer carries it."""
        with self._lock:
            known = file == FEED_FILE or any(file in names for names in self._names.values())
        if not known:
            raise ValueError(f"no file named {file!r} on the stand-in hub")
        fault = Fault(cut_after, flip_offset, throttle_bps, status, times, hold_after=hold_after)
        numbers = ("cut_after", "flip_offset", "throttle_bps", "status", "times", "hold_after")
        for key, value in ((k, getattr(fault, k)) for k in numbers):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{key} must be a non-negative integer, not {value!r}")
        if not isinstance(ignore_range, bool):
            raise ValueError(f"ignore_range must be true or false, not {ignore_range!r}")
        if etag is not None and (not isinstance(etag, str) or not etag or '"' in etag):
            raise ValueError(f"etag must be a non-empty string without quotes, not {etag!r}")
        fault.ignore_range, fault.etag = ignore_range, etag
        effects = (cut_after, flip_offset, throttle_bps, status, etag, hold_after)
        if all(effect is None for effect in effects) and not ignore_range:
            raise ValueError(
                "a fault needs cut_after, flip_offset, throttle_bps, status, ignore_range, etag or hold_after"
            )
        if status is not None and not 400 <= status <= 599:
            raise ValueError(f"status must be an error status (400-599), not {status}")
        if throttle_bps == 0 or times == 0:
            raise ValueError("throttle_bps and times must be positive")
        with self._lock:
            self._faults[file] = fault
            if hold_after is not None:
                self._holds[file] = {"released": threading.Event(), "waiting": 0, "held": 0}

    def clear_faults(self) -> None:
        """Clears the faults not yet taken and releases every hold."""
        with self._lock:
            self._faults.clear()
            for hold in self._holds.values():
                hold["released"].set()

    def holds(self) -> dict[str, dict]:
        """Per file with a hold: whether it was released, how many GETs wait on it, how many reached it."""
        with self._lock:
            return {
                name: {"released": h["released"].is_set(), "waiting": h["waiting"], "held": h["held"]}
                for name, h in self._holds.items()
            }

    def release(self, file: str) -> None:
        """Let the transfers held on `file` go on (and any that reaches its hold from now on)."""
        with self._lock:
            if file not in self._holds:
                raise ValueError(f"no hold on {file!r}")
            self._holds[file]["released"].set()

    def wait_hold(self, file: str) -> None:
        with self._lock:
            hold = self._holds[file]
            hold["waiting"] += 1
            hold["held"] += 1
        hold["released"].wait()
        with self._lock:
            hold["waiting"] -= 1

    def faults(self) -> dict[str, dict]:
        with self._lock:
            return {name: asdict(fault) for name, fault in self._faults.items()}

    def take_fault(self, names, carries=None) -> tuple[str | None, Fault | None]:
        """The first of `names` that has a fault, and the fault, counting this GET against its `times`.

        A fault that only flips a byte counts only the GETs whose answer carries that byte
        (`carries(offset)`), so that a client's ranges, asked for in whatever order its connections take,
        meet it `times` times."""
        with self._lock:
            for name in names:
                fault = self._faults.get(name)
                if fault is None:
                    continue
                if carries is not None and fault.flips_only() and not carries(fault.flip_offset):
                    continue
                if fault.times is not None:
                    fault.times -= 1
                    if fault.times == 0:
                        del self._faults[name]
                return name, fault
        return None, None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Stand-in Hugging Face hub and release feed (tests only).")
    parser.add_argument("--data", required=True, help="directory written by make_weights.py (hub.json)")
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080, help="hub API and feed port")
    parser.add_argument("--storage-port", type=int, default=8081, help="CDN port the hub redirects to")
    parser.add_argument("--feed", help="release feed body (default: v0.6.5 and a newline)")
    parser.add_argument("--conn-bps", type=int, help="cap on each connection's rate, bytes/s (a CDN's)")
    parser.add_argument("--link-bps", type=int, help="cap on all connections together, bytes/s (the uplink)")
    parser.add_argument("--rtt-ms", type=float, default=0, help="round-trip delay, milliseconds")
    parser.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM); needs --tls-key")
    parser.add_argument("--tls-key", help="the certificate's private key (PEM)")
    args = parser.parse_args(argv)
    network = Network(args.conn_bps, args.link_bps, args.rtt_ms)
    tls = None
    if args.tls_cert:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args.tls_cert, args.tls_key)
    hub = HubStandin(
        args.data, host=args.bind, port=args.port, storage_port=args.storage_port, network=network, tls=tls
    )
    if args.feed is not None:
        hub.set_feed(args.feed)
    done = threading.Event()
    # Often PID 1 in a container, where SIGTERM without a handler is ignored.
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    hub.start()
    sys.stderr.write(f"hub-standin: hub {hub.endpoint}, storage {hub.storage_endpoint}, data {args.data}\n")
    sys.stderr.flush()
    done.wait()
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
