"""The hub client over several connections: byte ranges, their resumption, and what can go wrong in one."""

import errno
import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import urllib3
from ansible_collections.ds4.fleet.plugins.module_utils._weights import records as ds4_hub_records
from ansible_collections.ds4.fleet.plugins.module_utils._weights import transfer as ds4_hub_transfer
from ansible_collections.ds4.fleet.plugins.module_utils._weights.hub import HubFile
from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import (
    FileRef,
    HubTransientError,
    NoSpaceError,
    new_session,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.records import PartState, part_bytes_done

BASE = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
GATED = "ds4-standin-gated.gguf"
TOKEN = "hf_standin_token"
PIECE = 16 << 10  # the base file (~385 KiB) is ~24 pieces


def hub_file(hub, hub_files, name, dest, **kw):
    kw.setdefault("retry_delay", 0.01)
    kw.setdefault("piece", PIECE)
    kw.setdefault("connections", 4)
    # All connections from the start: these tests are about ranges, not how many (the ramp's tests below).
    kw.setdefault("ramp", False)
    return HubFile(FileRef(hub.endpoint, hub_files[name]["repo"], "main", name), str(dest), **kw)


def sha256_of(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def state_of(tmp_path, hub_files, name=BASE):
    want = hub_files[name]
    return PartState.load(str(tmp_path), name, want["size"], want["sha256"])


def failing_after(hub, gets):
    """A session under which every GET of the base file after the first `gets` is cut short."""
    session = new_session()
    seen = []

    def hook(response, *args, **kwargs):
        if response.request.method == "GET":
            seen.append(response)
            if len(seen) == gets:
                hub.set_fault(BASE, cut_after=10, times=None)

    session.hooks["response"].append(hook)
    return session


def test_a_file_comes_over_several_connections_hashed_from_memory(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert (result["action"], result["connections"], result["bytes_fetched"]) == ("fetched", 4, want["size"])
    assert result["hashed_from_disk"] == 0, "every byte was hashed as it came"
    assert result["attempts"] == 1 + -(-want["size"] // PIECE)  # the HEAD, one GET per range
    assert sha256_of(tmp_path / BASE) == want["sha256"]
    assert sorted(os.listdir(tmp_path)) == sorted([BASE, f".{BASE}.verified.json"]), "no part, no range list"


def test_a_body_is_read_into_reused_buffers_never_into_a_new_object_per_read(
    hub, hub_files, tmp_path, monkeypatch
):
    """Issue 56: each read went socket -> a new bytes object -> the part; now socket -> a pooled buffer."""

    real_read = urllib3.response.HTTPResponse.read

    def new_object(*args, **kwargs):
        raise AssertionError("a read that makes a new bytes object")

    def read(self, *args, **kwargs):  # a HEAD's or an API's answer is read whole, as before: not a body's
        if self.status == 206:
            new_object()
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(http.client.HTTPResponse, "read1", new_object)
    # urllib3 has read1 from 2.3 on; 1.26 (Debian 12's) and 2.0.7 (Ubuntu 24.04's) lack it.
    if hasattr(urllib3.response.HTTPResponse, "read1"):
        monkeypatch.setattr(urllib3.response.HTTPResponse, "read1", new_object)
    monkeypatch.setattr(urllib3.response.HTTPResponse, "read", read)
    made = []
    real = ds4_hub_transfer.Buffers.take
    monkeypatch.setattr(ds4_hub_transfer.Buffers, "take", lambda self: made.append(1) or real(self))
    want = hub_files[BASE]
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert result["bytes_fetched"] == want["size"]
    assert sha256_of(tmp_path / BASE) == want["sha256"]
    assert len(made) > 4, "each worker took buffers from the pool"


def test_the_part_is_written_in_pieces_that_never_cross_a_read_boundary(
    hub, hub_files, tmp_path, monkeypatch
):
    """Issue 56: writes aligned to READ. A small READ so that the ~385 KiB file spans many of them: every
    write lies within one READ-aligned block of the file."""
    read = 32 << 10
    monkeypatch.setattr(ds4_hub_transfer, "READ", read)
    monkeypatch.setattr(ds4_hub_transfer, "READ_MIN", 4 << 10)
    writes = []
    real = ds4_hub_transfer.write_all
    monkeypatch.setattr(
        ds4_hub_transfer,
        "write_all",
        lambda fd, data, offset: writes.append((offset, len(data))) or real(fd, data, offset),
    )
    want = hub_files[BASE]
    hub_file(hub, hub_files, BASE, tmp_path, piece=128 << 10).ensure()
    assert sha256_of(tmp_path / BASE) == want["sha256"]
    crossing = [(offset, n) for offset, n in writes if offset // read != (offset + n - 1) // read]
    assert not crossing, f"writes across a {read}-byte boundary: {crossing[:5]}"
    assert sum(n for _offset, n in writes) == want["size"]


def test_one_connection_carries_every_piece_of_a_transfer(hub, hub_files, tmp_path, monkeypatch):
    """The body read past urllib3 still hands the connection back: no new connection per piece."""
    connects = []
    real = urllib3.connection.HTTPConnection.connect
    monkeypatch.setattr(
        urllib3.connection.HTTPConnection, "connect", lambda self: connects.append(1) or real(self)
    )
    want = hub_files[BASE]
    result = hub_file(hub, hub_files, BASE, tmp_path, connections=1).ensure()
    assert result["attempts"] == 1 + -(-want["size"] // PIECE), "the HEAD, one GET per range"
    assert sha256_of(tmp_path / BASE) == want["sha256"]
    assert len(connects) <= 2, (
        f"{len(connects)} connections for {result['attempts']} requests (the HEAD's, one)"
    )


def test_the_hash_gives_each_buffer_it_kept_back_and_keeps_none_beyond_its_window(tmp_path):
    data = os.urandom(6 * 1024)
    path = tmp_path / "part"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    buffers = ds4_hub_transfer.Buffers()
    given = []
    buffers.give = given.append
    try:
        hasher = ds4_hub_transfer.OrderedHash(fd, len(data), window=2048, buffers=buffers)
        blocks = [bytearray(data[k : k + 1024]) for k in range(0, len(data), 1024)]
        # The second block first, then beyond the window, then the first: the hash holds the in-window ones.
        assert hasher.wrote(1024, memoryview(blocks[1]), blocks[1]) is True
        assert hasher.wrote(4096, memoryview(blocks[4]), blocks[4]) is False, "beyond the window"
        assert hasher.wrote(0, memoryview(blocks[0]), blocks[0]) is True
        for k in (2, 3, 5):
            hasher.wrote(k * 1024, memoryview(blocks[k]), blocks[k])
        assert hasher.hexdigest() == hashlib.sha256(data).hexdigest()
    finally:
        os.close(fd)
    kept = {id(b) for b in given}
    assert {id(blocks[0]), id(blocks[1])} <= kept and id(blocks[4]) not in kept
    assert len(given) == len(kept), "no buffer given back twice"


def test_beyond_the_hash_window_bytes_are_hashed_from_the_part(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    result = hub_file(hub, hub_files, BASE, tmp_path, hash_window=0).ensure()
    assert result["hashed_from_disk"] == want["size"]
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_hub_answer_that_ends_before_it_starts_costs_a_try_and_the_tries_run_out(hub, hub_files, tmp_path):
    """Issue 55, finding 1: a 206 whose Content-Range ends before its start moved nothing and was asked again
    at once, without end; it is a failed try like any, and the tries run out."""
    session = new_session()
    answers = []

    def backwards(response, *args, **kwargs):
        start = response.headers.get("Content-Range", "").removeprefix("bytes ").partition("-")[0]
        if response.status_code == 206 and start not in ("", "0"):
            answers.append(start)
            response.headers["Content-Range"] = f"bytes {start}-{int(start) // 2}/{hub_files[BASE]['size']}"

    session.hooks["response"].append(backwards)
    with pytest.raises(HubTransientError, match="ends before it starts"):
        hub_file(hub, hub_files, BASE, tmp_path, retries=2, connections=1, session=session).ensure()
    assert len(answers) == 3, "the first try and two retries"


def test_a_cut_in_one_connection_is_resumed_within_its_range(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    hub.set_fault(BASE, cut_after=PIECE // 2)
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert result["action"] == "fetched" and result["bytes_fetched"] == want["size"], "nothing fetched twice"
    assert result["attempts"] == 2 + -(-want["size"] // PIECE)
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_failed_run_keeps_its_complete_ranges_and_the_next_fetches_only_the_rest(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    with pytest.raises(HubTransientError, match="the connection ended at byte"):
        hub_file(
            hub, hub_files, BASE, tmp_path, retries=0, connections=1, session=failing_after(hub, 3)
        ).ensure()
    hub.clear_faults()
    assert not (tmp_path / BASE).exists()
    kept = state_of(tmp_path, hub_files)
    assert part_bytes_done(str(tmp_path), BASE) == kept.bytes_done
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert result["action"] == "resumed" and result["resumed_from"] == kept.bytes_done
    assert result["bytes_fetched"] == want["size"] - kept.bytes_done
    assert result["hashed_from_disk"] >= kept.prefix
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_killed_run_loses_at_most_one_range_per_connection(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    connections = 4
    # One GET stops mid-range until released (never, for this run): the run is killed with ranges under
    # way however slowly the machine runs it, the other connections at a CDN's pace meanwhile. Its read
    # timeout is only a hang guard.
    hub.set_fault(BASE, hold_after=PIECE // 2)
    hub.set_network(conn_bps=64 << 10)
    script = (
        "import sys; from ansible_collections.ds4.fleet.plugins.module_utils._weights.hub import HubFile;"
        "from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import FileRef;"
        f"HubFile(FileRef({hub.endpoint!r}, {want['repo']!r}, 'main', {BASE!r}), {str(tmp_path)!r},"
        f" piece={PIECE}, connections={connections}, timeout=3600).ensure()"
    )
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", script], env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        )
        deadline = time.monotonic() + 120  # a hang guard
        while state_of(tmp_path, hub_files).bytes_done < 4 * PIECE:
            assert proc.poll() is None and time.monotonic() < deadline, "the fetch never listed 4 ranges"
            time.sleep(0.02)
        assert hub.holds()[BASE]["waiting"] == 1
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        hub.set_network()
        hub.clear_faults()
    kept = state_of(tmp_path, hub_files).bytes_done
    written = (
        tmp_path / f"{BASE}.part"
    ).stat().st_blocks * 512  # the part is sparse: its blocks were written
    assert kept < want["size"] and written - kept <= connections * (PIECE + 4096)
    result = hub_file(hub, hub_files, BASE, tmp_path, connections=connections).ensure()
    assert result["bytes_fetched"] == want["size"] - kept
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_flipped_byte_in_one_range_is_caught_and_the_file_fetched_again(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    hub.set_fault(BASE, flip_offset=2 * PIECE + 7)  # the first GET of range 2, whenever it comes
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert result["verify_failures"] == 1 and result["bytes_fetched"] == 2 * want["size"]
    assert any("discarded it, fetching again" in w for w in result["warnings"])
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_storage_that_ignores_ranges_is_read_as_one_stream(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    hub.set_fault(BASE, ignore_range=True, times=None)
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert result["action"] == "fetched" and result["connections"] == 1
    assert any("ignores byte ranges" in w for w in result["warnings"])
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_one_stream_cut_against_a_storage_without_ranges_skips_what_it_has(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    hub.set_fault(BASE, ignore_range=True, cut_after=want["size"] // 2, times=1)
    result = hub_file(hub, hub_files, BASE, tmp_path, connections=1, piece=1 << 30).ensure()
    assert result["action"] == "fetched" and result["attempts"] == 3
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_file_that_changes_between_ranges_is_started_over(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    hub.set_fault(BASE, etag="replaced-meanwhile", times=1)
    result = hub_file(hub, hub_files, BASE, tmp_path, connections=1).ensure()
    assert any("changed during the transfer" in w and "starting over" in w for w in result["warnings"])
    assert result["bytes_fetched"] >= want["size"]
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_range_list_of_another_file_is_not_trusted(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    (tmp_path / f"{BASE}.part").write_bytes(b"x" * want["size"])
    doc = {"size": want["size"], "sha256": "0" * 64, "etag": None, "done": [[0, want["size"]]]}
    (tmp_path / f".{BASE}.part.json").write_text(json.dumps(doc))
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert (result["action"], result["bytes_fetched"], result["verify_failures"]) == (
        "fetched",
        want["size"],
        0,
    )
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_full_disk_mid_way_keeps_the_ranges_on_disk_and_nothing_in_place(
    hub, hub_files, tmp_path, monkeypatch
):
    want = hub_files[BASE]
    real, real_new = ds4_hub_transfer.write_all, ds4_hub_records.open_new
    written, full = [], []

    def filling(fd, data, offset):
        """The part's writes: the disk is full once half the file is in."""
        if sum(written) >= want["size"] // 2:
            full.append(offset)
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(len(data))
        return real(fd, data, offset)

    def no_new_file_once_full(path):
        # A full disk has no block for a new file either: the range list and the progress are rewritten
        # where they are.
        if full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_new(path)

    monkeypatch.setattr(ds4_hub_transfer, "write_all", filling)
    monkeypatch.setattr(ds4_hub_records, "open_new", no_new_file_once_full)
    monkeypatch.setattr(ds4_hub_transfer, "free_bytes", lambda path: 4096)
    progress = tmp_path / "p.json"
    with pytest.raises(NoSpaceError) as e:
        hub_file(hub, hub_files, BASE, tmp_path, progress_path=str(progress)).ensure()
    kept = state_of(tmp_path, hub_files).bytes_done
    assert 0 < kept < want["size"]
    still = want["size"] - kept
    assert str(e.value).startswith(
        f"{tmp_path} filled up while fetching {BASE}: {still:,} bytes ({still / 2**30:.2f} GiB) are still to "
        f"come and 4,096 bytes (0.00 GiB) are free; the {kept:,} bytes"
    ), e.value
    assert e.value.shortfall_bytes == still - 4096
    assert not (tmp_path / BASE).exists()
    assert json.loads(progress.read_text())["state"] == "failed"
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")], "no half-made file is left"
    monkeypatch.setattr(ds4_hub_transfer, "write_all", real)
    full.clear()
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert result["bytes_fetched"] == want["size"] - kept
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_write_that_a_filling_disk_cuts_short_is_written_on(hub, hub_files, tmp_path, monkeypatch):
    """A write that takes part of its bytes: the rest is written before the range goes on, never left
    as a hole that the hash, taken from memory, would not see."""
    want = hub_files[BASE]
    real = os.pwrite
    cut = []

    def short(fd, data, offset):
        if not cut and len(data) > 1:
            cut.append(offset)
            return real(fd, bytes(data[: len(data) // 2]), offset)
        return real(fd, data, offset)

    monkeypatch.setattr(ds4_hub_transfer.os, "pwrite", short)
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert cut and result["action"] == "fetched"
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_on_a_full_disk_a_list_with_another_name_is_never_rewritten_in_place(tmp_path, monkeypatch):
    doc, other = tmp_path / "list.json", tmp_path / "elsewhere.json"
    doc.write_text('{"done": []}')
    os.link(doc, other)

    def full(path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ds4_hub_records, "open_new", full)
    with pytest.raises(OSError, match="No space left"):
        ds4_hub_records.replace_text(str(doc), '{"done": [[0, 1]]}')
    assert other.read_text() == '{"done": []}'
    os.unlink(other)
    ds4_hub_records.replace_text(str(doc), '{"done": [[0, 1]]}')
    assert json.loads(doc.read_text()) == {"done": [[0, 1]]}


def test_check_mode_counts_the_ranges_on_disk(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    with pytest.raises(HubTransientError):
        hub_file(
            hub, hub_files, BASE, tmp_path, retries=0, connections=1, session=failing_after(hub, 2)
        ).ensure()
    hub.clear_faults()
    kept = state_of(tmp_path, hub_files).bytes_done
    before = sorted(os.listdir(tmp_path))
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure(check_mode=True)
    assert (result["action"], result["bytes_to_fetch"]) == ("would_resume", want["size"] - kept)
    assert sorted(os.listdir(tmp_path)) == before


def test_the_token_goes_to_the_hub_and_never_to_the_storage(hub, hub_files, tmp_path):
    sent = []
    session = new_session(TOKEN)
    session.hooks["response"].append(
        lambda r, *a, **kw: sent.append((r.url, r.request.headers.get("Authorization")))
    )
    result = hub_file(hub, hub_files, GATED, tmp_path, token=TOKEN, session=session).ensure()
    assert result["action"] == "fetched"
    to_hub = [auth for url, auth in sent if url.startswith(hub.endpoint)]
    to_storage = [auth for url, auth in sent if url.startswith(hub.storage_endpoint)]
    assert to_hub == [f"Bearer {TOKEN}"] and to_storage and set(to_storage) == {None}
    assert sha256_of(tmp_path / GATED) == hub_files[GATED]["sha256"]


def test_progress_lines_carry_bytes_rate_time_left_and_connections(hub, hub_files, tmp_path):
    size = hub_files[BASE]["size"]
    # One range stops midway until the test has read a record of the fetch under way: arranged, so that
    # it holds however slowly the machine runs (the read timeout is only a hang guard).
    hub.set_fault(BASE, hold_after=PIECE // 2)
    progress = tmp_path / "p.json"
    fetch = hub_file(
        hub, hub_files, BASE, tmp_path, progress_path=str(progress), progress_interval=0.1, timeout=3600
    )
    worker = threading.Thread(target=fetch.ensure)
    worker.start()
    midway = None
    try:
        deadline = time.monotonic() + 120  # a hang guard
        while midway is None:
            assert worker.is_alive() and time.monotonic() < deadline, "no record of the fetch under way"
            if progress.exists():
                p = json.loads(progress.read_text())
                midway = p if p["state"] == "fetching" and 0 < p["bytes_done"] < size else None
            time.sleep(0.02)
    finally:
        hub.release(BASE)
        worker.join()
    assert (midway["connections"], midway["total"]) == (4, size)
    assert midway["rate_bps"] > 0 and midway["eta_s"] is not None, midway
    assert Path(progress).exists() and json.loads(progress.read_text())["state"] == "done"


class _TimedBody:
    """A body with only a blocking read(n), each read taking the next of `seconds` on a clock that moves
    only when it reads: how the block size follows the link, tested without a link or waiting."""

    def __init__(self, seconds):
        self.seconds, self.now, self.asked = list(seconds), 0.0, []

    def monotonic(self):
        return self.now

    def read(self, n, decode_content=None):
        if not self.seconds:
            return b""
        self.asked.append(n)
        self.now += self.seconds.pop(0)
        return b"x" * n


def test_a_blocking_read_doubles_while_quick_halves_when_slow_and_stays_within_bounds(monkeypatch):
    quick = ds4_hub_transfer.READ_QUICK / 2
    between = ds4_hub_transfer.READ_QUICK
    slow = 2 * ds4_hub_transfer.READ_SLOW
    body = _TimedBody([quick] * 3 + [slow, between] + [slow] * 3 + [quick] * 5)
    monkeypatch.setattr(ds4_hub_transfer, "time", body)
    monkeypatch.setattr(ds4_hub_transfer, "READ", 128 << 10)
    reader, buffer, chunks = ds4_hub_transfer.Body(body), bytearray(1 << 20), []
    while n := reader.read_into(memoryview(buffer)):
        chunks.append(buffer[:n])
    k = 1 << 10
    assert body.asked == [16 * k, 32 * k, 64 * k, 128 * k, 64 * k, 64 * k, 32 * k, 16 * k, 16 * k, 32 * k,
                          64 * k, 128 * k, 128 * k]  # fmt: skip
    assert [len(chunk) for chunk in chunks] == body.asked


def settled_on(most, per_connection, link, seconds=20.0, tick=0.1):
    """The count a Ramp settles on over a simulated path: each connection carries `per_connection` bytes/s
    (None: as much as the link), all of them together `link` (None: no cap)."""
    ramp = ds4_hub_transfer.Ramp(most, 0.0)
    now = moved = 0.0
    while now < seconds and not ramp.settled:
        rate = min(ramp.count * (per_connection or link), link or float("inf"))
        now, moved = now + tick, moved + rate * tick
        ramp.update(now, moved)
    assert ramp.settled, f"still ramping after {seconds} s at {ramp.count}"
    return ramp.count


@pytest.mark.parametrize(
    ("per_connection", "link", "settled"),
    [
        pytest.param(12.5, 100, 16, id="a CDN's eighth of the link each: twice the 8 that fill it"),
        pytest.param(None, 100, 1, id="one connection fills the path: it stays one"),
        pytest.param(10, 25, 6, id="a link three connections fill: twice three"),
        pytest.param(
            10, 18, 2, id="a link two connections fill: two, the machine's limit as likely as a cap"
        ),
        pytest.param(10, None, 16, id="each connection held and no link cap: all it may open"),
    ],
)
def test_the_ramp_opens_as_many_connections_as_the_rate_gains_from(per_connection, link, settled):
    assert settled_on(16, per_connection, link) == settled


def seconds_to_move(size, count_at, per_connection, link, tick=0.01):
    """Seconds to move `size` bytes over a simulated path when `count_at(now, moved)` says how many
    connections carry it at each tick."""
    now = moved = 0.0
    while moved < size:
        count = count_at(now, moved)
        now, moved = now + tick, moved + min(count * per_connection, link) * tick
    return now


def test_the_ramp_costs_under_half_a_second_where_each_connection_gets_an_eighth_of_the_link():
    # 1 GiB through 100 MB/s, each connection held to 12.5 MB/s: all at once takes ~10.7 s. A ramp of
    # several steps (1, 8, then 16) cost ~0.7 s more; one step of one connection, then all, ~0.35 s. It keeps
    # all 16 (twice the 8 that fill the link: the spares fill the gaps between a connection's pieces).
    size, per_connection, link = 1 << 30, 12.5e6, 100e6
    ramp = ds4_hub_transfer.Ramp(16, 0.0)
    ramped = seconds_to_move(size, ramp.update, per_connection, link)
    at_once = seconds_to_move(size, lambda now, moved: 16, per_connection, link)
    assert ramp.settled and ramp.count == 16
    assert ramped - at_once < 0.5
    assert at_once / ramped >= 0.95


@pytest.mark.parametrize("first_byte", [0.03, 0.3], ids=["a quick first answer", "a slow first answer"])
def test_the_ramps_first_step_is_timed_from_the_first_byte_and_decides_within_a_quarter_second_of_it(
    first_byte,
):
    # Issue 56: the first step (one connection) cost 0.4 s from the thread's start, whatever the answer's
    # delay; on a path that caps each connection that is ~0.35 s of the link lost. Now it waits for the first
    # byte (a slow first answer is not measured as a slow connection) and decides within 0.25 s of it.
    per_connection, link = 12.5e6, 100e6
    ramp = ds4_hub_transfer.Ramp(16, 0.0)
    now = moved = 0.0
    while ramp.count == 1:
        assert now < first_byte + 0.25, f"still one connection {now - first_byte:.2f} s after the first byte"
        now = round(now + 0.01, 2)
        if now > first_byte:
            moved += per_connection * 0.01
        ramp.update(now, moved)
    assert ramp.count == 16
    while not ramp.settled:
        now, moved = now + 0.01, moved + min(16 * per_connection, link) * 0.01
        ramp.update(now, moved)
    assert ramp.count == 16, "the first step measured one connection's rate, not the answer's delay"


def test_the_last_pieces_are_cut_finer_so_that_the_files_end_keeps_the_connections_busy():
    # Issue 56: with 16 MiB pieces the last ones ended up to a piece's time apart, the link emptying while
    # fewer connections than fill it were left. The last `connections` pieces' worth is cut in quarters.
    mib = 1 << 20
    pieces = list(ds4_hub_transfer.cut_pieces([(0, 100 * mib), (120 * mib, 200 * mib)], 16 * mib, 2))
    assert [start for start, _end in pieces] == sorted(start for start, _end in pieces), "in file order"
    covered = [(s, e) for s, e in pieces]
    assert sum(e - s for s, e in covered) == 180 * mib
    assert all(0 <= s < e <= 100 * mib or 120 * mib <= s < e <= 200 * mib for s, e in covered)
    tail = [e - s for s, e in pieces if s >= 200 * mib - 2 * 16 * mib]
    assert tail and max(tail) <= 4 * mib, "the last 32 MiB in quarter pieces"
    assert max(e - s for s, e in pieces) == 16 * mib, "the rest in whole pieces"
    # Never below MIN_PIECE, and a file shorter than the tail is all in the finer pieces.
    small = list(ds4_hub_transfer.cut_pieces([(0, 3 * mib)], 2 * mib, 4))
    assert small == [(0, mib), (mib, 2 * mib), (2 * mib, 3 * mib)]
    assert list(ds4_hub_transfer.cut_pieces([(0, 96 << 10)], 32 << 10, 4)) == [
        (0, 32 << 10),
        (32 << 10, 64 << 10),
        (64 << 10, 96 << 10),
    ], "pieces already under MIN_PIECE stay as they are"


def test_the_ramp_never_opens_more_than_it_may():
    assert settled_on(6, 10, None) == 6
    assert settled_on(1, 10, None) == 1


# Real pacing wobbles: one connection leaves a gap at each piece's request that a second one fills, and a
# window may catch a burst; the exact rule is the simulated tests' above.
@pytest.mark.parametrize(
    ("network", "settled"),
    [
        pytest.param({"link_bps": 128 << 10}, {1, 2}, id="a link one or two connections fill"),
        pytest.param(
            {"conn_bps": 32 << 10, "link_bps": 128 << 10}, {8, 10}, id="a link four connections fill: twice"
        ),
    ],
)
def test_a_transfer_settles_on_the_connections_its_path_needs(
    hub, hub_files, tmp_path, monkeypatch, network, settled
):
    # The ramp's steps shortened so that the ~385 KiB file (3 s at these rates) outlasts them, and long
    # enough that a window's measure holds on a loaded machine (with 0.3 s windows at twice the rates, the
    # first case failed once in a unit run beside four Molecule scenarios). The first step's too: its
    # 0.15 s window holds about 5 KiB of one 32 KiB/s connection, and a burst in it read as a faster
    # connection settled the second case on 6 in a unit run beside two scenarios.
    monkeypatch.setattr(ds4_hub_transfer, "RAMP_SETTLE", 0.2)
    monkeypatch.setattr(ds4_hub_transfer, "RAMP_WINDOW", 0.6)
    monkeypatch.setattr(ds4_hub_transfer, "RAMP_FIRST_SETTLE", 0.1)
    monkeypatch.setattr(ds4_hub_transfer, "RAMP_FIRST_WINDOW", 0.4)
    hub.set_network(**network)
    try:
        result = hub_file(hub, hub_files, BASE, tmp_path, connections=16, ramp=True).ensure()
    finally:
        hub.set_network()
    assert result["connections"] in settled
    assert sha256_of(tmp_path / BASE) == hub_files[BASE]["sha256"]
