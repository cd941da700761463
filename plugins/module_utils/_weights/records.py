"""What a weight file's state on disk is: its verification record, its partial download's ranges, its hash.

The verification record `.<file>.verified.json` beside a file (keyed by size, mtime_ns, inode and device)
spares the next run from hashing it again. A partial download `<file>.part` is written at the offsets its
ranges come from; `.<file>.part.json` beside it lists the byte ranges that are on disk for certain (written
and synced), with the size, sha256 and ETag of the file they belong to. A part without that list is a
prefix (curl -C -, an adopted file, the one-stream fallback).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import time

from ansible_collections.ds4.fleet.plugins.module_utils._weights.file_names import (
    held_name,
    part_name,
    ranges_name,
)


def stat_or_none(path):
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _stat_key(st):
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "dev": st.st_dev}


def open_new(path):
    """PATH opened for writing as a new file: whatever was at its name (a link, a leftover) is removed
    first, and the open never follows a link."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "w", encoding="utf-8")


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def replace_text(path, text, sync=True):
    """Replace PATH with TEXT in one rename, so that a reader never sees half of it (synced first when
    `sync`). On a full disk, where no new file can be written, the file already at PATH is rewritten in
    place instead, if TEXT fits in the blocks it holds: the list of a part's ranges then still says what
    came before the disk filled, and the progress file that the fetch failed. A crash during that write
    leaves a document that does not parse, which a reader takes for none: the ranges are fetched again,
    never trusted wrongly."""
    tmp = f"{path}.tmp"
    try:
        with open_new(tmp) as f:
            f.write(text)
            f.flush()
            if sync:
                os.fsync(f.fileno())
    except OSError as e:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if e.errno != errno.ENOSPC or not _rewrite_in_place(path, text.encode(), sync):
            raise
        return
    os.replace(tmp, path)


def _rewrite_in_place(path, data, sync):
    """Write DATA over the file at PATH within the blocks it holds (padded with spaces, which JSON
    allows, to its length); False when there is no such file, or it is not a regular file of this
    process's alone with one name, or DATA needs more blocks than it has."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        own = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()
        if not own or len(data) > st.st_blocks * 512:
            return False
        os.pwrite(fd, data.ljust(st.st_size, b" "), 0)
        if sync:
            os.fsync(fd)
        return True
    finally:
        os.close(fd)


def _write_json(path, doc):
    replace_text(path, json.dumps(doc, indent=1, sort_keys=True))


def read_record(path, st):
    """The verification record beside a file, or None when absent, unreadable, about another file, or
    not this process's own: the weights' owner may write in their directory, and a record of theirs could
    vouch for any file they link in (a link, or a record that others may write, is no record either)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, encoding="utf-8") as f:
            own = os.fstat(f.fileno())
            if own.st_uid != os.geteuid() or own.st_mode & 0o022:
                return None
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or any(record.get(k) != v for k, v in _stat_key(st).items()):
        return None
    return record


def write_record(path, st, ref, sha256, commit):
    record = dict(
        _stat_key(st),
        name=ref.name,
        sha256=sha256,
        repo=ref.repo,
        revision=ref.revision,
        commit=commit,
        verified_at=round(time.time()),
    )
    _write_json(path, record)
    return record


def fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def hash_into(fd, start, length, hasher, chunk_size, on_progress=None):
    """Feed `length` bytes of file descriptor `fd` from `start` to `hasher`, through one reused buffer."""
    buf = bytearray(chunk_size)
    view = memoryview(buf)
    done = 0
    while done < length:
        n = os.preadv(fd, [view[: min(chunk_size, length - done)]], start + done)
        if not n:
            raise OSError(f"the file ended at {start + done} bytes while hashing {start + length}")
        hasher.update(view[:n])
        done += n
        if on_progress is not None:
            on_progress(start + done)


def merge(extents):
    """Sorted, merged [start, end) pairs."""
    merged = []
    for start, end in sorted(extents):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def missing(extents, size):
    """The [start, end) ranges of [0, size) that `extents` (merged) do not cover."""
    gaps, at = [], 0
    for start, end in extents:
        if start > at:
            gaps.append([at, start])
        at = max(at, end)
    if at < size:
        gaps.append([at, size])
    return gaps


class PartState:
    """The ranges of a part that are on disk for certain, kept in `.<file>.part.json`."""

    def __init__(self, path, size, sha256, etag=None, done=(), held_path=None):
        self.path, self.size, self.sha256, self.etag = path, size, sha256, etag
        self.held_path = held_path
        self.done = merge(done)

    @classmethod
    def load(cls, dest_dir, name, size, sha256):
        """The part's state for a file of `size` and `sha256`: its list if it is about that file, a prefix
        of the part's length when it has none, nothing (an empty state) when the part is of another file."""
        path = os.path.join(dest_dir, ranges_name(name))
        held = os.path.join(dest_dir, held_name(name))
        part = stat_or_none(os.path.join(dest_dir, part_name(name)))
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            doc = None
        except (OSError, ValueError):
            doc = {}
        if part is None:
            return cls(path, size, sha256, held_path=held)
        if doc is None:
            done = [[0, part.st_size]] if part.st_size <= size else []
            return cls(path, size, sha256, done=done, held_path=held)
        try:
            same = (doc["size"], doc["sha256"]) == (size, sha256)
            done = [[int(s), int(e)] for s, e in doc["done"]] if same else []
        except (KeyError, TypeError, ValueError):
            same, done = False, []
        if not same or any(e > min(size, part.st_size) for _s, e in done):
            return cls(path, size, sha256, held_path=held)
        return cls(path, size, sha256, doc.get("etag"), done, held_path=held)

    @property
    def bytes_done(self):
        return sum(end - start for start, end in self.done)

    @property
    def prefix(self):
        """Bytes on disk from byte 0 without a gap."""
        return self.done[0][1] if self.done and self.done[0][0] == 0 else 0

    def add(self, start, end):
        self.done = merge([*self.done, [start, end]])

    def save(self):
        _write_json(
            self.path, {"size": self.size, "sha256": self.sha256, "etag": self.etag, "done": self.done}
        )

    def publish(self, ranges, ended=False):
        """Tell a relay serving this part (_weights.relay) which bytes it may send (`held_path`,
        _weights.file_names' `held`): written, if not yet synced, by this process (`pid`); `ended` once the
        fetch gave up. Not synced itself: it means nothing after a crash, and the server serves from it only
        while that process lives."""
        if self.held_path:
            doc = {
                "sha256": self.sha256,
                "size": self.size,
                "held": ranges,
                "pid": os.getpid(),
                "ended": ended,
            }
            replace_text(self.held_path, json.dumps(doc), sync=False)

    def remove(self):
        held = (self.held_path, f"{self.held_path}.tmp") if self.held_path else ()
        for path in (self.path, f"{self.path}.tmp", *held):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self.done, self.etag = [], None


def part_bytes_done(dest_dir, name):
    """Bytes of `<name>.part` that a fetch would keep, whatever the file they belong to (for the plan)."""
    part = stat_or_none(os.path.join(dest_dir, part_name(name)))
    if part is None:
        return None
    try:
        with open(os.path.join(dest_dir, ranges_name(name)), encoding="utf-8") as f:
            doc = json.load(f)
        return sum(min(int(e), part.st_size) - int(s) for s, e in doc["done"] if int(s) < part.st_size)
    except FileNotFoundError:
        return part.st_size
    except (OSError, ValueError, KeyError, TypeError):
        return 0
