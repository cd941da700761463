"""Serve verified weight files to the other Sparks of a run: read-only, to listed peers only, for a while.

A Spark that holds a verified copy of a file (its record beside it matches it, ds4_hub_records) answers
`GET|HEAD /<file>` with `Range` support, `ETag: "<sha256>"` and `X-Linked-Size`, so that its peers fetch it
with the same client as from the hub's storage (ds4_hub_transfer) and verify the same sha256 against the
hub's and the catalog's: a peer can slow a fetch down, never hand over a wrong byte. The server is bound
to one address (the peers' network), refuses any client not in its list before reading a request, serves
nothing but files with a matching record (no listing, no other path, nothing written), shares one rate cap
among all its connections, and stops (closing its port and every connection) at a deadline, on stop(),
or when its stop file appears.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ansible_collections.ds4.fleet.plugins.module_utils.ds4_hub_records import read_record
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_weight_files import sidecar_name

CHUNK = 1 << 20


class _Rate:
    """One rate for all connections: each write reserves the next free slot of the link's clock."""

    def __init__(self, bps):
        self.bps = bps
        self._lock = threading.Lock()
        self._free_at = 0.0

    def wait(self, n):
        with self._lock:
            self._free_at = max(self._free_at, time.monotonic()) + n / self.bps
            due = self._free_at
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, gguf_dir, allowed, rate_bps):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.gguf_dir, self.allowed = gguf_dir, frozenset(allowed)
        self.rate = _Rate(rate_bps) if rate_bps else None
        self.live, self.live_lock = set(), threading.Lock()
        self.refused = []
        self.served = {}  # file name -> bytes sent
        super().__init__(address, _Handler)

    def verify_request(self, request, client_address):
        # Before a byte of the request is read: a client off the list gets its connection closed.
        if client_address[0] in self.allowed:
            return True
        self.refused.append(client_address[0])
        return False

    def process_request_thread(self, request, client_address):
        with self.live_lock:
            self.live.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.live_lock:
                self.live.discard(request)

    def close_live(self):
        with self.live_lock:
            for sock in self.live:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, fmt, *args):
        pass  # the module reports what it served; requests carry nothing worth a log line

    def do_HEAD(self):
        self._serve()

    def do_GET(self):
        self._serve()

    def _plain(self, status, text):
        body = f"{text}\n".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)

    def _serve(self):
        name = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path.removeprefix("/"))
        if not name or "/" in name or name.startswith("."):
            return self._plain(404, "not a weight file")
        path = os.path.join(self.server.gguf_dir, name)
        try:
            f = open(path, "rb")  # noqa: SIM115 -- closed below, after the body
        except OSError:
            return self._plain(404, "no such file")
        with f:
            st = os.fstat(f.fileno())
            record = read_record(os.path.join(self.server.gguf_dir, sidecar_name(name)), st)
            if record is None:
                return self._plain(404, "no verified copy here")
            start, end = 0, st.st_size
            spec = self.headers.get("Range", "")
            ranged = spec.startswith("bytes=") and "," not in spec
            if ranged:
                first, _dash, last = spec[6:].partition("-")
                try:
                    start = int(first)
                    end = min(int(last) + 1, st.st_size) if last else st.st_size
                except ValueError:
                    return self._plain(416, "bad range")
                if start >= st.st_size or end <= start:
                    return self._plain(416, "range not satisfiable")
            self.send_response(206 if ranged else 200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            self.send_header("ETag", f'"{record["sha256"]}"')
            self.send_header("X-Linked-Etag", f'"{record["sha256"]}"')
            self.send_header("X-Linked-Size", str(st.st_size))
            self.send_header("Accept-Ranges", "bytes")
            if ranged:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{st.st_size}")
            self.end_headers()
            if self.command == "HEAD":
                return
            try:
                sent = self._send(f, start, end - start)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
                return
            with self.server.live_lock:
                self.server.served[name] = self.server.served.get(name, 0) + sent

    def _send(self, f, start, length):
        rate = self.server.rate
        if rate is None:
            return self.connection.sendfile(f, start, length)
        # About 50 writes a second over all connections, so that under a low cap no connection waits for
        # its next write as long as the peers' read timeout.
        chunk = max(16 << 10, min(CHUNK, rate.bps // 50))
        sent = 0
        while sent < length:
            n = min(chunk, length - sent)
            rate.wait(n)
            sent += self.connection.sendfile(f, start + sent, n)
        return sent


class PeerServer:
    """The server for one run: start(), then stop() (or serve_until()) closes its port."""

    def __init__(self, gguf_dir, address, port, allowed, rate_bps=None):
        self.gguf_dir, self.address, self.port, self.allowed, self.rate_bps = (
            gguf_dir, address, port, allowed, rate_bps,
        )  # fmt: skip
        self._server = None

    def start(self):
        self._server = _Server((self.address, self.port), self.gguf_dir, self.allowed, self.rate_bps)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, args=(0.1,), daemon=True).start()
        return self

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.close_live()
            self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def served(self):
        return dict(self._server.served)

    @property
    def refused(self):
        return list(self._server.refused)

    def serve_until(self, deadline, stop_file):
        """Serve until the monotonic `deadline` or until `stop_file` exists; then stop."""
        try:
            while time.monotonic() < deadline and not os.path.exists(stop_file):
                time.sleep(0.2)
        finally:
            self.stop()


def peer_url(address, port):
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


def plan(hosts, port):
    """Who fetches which file from where, so that each file crosses the hub link once per run.

    `hosts`: in play order, {"name", "address", "wanted": [file names], "fetch": [names it must download]}.
    A host that wants a file and need not download it holds it; the others need it. A file some host holds
    comes from the holders (each needer starting with another one, to spread the load); a file nobody holds
    comes from the hub to its first needer, the seed, and from the seed to the others once it has it.

    Returns {host: {"first": [names fetched before any peer serves: its own and those it seeds],
    "peers": {name: [peer URLs]}, "serve_to": [addresses], "serves": [names]}, "lines": [what to say]}.
    """
    by_name = {h["name"]: h for h in hosts}
    out = {h["name"]: {"first": [], "peers": {}, "serve_to": set(), "serves": set()} for h in hosts}
    lines = []
    names = []
    for h in hosts:
        names += [n for n in h["wanted"] if n not in names]
    for name in names:
        holders = [h["name"] for h in hosts if name in h["wanted"] and name not in h["fetch"]]
        needers = [h["name"] for h in hosts if name in h["fetch"]]
        for host in holders:
            out[host]["first"].append(name)
        if not needers:
            continue
        if holders:
            sources = holders
        else:
            seed = needers.pop(0)
            out[seed]["first"].append(name)
            sources = [seed]
            lines.append(
                f"{seed} seeds {name} from the hub" + (f" for {', '.join(needers)}" if needers else "")
            )
        for i, host in enumerate(needers):
            order = sources[i % len(sources) :] + sources[: i % len(sources)]
            out[host]["peers"][name] = [f"{peer_url(by_name[s]['address'], port)}" for s in order]
            for source in sources:
                out[source]["serve_to"].add(by_name[host]["address"])
                out[source]["serves"].add(name)
            lines.append(f"{host} fetches {name} from {', '.join(order)} (the hub if none can serve it)")
    for entry in out.values():
        entry["serve_to"], entry["serves"] = sorted(entry["serve_to"]), sorted(entry["serves"])
    return {"hosts": out, "lines": lines}
