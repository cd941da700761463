"""Move a file from storage into its part: several connections, a byte range each, hashed in order.

The missing ranges of the part are cut into pieces of `piece` bytes, taken in file order by up to
`connections` workers (as many as the rate gains from: Ramp); each piece is one ranged GET over a
kept-alive connection, resumed within the piece after a cut, synced and added to the part's list of ranges
when complete (PartState), so that a killed run loses at most one piece per connection. sha256 needs the
bytes in file order: OrderedHash takes them as they are written, in memory while they fall within `window`
bytes of its position, and reads from the part only the bytes that came further ahead than that (and the
ranges that were on disk before the run). Memory is bounded by window + (connections + 1) * READ.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import math
import os
import re
import threading
import time
from collections import deque

from ansible_collections.ds4.fleet.plugins.module_utils._common.bytes import describe_bytes
from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import (
    TRANSIENT_EXC,
    HubChangedError,
    HubError,
    HubMismatchError,
    HubTransientError,
    NoSpaceError,
    origin,
    raise_for_status,
    retrying,
    unquote_etag,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.records import free_bytes, merge, missing
from ansible_collections.ds4.fleet.plugins.module_utils._weights.relay import (
    RELAY_HEADER,
    RUN_HEADER,
    from_this_run,
)

# The largest body read, and the buffers' size: the Python work per read (a write, a handoff to the hash)
# stays small next to it.
READ = 1 << 20
# Where only a blocking read(n) is available (Body, a raw without http.client's response under it): the
# smallest read, and the read times (s) below which the reads grow and above which they shrink.
READ_MIN = 16 << 10
READ_QUICK = 0.05
READ_SLOW = 0.25
# One ranged request and the unit of resumption: large next to a round trip at a connection's rate
# (16 MiB at 150 MB/s is ~110 ms, against tens of ms to a CDN), small enough to lose little when killed.
PIECE = 16 << 20
# A file of fewer than 4 pieces per connection is cut finer, down to this, so that all connections work.
MIN_PIECE = 1 << 20
# The file's last `connections` pieces' worth is cut into pieces this many times smaller (cut_pieces): the
# last pieces end up to one piece's time apart, and a capped link empties while fewer connections than
# fill it are left; quarter pieces quarter that tail (at 16 connections on a link 8 fill, ~1 s of a 16 MiB
# piece at 8 MB/s, ~5 % of a 1 GiB fetch at 128 MB/s).
TAIL_SPLIT = 4
# Connections per file at most; measured in bench/fetch_throughput.py: with each connection held to 1/8 of
# the link and a round trip before each piece, 16 fill the link where 8 leave the gaps between pieces idle.
CONNECTIONS = 16
# The ramp (Ramp): one connection for a first short step, then all it may open at once (RAMP_FACTOR is the
# most connections: one step), kept while the rate grew nearly as much (RAMP_KEEP of it), else cut back to
# what the rate needs. Each step is timed over RAMP_WINDOW seconds once RAMP_SETTLE has passed, so that the
# new connections have sent their first request and left TCP's slow start at a CDN's round trip; the first
# step, the one below the path's rate, is shorter (RAMP_FIRST_*) and timed from its first byte, not from
# the connection's start: a slow first answer is not a slow connection, and a connection measured in its
# slow start only makes the ramp open more. That step is what the ramp costs (~0.25 s of one connection
# from the first byte; it was 0.4 s from the start, checked every TICK: ~0.5 s), where a ramp of several
# steps (1, 8, 16) cost a capped 1 GiB fetch 0.77 times hf_transfer's rate, which opens all at once
# (bench/fetch_throughput.py measures it side by side). A file that ends before the first step need not
# ramp. While it ramps, the transfer looks at the rate every RAMP_TICK seconds rather than every TICK.
RAMP_FACTOR = CONNECTIONS
RAMP_KEEP = 0.75
RAMP_SETTLE = 0.3
RAMP_WINDOW = 0.5
RAMP_FIRST_SETTLE = 0.05
RAMP_FIRST_WINDOW = 0.15
RAMP_TICK = 0.02
# A rate within this factor of what fewer connections carry is theirs: measured rates wobble by a few percent.
RAMP_SLACK = 1.1
# Where the rate grew with the connections (a path that caps each one), the ramp keeps this many times the
# count that the rate needs: each connection idles between its pieces (the request's round trip, its
# pacing's start), and spares fill those gaps. Measured on the capped path of bench/fetch_throughput.py
# (each connection link/8), all open from the start: 8 connections moved 0.90 to 0.95 of the link, 16 moved
# 0.96 to 0.97, 32 no more. Only where the rate grew at least RAMP_SPARE_FROM times: less is as likely the
# machine's own limit (two connections on two busy cores, uncapped) as a cap, and spares there cost CPU.
RAMP_SPARE = 2
RAMP_SPARE_FROM = 3
# How often the transfer's own thread looks at the rate (and the progress), in seconds.
TICK = 0.1
# A relay's "not yet" (_weights.relay.RELAY_HEADER) is asked again after NOT_YET_POLL seconds (the relay has
# already held the request up to a bound while the bytes might come), for as long as the transfer's `stall`
# allows: a source that has sent no byte for that long costs a try of the next one.
NOT_YET_POLL = 0.05
# Bytes ahead of the hash kept in memory; beyond it, bytes are hashed from the part.
HASH_WINDOW = 256 << 20


class RangesIgnored(Exception):
    """The server answered a ranged request with the whole file: only one stream from byte 0 works."""


class RunGone(HubError):
    """The run that started this transfer is gone (_weights.heartbeat): it stops, keeping what it wrote."""


class _NotYet(Exception):
    """A relay does not hold the asked bytes yet and is still receiving them: ask again shortly."""


class _Stopped(Exception):
    """Another worker failed: this one stops where it is (its piece is not recorded)."""


class BodyCut(Exception):
    """The connection failed while a body was read into a buffer (a transient error: the piece resumes)."""


class Buffers:
    """Buffers of READ bytes, reused: a worker reads a body into one, and whoever holds it last (the worker,
    or the hash once it has hashed it) gives it back. As many exist as are held at once: one per worker
    and those the hash keeps within its window."""

    def __init__(self):
        self._free = deque()  # append and pop are atomic: no lock needed between threads

    def take(self):
        try:
            return self._free.pop()
        except IndexError:
            return bytearray(READ)

    def give(self, buffer):
        self._free.append(buffer)


class OrderedHash:
    """sha256 of a file whose ranges are written out of order, fed in order on its own thread.

    `wrote(offset, data, buffer)` after each write; the bytes are kept while they lie within `window` bytes
    of the hash's position (then the hash owns `buffer`, the pooled buffer `data` lies in, and gives it back
    to `buffers` once hashed) and read back from `fd` otherwise. hashlib releases the GIL on large buffers,
    so the hash runs on its own core beside the transfer. The written ranges not yet hashed are kept by their
    start and by their end, so that a write (which continues a range) costs two dictionary lookups.
    """

    def __init__(self, fd, size, window=HASH_WINDOW, buffers=None):
        self._fd, self._size, self._window = fd, size, window
        self._buffers = buffers if buffers is not None else Buffers()
        self._hasher = hashlib.sha256()
        self._cond = threading.Condition()
        self._pos = 0
        self._by_start, self._by_end = {}, {}
        self._held = {}
        self._closed = False
        self._error = None
        self.reread = 0  # bytes hashed from the part rather than from memory
        self._thread = threading.Thread(target=self._run, name="ds4-sha256", daemon=True)
        self._thread.start()

    @property
    def position(self):
        return self._pos

    def _add(self, start, end):
        """Under the lock: [start, end) is written; ranges never overlap (each byte is written once)."""
        start = max(start, self._pos)
        if end <= start:
            return
        before = self._by_end.pop(start, None)
        if before is not None:
            del self._by_start[before]
            start = before
        after = self._by_start.pop(end, None)
        if after is not None:
            del self._by_end[after]
            end = after
        self._by_start[start], self._by_end[end] = end, start
        if start == self._pos:
            self._cond.notify()

    def on_disk(self, start, end):
        """Bytes [start, end) are in the part already (a resumed run's)."""
        with self._cond:
            self._add(start, end)

    def wrote(self, offset, data, buffer=None):
        """Bytes `data` are written at `offset`; True when the hash keeps them (and owns `buffer`, when
        given: the writer takes another for its next read), False when the writer may reuse it."""
        end = offset + len(data)
        with self._cond:
            kept = offset >= self._pos and end <= self._pos + self._window
            if kept:
                self._held[offset] = (data, buffer)
            self._add(offset, end)
        return kept

    def _next(self):
        """Under the lock: ((bytes, their buffer) from memory, 0) or (None, how many to read from disk);
        (None, 0): stop."""
        while True:
            if self._closed or self._pos >= self._size:
                return None, 0
            end = self._by_start.get(self._pos)
            if end is not None:
                held = self._held.pop(self._pos, None)
                if held is not None:
                    return held, 0
                ahead = min((k for k in self._held if k > self._pos), default=end)
                return None, min(end, ahead, self._pos + READ) - self._pos
            self._cond.wait()

    def _run(self):
        try:
            while True:
                with self._cond:
                    data, n = self._next()
                    pos = self._pos
                if data is None and not n:
                    return
                buffer = None
                if data is None:
                    data = os.pread(self._fd, n, pos)
                    if not data:
                        raise OSError(f"the part ended at byte {pos:,} while hashing it")
                    self.reread += len(data)
                else:
                    data, buffer = data
                self._hasher.update(data)
                if buffer is not None:
                    self._buffers.give(buffer)
                with self._cond:
                    self._pos = new = pos + len(data)
                    end = self._by_start.pop(pos)
                    del self._by_end[end]
                    if end > new:
                        self._by_start[new], self._by_end[end] = end, new
                    if self._held and min(self._held) < new:
                        for stale in [k for k in self._held if k < new]:
                            _data, buffer = self._held.pop(stale)
                            if buffer is not None:
                                self._buffers.give(buffer)
        except Exception as e:  # handed to the caller of hexdigest()
            with self._cond:
                self._error = e
                self._cond.notify_all()

    def hexdigest(self):
        """The sha256 once every byte has come; call after all ranges are written."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._pos != self._size:
            raise HubError(f"the hash stopped at byte {self._pos:,} of {self._size:,}")
        return self._hasher.hexdigest()

    def close(self):
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()


class Ramp:
    """How many connections a transfer uses: no more than its rate gains from.

    From one connection, each step multiplies the count by RAMP_FACTOR (all at once, at most) while the
    rate the step measured grew by at least RAMP_KEEP of that factor. A path that caps each connection (a
    CDN) keeps them all; a path that one connection already fills (a LAN peer, a link slower than a
    connection's share) stays at one.
    When a step gains less, the count settles on the rate it reached over the per-connection rate of the
    step before (RAMP_SLACK allowed), twice that (RAMP_SPARE) where it is RAMP_SPARE_FROM times what the
    step before had or more, never more than it has: 16 connections on a link that 8 fill stay 16, on a
    link that 3 fill come back to 6, on a link that 2 fill to 2, on a link that one fills to one.
    `update(now, moved)` is fed the clock and the bytes moved so far and answers the count; it decides
    nothing more once settled.
    """

    def __init__(self, most, now):
        self.most = most
        self.count = 1
        self.settled = most <= 1
        self._since = now
        self._first_byte = False  # whether a byte has come: the first step is timed from it
        self._base = None  # (time, bytes moved) where the step's window began
        self._last = None  # (count, rate) of the step before

    def update(self, now, moved):
        if self.settled:
            return self.count
        first = self._last is None
        if first and not self._first_byte:
            if not moved:
                return self.count
            self._first_byte, self._since = True, now
        if self._base is None:
            if now - self._since >= (RAMP_FIRST_SETTLE if first else RAMP_SETTLE):
                self._base = (now, moved)
            return self.count
        began, moved_then = self._base
        if now - began < (RAMP_FIRST_WINDOW if first else RAMP_WINDOW):
            return self.count
        rate = (moved - moved_then) / (now - began)
        if self._last is not None:
            count, last_rate = self._last
            if rate < RAMP_KEEP * last_rate * self.count / count:
                per_connection = last_rate / count
                needed = math.ceil(rate / per_connection / RAMP_SLACK) if per_connection > 0 else self.count
                if needed >= RAMP_SPARE_FROM * count:
                    # The path caps each connection: twice the count that just fills it, so that the link
                    # stays full while a connection waits on its next piece's answer.
                    needed *= RAMP_SPARE
                self.count, self.settled = min(self.count, max(count, needed)), True
                return self.count
        if self.count >= self.most:
            self.settled = True
            return self.count
        self._last = (self.count, rate)
        self.count = min(self.most, self.count * RAMP_FACTOR)
        self._since, self._base = now, None
        return self.count


class Transfer:
    """Fill the missing ranges of an open part `fd` (state: PartState) from `location`.

    `relocate()` asks the hub again for the storage URL (a signed one expires) and returns it. A peer
    (`peer_sha256` set) must answer with that ETag, its verified copy's sha256, and is not relocated; with
    `peer_token` set, every answer of it must name this run (_weights.relay.RUN_HEADER), else it is not this
    run's peer server but whatever listens on its port: a failed try at once, nothing written, no retry.
    """

    def __init__(
        self, *, ref, location, relocate, fd, state, session_factory, token, connections, piece, window,
        timeout, retries, retry_delay, progress, count, dest_dir, peer_sha256=None, ramp=True, stall=None,
        heartbeat=None, peer_token=None,
    ):  # fmt: skip
        self.ref, self.location, self.relocate = ref, location, relocate
        self.peer_sha256, self.peer_token = peer_sha256, peer_token
        self.fd, self.state, self.session_factory, self._token = fd, state, session_factory, token
        self.connections, self.window, self.ramp = connections, window, ramp
        self.piece = min(piece, max(MIN_PIECE, -(-state.size // (4 * connections))))
        self.timeout, self.retries, self.retry_delay = timeout, retries, retry_delay
        self.progress, self.count, self.dest_dir = progress, count, dest_dir
        # A peer's "not yet" is asked again until no byte has come from it for `stall` seconds.
        self.stall = stall
        self._last_byte = time.monotonic()
        # A _weights.heartbeat.Heartbeat (or None): once the run that started this transfer is gone, it stops,
        # keeping what it wrote for the next run.
        self.heartbeat = heartbeat
        self.size = state.size
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error = None
        self._moved = []
        self._unrecorded = []
        # Per worker, the range it has written of its piece and not yet listed: (start, end), for a relay.
        self._writing = []
        self._held = None
        # Workers from this index on end after their piece (the ramp settled below them).
        self._target = 0
        self.used_connections = 0
        self._buffers = Buffers()

    @property
    def moved(self):
        return sum(self._moved)

    def run(self, one_stream=False):
        """Fetch what is missing; return (sha256, bytes hashed from disk). One stream: the whole file from
        byte 0 over one connection, skipping what a server that ignores Range sends again."""
        hasher = OrderedHash(self.fd, self.size, self.window, self._buffers)
        try:
            if one_stream:
                pieces = deque([(0, self.size)])
                self.state.etag = None
            else:
                for start, end in self.state.done:
                    hasher.on_disk(start, end)
                pieces = deque(cut_pieces(missing(self.state.done, self.size), self.piece, self.connections))
            most = 1 if one_stream else min(self.connections, len(pieces))
            ramp = Ramp(most, time.monotonic()) if self.ramp else None
            self._target = min(ramp.count, most) if ramp else most
            self._moved = [0] * most
            self._unrecorded = [0] * most
            self._writing = [None] * most
            workers = []
            while True:
                while len(workers) < self._target:
                    worker = threading.Thread(
                        target=self._worker, args=(len(workers), pieces, hasher, one_stream), daemon=True
                    )
                    worker.start()
                    workers.append(worker)
                self.used_connections = self.progress.connections = self._target
                alive = [worker for worker in workers if worker.is_alive()]
                if not alive:
                    break
                alive[0].join(TICK if ramp is None or ramp.settled else RAMP_TICK)
                if self.heartbeat is not None and not self._stop.is_set() and not self.heartbeat.alive():
                    self._fail(RunGone(f"stopped fetching {self.ref.name}: {self.heartbeat.why()}"))
                now = time.monotonic()
                if ramp is not None and not self._stop.is_set():
                    self._target = min(ramp.update(now, self.moved), most)
                if self.progress.due(now):
                    self.progress.report("fetching", self.state.bytes_done + self._in_flight())
                self._publish()
            self._publish()
            if isinstance(self._error, OSError) and self._error.errno == errno.ENOSPC:
                # Told once every worker has listed what it wrote: what stays is known.
                raise self._no_space() from self._error
            if self._error is not None:
                raise self._error
            return hasher.hexdigest(), hasher.reread
        finally:
            hasher.close()

    def _no_space(self):
        kept = self.state.bytes_done
        still = self.size - kept
        free = free_bytes(self.dest_dir)
        short = still - free
        return NoSpaceError(
            f"{self.dest_dir} filled up while fetching {self.ref.name}: {describe_bytes(still)} are still "
            f"to come and {describe_bytes(free)} are free; the {describe_bytes(kept)} that came stay in the "
            "part for the next run: "
            + (f"free {describe_bytes(short)} more and run again" if short > 0 else "run again"),
            max(short, 0),
        )

    def _publish(self):
        """Say which bytes are written (listed or still in a piece under way), for a relay serving them
        while the part fills (_weights.relay); only when that changed, at most once a tick."""
        with self._lock:
            held = merge([*self.state.done, *(list(w) for w in self._writing if w and w[1] > w[0])])
        if held != self._held:
            with contextlib.suppress(OSError):  # best effort: a relay that cannot tell serves less
                self.state.publish(held)
            self._held = held

    def _in_flight(self):
        """Bytes written and not yet in the part's list (the pieces under way)."""
        return sum(self._unrecorded)

    def _worker(self, i, pieces, hasher, one_stream):
        session = self.session_factory()
        try:
            while not self._stop.is_set():
                with self._lock:
                    if not pieces or i >= self._target:
                        return
                    start, end = pieces.popleft()
                self._piece(i, session, start, end, hasher, one_stream)
        except _Stopped:
            pass
        except BaseException as e:  # the first failure stops the others and is raised by run()
            self._fail(e)

    def _fail(self, error):
        with self._lock:
            if self._error is None:
                self._error = error
        self._stop.set()

    def _headers(self, pos, end, one_stream):
        headers = {}
        if not (one_stream and pos == 0):
            headers["Range"] = f"bytes={pos}-{end - 1}"
        # The token goes to the hub's own origin only: never to the storage it redirects to.
        same = self._token and origin(self.location) == origin(self.ref.url)
        headers["Authorization"] = f"Bearer {self._token}" if same else None
        return headers

    def _piece(self, i, session, start, end, hasher, one_stream):
        at = {"pos": start, "synced": start}

        def attempt():
            pos = at["pos"]
            with session.get(
                self.location, headers=self._headers(pos, end, one_stream), stream=True, timeout=self.timeout
            ) as response:
                if self.peer_token is not None and not from_this_run(
                    response.headers.get(RUN_HEADER), self.peer_token
                ):
                    # Before its status is believed: a stranger's "not yet" is no reason to wait.
                    raise HubError(
                        f"{self.location} answered HTTP {response.status_code} without this run's token: not "
                        "this run's peer server (another process on its port?)"
                    )
                if (
                    response.status_code in (401, 403)
                    and self.peer_sha256 is None
                    and origin(self.location) != origin(self.ref.url)
                ):
                    # A signed storage URL that expired: the hub signs a new one.
                    self.location = self.relocate()
                    raise HubTransientError(f"the storage refused its URL (HTTP {response.status_code})")
                if (
                    response.status_code == 503
                    and self.peer_sha256 is not None
                    and response.headers.get(RELAY_HEADER) == "not-yet"
                ):
                    raise _NotYet
                raise_for_status(response, self.ref, bool(self._token))
                self._same_file(unquote_etag(response.headers.get("ETag")))
                skip, answered = 0, end
                if response.status_code == 206 and _range_starts_at(response, pos):
                    # A relay answers with the bytes it holds so far, which may end before the piece; an
                    # answer that ends before it starts would move nothing, again and again: it costs a try.
                    answered = min(end, _range_end(response) or end)
                    if answered <= pos:
                        raise HubTransientError(
                            f"{self.location} answered bytes {response.headers.get('Content-Range')!r} for "
                            f"bytes {pos}-{end - 1}: a range that ends before it starts"
                        )
                elif response.status_code == 200 and (one_stream or (start, end) == (0, self.size)):
                    skip = pos  # the whole file again: what is on disk already is skipped
                else:
                    raise RangesIgnored(f"HTTP {response.status_code} for a request of bytes {pos}-{end - 1}")
                encoding = response.headers.get("Content-Encoding", "identity").lower()
                if encoding != "identity":
                    raise HubError(f"{self.ref.describe()} came {encoding}-encoded though identity was asked")
                broken = None
                try:
                    self._copy(i, response, at, answered, hasher, skip)
                except (*TRANSIENT_EXC, BodyCut) as e:
                    broken = e
            if at["pos"] < answered:
                why = f": {broken}" if broken else ""
                raise HubTransientError(
                    f"the connection ended at byte {at['pos']:,} of {self.size:,} for "
                    f"{self.ref.describe()}{why}"
                ) from broken

        def on_retry(attempt_no, error):
            self.progress.attempt = attempt_no
            self.progress.report("retrying", self.state.bytes_done + self._in_flight(), error=error)

        try:
            # Until the piece is whole: an answer that ended where it said it would (a relay's bytes so
            # far) or a relay's "not yet" costs no retry, as long as some byte came within `stall` seconds.
            while at["pos"] < end:
                try:
                    retrying(
                        attempt, what="download", ref=self.ref, retries=self.retries, delay=self.retry_delay,
                        on_retry=on_retry, count=self.count,
                    )  # fmt: skip
                except _NotYet:
                    quiet = time.monotonic() - self._last_byte
                    if self.stall is not None and quiet >= self.stall:
                        raise HubTransientError(
                            f"{self.location} said 'not yet' and sent no byte for {quiet:.0f} s"
                        ) from None
                    if self._stop.wait(NOT_YET_POLL):
                        raise _Stopped from None
        except BaseException:
            # Given up or stopped: what came of the range is kept for the next run. Best effort: a disk too
            # full for the list costs that next run these bytes again, and the error that matters is raised.
            if at["pos"] > at["synced"]:
                with contextlib.suppress(OSError):
                    self._checkpoint(i, at, at["pos"])
            raise
        self._checkpoint(i, at, end)

    def _copy(self, i, response, at, end, hasher, skip):
        body = Body(response.raw)
        buffer = self._buffers.take()
        try:
            while skip:  # the whole file again from byte 0: what is on disk already is read and dropped
                n = body.read_into(memoryview(buffer)[: min(skip, READ)])
                if not n:
                    return
                skip -= n
            while at["pos"] < end:
                if self._stop.is_set():
                    raise _Stopped
                pos = at["pos"]
                # Up to the next READ boundary of the file: after a short read the writes align again.
                view = memoryview(buffer)[: min(end - pos, READ - pos % READ)]
                n = body.read_into(view)
                if not n:
                    return
                data = view[:n]
                write_all(self.fd, data, pos)
                if hasher.wrote(pos, data, buffer):
                    buffer = self._buffers.take()
                at["pos"] = pos + n
                self._writing[i] = (at["synced"], at["pos"])
                self._moved[i] += n
                self._unrecorded[i] += n
                self._last_byte = time.monotonic()
                if at["pos"] < end and at["pos"] - at["synced"] >= self.piece:
                    self._checkpoint(i, at, at["pos"])
            body.done()
        finally:
            self._buffers.give(buffer)

    def _checkpoint(self, i, at, end):
        """Sync what worker `i` wrote up to `end` and add it to the part's list: a killed run keeps it."""
        os.fdatasync(self.fd)
        with self._lock:
            self.state.add(at["synced"], end)
            self.state.save()
            self._writing[i] = None
        self._unrecorded[i] -= end - at["synced"]
        at["synced"] = end

    def _same_file(self, etag):
        if self.peer_sha256 is not None:
            if etag != self.peer_sha256:
                raise HubMismatchError(f"the peer {self.location} has another copy (ETag {etag})")
            return
        if etag is None:
            return
        with self._lock:
            if self.state.etag is None:
                self.state.etag = etag
            elif etag != self.state.etag:
                raise HubChangedError(
                    f"{self.ref.describe()} changed during the transfer: ETag {self.state.etag}, then {etag}"
                )


def cut_pieces(ranges, piece, connections):
    """The pieces (start, end) of `ranges` (sorted, not overlapping) in file order: `piece` bytes each, but
    the last `connections` * `piece` bytes in pieces TAIL_SPLIT times smaller (not below MIN_PIECE unless
    `piece` is), so that the connections end the file close together."""
    total = sum(end - start for start, end in ranges)
    tail_from = total - connections * piece  # bytes of the ranges before the tail
    tail_piece = min(piece, max(MIN_PIECE, piece // TAIL_SPLIT))
    seen = 0
    for start, end in ranges:
        s = start
        while s < end:
            size = piece if seen + (s - start) < tail_from else tail_piece
            e = min(s + size, end)
            if seen + (s - start) < tail_from < seen + (e - start):
                e = start + (tail_from - seen)  # the tail begins here: a whole piece never reaches into it
            yield s, e
            s = e
        seen += end - start


def write_all(fd, data, offset):
    """Write all of DATA at OFFSET: a disk that fills mid-write takes part of it (then the next write
    fails with ENOSPC), and a byte never written must never be listed as on disk."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class Body:
    """A response body read into the caller's buffers, each read as soon as the network gives it.

    The body comes from the HTTP response under the requests/urllib3 one (its `_fp`, http.client's, in
    urllib3 1.26 and 2): its socket's reader fills the buffer straight from the socket with what the socket
    holds (readinto1), no bytes object made per read, the body's length counted down as http.client's own
    read1 does (a chunked body, which neither the hub's storage nor a peer sends, is read with http.client's
    readinto). A body without it (another raw) is read with read(n), which waits for all n bytes: the size
    asked for starts at READ_MIN and doubles while reads come back quickly, halving when one keeps the caller
    waiting, so that a slow link still reports progress and a fast one moves large blocks; the bytes are
    copied in. `done()` once the body is read whole hands the connection back to the pool for the next piece
    (urllib3 saw no read of its own, so would close it).
    """

    def __init__(self, raw):
        self._raw = raw
        fp = getattr(raw, "_fp", None)
        self._fp = fp if isinstance(fp, http.client.HTTPResponse) else None
        self.size = READ_MIN

    def read_into(self, view):
        """Read at most len(view) bytes into `view`; 0 at the body's end."""
        if self._fp is not None:
            try:
                return self._read_into(view)
            except (http.client.HTTPException, OSError) as e:  # as urllib3 reads them: the connection's
                raise BodyCut(f"the connection broke: {e!r}") from e
        view = view[: self.size]
        asked = time.monotonic()
        data = self._raw.read(len(view), decode_content=False)
        took = time.monotonic() - asked
        if took < READ_QUICK:
            self.size = min(READ, self.size * 2)
        elif took > READ_SLOW:
            self.size = max(READ_MIN, self.size // 2)
        view[: len(data)] = data
        return len(data)

    def _read_into(self, view):
        response = self._fp
        if response.fp is None:
            return 0
        if response.chunked or response.length is None:
            return response.readinto(view)
        view = view[: response.length]
        n = response.fp.readinto1(view)
        if n:
            response.length -= n
        if not response.length or (not n and view):  # the whole body, or the connection ended
            response.close()
        return n

    def done(self):
        if self._fp is not None and self._fp.isclosed():
            self._raw.release_conn()


def _range_end(response):
    """The end (exclusive) of the bytes a 206 answer carries, from its Content-Range; None if it lacks one."""
    match = re.match(r"bytes \d+-(\d+)/", response.headers.get("Content-Range", ""))
    return int(match.group(1)) + 1 if match else None


def _range_starts_at(response, offset):
    match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    return bool(match) and int(match.group(1)) == offset
