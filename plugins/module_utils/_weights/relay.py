"""Serve verified weight files to the other Sparks of a run: read-only, to listed peers only, for a while.

A Spark that holds a verified copy of a file (its record beside it matches it, _weights.records) answers
`GET|HEAD /<file>` with `Range` support, `ETag: "<sha256>"` and `X-Linked-Size`, so that its peers fetch it
with the same client as from the hub's storage (_weights.transfer) and verify the same sha256 against the
hub's and the catalog's: a peer can slow a fetch down, never hand over a wrong byte. The server is bound
to one address (the peers' network), refuses any client not in its list before reading a request, serves
nothing but files with a matching record (no listing, no other path, nothing written), shares one rate cap
among all its connections, and stops (closing its port and every connection) at a deadline, on stop(),
or when its stop file appears.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import socket
import stat
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ansible_collections.ds4.fleet.plugins.module_utils._spark.listener import read_listener, user_name
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import replace_file
from ansible_collections.ds4.fleet.plugins.module_utils._weights.file_names import (
    held_name,
    part_name,
    sidecar_name,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.records import read_record

CHUNK = 1 << 20
# A relay serving a file it still receives says so in this header of a 503 when it does not hold the asked
# bytes yet (_weights.transfer asks again shortly, without counting a retry).
RELAY_HEADER = "X-Ds4-Relay"
# This run's server names its run in this header of every answer: the controller's token for the run, given
# to each peer server and to each fetch with its peer sources. The peer port is unprivileged, so any local
# user of a source Spark may listen there; an answer without the token is not this run's server, and its
# receiver takes its next source at once rather than waiting on a "not yet" (_weights.transfer). Not a
# secret of value (the sha256 decides what is kept), but never printed.
RUN_HEADER = "X-Ds4-Run"
# A relay holds a request for bytes it does not have yet up to RELAY_WAIT seconds (well under the
# receiver's read timeout, _weights.hub.PEER_TIMEOUT), looking every RELAY_POLL; a fetch that has not begun is
# waited for up to RELAY_START after the server started (Ansible starts it on a loaded Spark meanwhile).
RELAY_WAIT = 2.0
RELAY_POLL = 0.05
RELAY_START = 300.0


def from_this_run(value, token):
    """Whether a peer's RUN_HEADER `value` (None when it sent none) names this run's `token`."""
    return value is not None and hmac.compare_digest(value.encode(), token.encode())


def _read_json(path):
    """A small JSON document the fetch wrote, or None: never through a link, nor from a FIFO."""
    f = _open_regular(path)
    if f is None:
        return None
    try:
        with f:
            return json.loads(f.read(1 << 20))
    except (OSError, ValueError):
        return None


def _open_regular(path):
    """`path` open for reading if it is a regular file, else None: never through a link, and without
    blocking on a FIFO put in its place (the weights' owner is not root); judged through the descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def _held(gguf_dir, name):
    """What a fetch of `name` on this host has written of its part (PartState.publish): {"size", "sha256",
    "held": [(start, end), ...], "receiving": whether that fetch goes on (its process lives, it has not
    given up)}; None when there is no such list or it is not well formed."""
    doc = _read_json(os.path.join(gguf_dir, held_name(name)))
    try:
        size, sha256, pid = int(doc["size"]), str(doc["sha256"]), int(doc["pid"])
        held = [(int(s), int(e)) for s, e in doc["held"]]
        ended = bool(doc.get("ended"))
    except (KeyError, TypeError, ValueError):
        return None
    return {"size": size, "sha256": sha256, "held": held, "receiving": not ended and _alive(pid)}


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return pid > 0


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

    def __init__(self, address, gguf_dir, allowed, rate_bps, relays=(), token=None):
        self.token = token
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.gguf_dir, self.allowed = gguf_dir, frozenset(allowed)
        self.relays, self.started = frozenset(relays), time.monotonic()
        self.seen = set()  # relayed files whose list of held ranges this server has seen: their fetch began
        self.rate = _Rate(rate_bps) if rate_bps else None
        self.live, self.live_lock = set(), threading.Lock()
        self.refused = []
        self.served = {}  # file name -> bytes sent
        self.relayed = {}  # file name -> bytes of those sent while this Spark still received the file
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

    def end_headers(self):
        # Every answer, an error one included, says which run's server sent it.
        if self.server.token:
            self.send_header(RUN_HEADER, self.server.token)
        super().end_headers()

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
        verified = self._open_verified(name)
        if verified is None and name in self.server.relays:
            return self._relay(name)
        if verified is None:
            return self._plain(404, "no verified copy here")
        f, size, sha256 = verified
        with f:
            asked = self._range(size)
            if asked is None:
                return None
            self._answer(name, f, size, sha256, *asked)
        return None

    def _open_verified(self, name):
        """(open file, size, sha256) of a verified copy of `name`, or None."""
        f = _open_regular(os.path.join(self.server.gguf_dir, name))
        if f is None:
            return None
        st = os.fstat(f.fileno())
        record = read_record(os.path.join(self.server.gguf_dir, sidecar_name(name)), st)
        if record is None:
            f.close()
            return None
        return f, st.st_size, record["sha256"]

    def _range(self, size):
        """(start, end, ranged) asked for, or None once a 416 is answered."""
        start, end = 0, size
        spec = self.headers.get("Range", "")
        ranged = spec.startswith("bytes=") and "," not in spec
        if ranged:
            first, _dash, last = spec[6:].partition("-")
            try:
                start = int(first)
                end = min(int(last) + 1, size) if last else size
            except ValueError:
                self._plain(416, "bad range")
                return None
            if start >= size or end <= start:
                self._plain(416, "range not satisfiable")
                return None
        return start, end, ranged

    def _answer(self, name, f, size, sha256, start, end, ranged, relayed=False):
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start))
        self.send_header("ETag", f'"{sha256}"')
        self.send_header("X-Linked-Etag", f'"{sha256}"')
        self.send_header("X-Linked-Size", str(size))
        self.send_header("Accept-Ranges", "bytes")
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
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
            if relayed:
                self.server.relayed[name] = self.server.relayed.get(name, 0) + sent

    def _relay(self, name):
        """Serve `name` while this Spark still receives it: from the first asked byte, the bytes its fetch
        has written so far (the part's `held` list), which may end before the asked range does; the
        receiver asks again for the rest. A byte not held yet is waited for up to RELAY_WAIT, then answered
        503 "not yet" (the receiver asks again) while the fetch is alive, or until RELAY_START has passed
        since the server started for a fetch that has not begun; otherwise (it gave up, its process died,
        its part was discarded) 404, and the receiver takes its next source. Whatever comes this way is
        checked by the receiver's sha256 of the whole file."""
        deadline = time.monotonic() + RELAY_WAIT
        while True:
            held = _held(self.server.gguf_dir, name)
            verified = self._open_verified(name)
            if verified is not None:  # it came whole while the request waited
                f, size, sha256 = verified
                with f:
                    asked = self._range(size)
                    if asked is not None:
                        self._answer(name, f, size, sha256, *asked)
                return None
            if held is not None:
                self.server.seen.add(name)
            if held is not None and held["receiving"]:
                size = held["size"]
                asked = self._range(size)
                if asked is None:
                    return None
                start, end, _ranged = asked
                have = next((e for s, e in held["held"] if s <= start < e), None)
                if have is not None:
                    return self._answer_part(name, held, start, min(end, have))
            if time.monotonic() >= deadline:
                begun = held is not None or name in self.server.seen
                if (held is not None and held["receiving"]) or (
                    not begun and time.monotonic() - self.server.started < RELAY_START
                ):
                    return self._not_yet()
                return self._plain(404, "not receiving this file")
            time.sleep(RELAY_POLL)

    def _answer_part(self, name, held, start, end):
        # Never through a link (the fetch refuses one at the part, and so does what serves it), nor a FIFO.
        f = _open_regular(os.path.join(self.server.gguf_dir, part_name(name)))
        if f is None:
            return self._not_yet()
        with f:
            if os.fstat(f.fileno()).st_size < end:
                return self._not_yet()
            self._answer(name, f, held["size"], held["sha256"], start, end, True, relayed=True)
        return None

    def _not_yet(self):
        self.send_response(503)
        self.send_header(RELAY_HEADER, "not-yet")
        self.send_header("Retry-After", "0")
        self.send_header("Content-Length", "0")
        self.end_headers()

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
            moved = self.connection.sendfile(f, start + sent, n)
            if not moved:  # a relay's part cut short meanwhile (its fetch discarded it): end the answer
                raise ConnectionResetError  # closes the connection: the receiver asks again
            sent += moved
        return sent


class PeerServer:
    """The server for one run: start(), then stop() (or serve_until()) closes its port. `relays`: the files
    this Spark receives in this run and may serve while they come (the plan's), besides its verified ones.
    `token`: the run's, sent on every answer (RUN_HEADER) so that its receivers know it from a stranger.
    `address`: one address, or a list (a pair's member serving its other member on the link and other Sparks
    on the LAN): one listener on each, on the same port, sharing the rate cap and what they served."""

    def __init__(self, gguf_dir, address, port, allowed, rate_bps=None, relays=(), token=None):
        self.gguf_dir, self.port, self.allowed, self.rate_bps = gguf_dir, port, allowed, rate_bps
        self.token = token
        self.addresses = [address] if isinstance(address, str) else list(address)
        self.relays = list(relays)
        self._servers = []

    def start(self):
        try:
            for address in self.addresses:
                server = _Server(
                    (address, self.port), self.gguf_dir, self.allowed, self.rate_bps, self.relays, self.token
                )
                if self._servers:
                    first = self._servers[0]
                    # One cap and one account for the Spark, whichever address a peer reaches.
                    for shared in ("rate", "seen", "refused", "served", "relayed", "live", "live_lock"):
                        setattr(server, shared, getattr(first, shared))
                    server.started = first.started
                self._servers.append(server)
                self.port = server.server_address[1]
        except OSError:
            # An address this Spark does not have: nothing serves yet, the others' ports close again.
            for server in self._servers:
                server.server_close()
            self._servers = []
            raise
        for server in self._servers:
            threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True).start()
        return self

    def _connected(self):
        first = self._servers[0]
        with first.live_lock:
            return bool(first.live)

    def stop(self):
        for server in self._servers:
            server.shutdown()
        for server in self._servers:
            server.close_live()
            server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def inodes(self):
        """The inodes of its listening sockets, as /proc/net/tcp names them (announce, wait_listening)."""
        return [os.fstat(server.fileno()).st_ino for server in self._servers]

    @property
    def served(self):
        return dict(self._servers[0].served)

    @property
    def relayed(self):
        return dict(self._servers[0].relayed)

    @property
    def refused(self):
        return list(self._servers[0].refused)

    def serve_until(self, deadline, stop_file, heartbeat=None):
        """Serve until the monotonic `deadline`, until `stop_file` exists, or until the run that started the
        server is gone (`heartbeat`, a _weights.heartbeat.Heartbeat) and no peer is connected; then stop.
        Its own run touches the heartbeat only while this Spark waits for its own fetches: a Spark with
        nothing to fetch, or done first, serves on while its receivers (whose fetches end with their run)
        are at it."""
        try:
            while (
                time.monotonic() < deadline
                and not os.path.exists(stop_file)
                and (heartbeat is None or heartbeat.alive() or self._connected())
            ):
                time.sleep(0.2)
        finally:
            self.stop()


def announce(path, server=None, error=None):
    """Say, in root's file `path`, which listening sockets are this run's server's (their inodes), or why
    it could not listen: the port is unprivileged, and any local user may hold it instead."""
    doc = {"error": error} if server is None else {"inodes": server.inodes, "pid": os.getpid()}
    replace_file(path, json.dumps(doc).encode(), 0o600)


def wait_listening(path, addresses, port, timeout, uid, proc_root="/proc"):
    """None once the socket a connection to each of `addresses` on `port` reaches is one the server
    announced in `path` and made by `uid`; else, at once or after `timeout` seconds of no announcement, what
    is wrong (the server's own error, or who holds the port)."""
    deadline = time.monotonic() + timeout
    while (doc := _read_json(path)) is None:
        if time.monotonic() >= deadline:
            return f"no peer server announced itself in {path} within {timeout} s"
        time.sleep(0.1)
    if isinstance(doc, dict) and doc.get("error"):
        # The server could not listen: whoever holds the port instead is named, as below.
        holders = [
            f"{address} port {port} is held by a socket of {user_name(socket_['uid'])}"
            for address in addresses
            if (socket_ := read_listener(address, port, proc_root)) is not None
        ]
        return "; ".join([str(doc["error"]), *holders])
    if not isinstance(doc, dict) or not isinstance(doc.get("inodes"), list):
        return f"{path} is not a peer server's announcement"
    for address in addresses:
        socket_ = read_listener(address, port, proc_root)
        if socket_ is None:
            return f"nothing listens on {address} port {port}, though the peer server said it did"
        if socket_["inode"] not in doc["inodes"] or socket_["uid"] != uid:
            return (
                f"{address} port {port} is held by a socket of {user_name(socket_['uid'])}, not this run's "
                "peer server: its receivers would take their weights from a stranger; stop that process or "
                "set ds4_weights_peer_port to a free port"
            )
    return None


def peer_url(address, port):
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


def plan(hosts, port, relay=False):
    """Who fetches which file from where, so that each file crosses the hub link once per run.

    `hosts`: in play order, {"name", "address", "wanted": [file names], "fetch": [names it must download]},
    and "link": {"pair", "address"} for a member of a pair (ds4_pairs): its address on the pair's direct
    link, which only the pair's other member reaches. A Spark fetches from a source on its link address when
    both are the two members of one pair, else on its "address" (the LAN). A host that wants a file and need
    not download it holds it; the others need it. A file nobody holds
    comes from the hub to its first needer, the seed. Then:

    - two waves (`relay` false): the seed fetches it first; the holders (or the seed) serve it to the other
      needers once they have it, each needer starting with another holder, to spread the load;
    - a relay (`relay` true): every needer serves what it has received so far to the one behind it while
      it still receives the rest, in chains, one per holder (or the seed's alone), the needers dealt out
      over them in play order: the file crosses the hub link once and each Spark's link about once, all
      at the same time. A needer falls back up its chain (a relay that dies costs its receivers their
      next source, the one before it), then to the other holders, then the hub.

    Returns {"hosts": {host: {"first": [names fetched before any peer serves: its own and those it
    seeds], "peers": {name: [peer URLs, nearest first]}, "serve_to": [addresses], "listen": [its addresses
    its receivers reach it on], "serves": [names], "relays": [names it serves while it still receives
    them]}}, "lines": [what to say]}.
    """
    by_name = {h["name"]: h for h in hosts}
    out = {
        h["name"]: {
            "first": [],
            "peers": {},
            "serve_to": set(),
            "listen": set(),
            "serves": set(),
            "relays": set(),
        }
        for h in hosts
    }
    lines = []
    names = []
    for h in hosts:
        names += [n for n in h["wanted"] if n not in names]

    def reach(host, other):
        """`host`'s address as `other` reaches it: its link address when both are one pair's members."""
        link, theirs = by_name[host].get("link"), by_name[other].get("link")
        if link and theirs and link["pair"] == theirs["pair"]:
            return link["address"]
        return by_name[host]["address"]

    def serve(source, receiver, name):
        out[source]["serve_to"].add(reach(receiver, source))
        out[source]["listen"].add(reach(source, receiver))
        out[source]["serves"].add(name)

    def url(source, receiver):
        return peer_url(reach(source, receiver), port)

    for name in names:
        holders = [h["name"] for h in hosts if name in h["wanted"] and name not in h["fetch"]]
        needers = [h["name"] for h in hosts if name in h["fetch"]]
        for host in holders:
            out[host]["first"].append(name)
        if not needers:
            continue
        seed = None
        if holders:
            sources = holders
        else:
            seed = needers.pop(0)
            out[seed]["first"].append(name)
            sources = [seed]
        if relay:
            lines += _chains(name, sources, needers, seed, out, url, serve)
            continue
        if seed is not None:
            lines.append(
                f"{seed} seeds {name} from the hub" + (f" for {', '.join(needers)}" if needers else "")
            )
        for i, host in enumerate(needers):
            order = sources[i % len(sources) :] + sources[: i % len(sources)]
            out[host]["peers"][name] = [url(s, host) for s in order]
            for source in sources:
                serve(source, host, name)
            lines.append(f"{host} fetches {name} from {', '.join(order)} (the hub if none can serve it)")
    for entry in out.values():
        for key in ("serve_to", "listen", "serves", "relays"):
            entry[key] = sorted(entry[key])
    return {"hosts": out, "lines": lines}


def _chains(name, heads, needers, seed, out, url, serve):
    """The relay plan of one file (plan): a chain behind each head (a holder, or the seed as it receives
    from the hub), the needers dealt out over the chains; the lines that say it. `url(source, receiver)`
    and `serve(source, receiver, name)` are plan's."""
    chains = [[head] for head in heads]
    for i, host in enumerate(needers):
        chains[i % len(chains)].append(host)
    lines = []
    if seed is not None:
        behind = chains[0][1:2]
        lines.append(
            f"{seed} seeds {name} from the hub"
            + (f" for {', '.join(needers)}, relaying it to {behind[0]} as it comes" if behind else "")
        )
    for chain in chains:
        for at, host in enumerate(chain[1:], start=1):
            upstream = chain[at - 1 :: -1]
            order = upstream + [h for h in heads if h not in upstream]
            out[host]["peers"][name] = [url(s, host) for s in order]
            for source in order:
                serve(source, host, name)
                if source in (seed, *needers):
                    out[source]["relays"].add(name)
            behind = chain[at + 1 : at + 2]
            lines.append(
                f"{host} fetches {name} from {', '.join(order)} (the hub if none can serve it)"
                + (f", relaying it to {behind[0]} as it comes" if behind else "")
            )
    return lines
