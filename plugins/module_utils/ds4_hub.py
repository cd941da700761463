"""Bring one hub file to a verified state on disk: the weight hub's protocol, with requests.

{endpoint}/{repo}/resolve/{revision}/{file} answers a HEAD with X-Repo-Commit, X-Linked-Size and
X-Linked-Etag (the LFS sha256) and redirects the GET to storage that honours Range. The file is written
to `<file>.part`, hashed as it is written, fsynced and renamed into place only once its size and sha256
match; a record `.<file>.verified.json` beside it (keyed by size, mtime_ns, inode and device) spares the
next run from hashing it again. Progress goes to a JSON file that a poller reads (see write_progress).
"""

from __future__ import annotations

import collections
import fcntl
import hashlib
import json
import os
import re
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

from ansible_collections.ds4.fleet.plugins.module_utils.ds4_disk_plan import (
    describe_bytes,
    part_name,
    sidecar_name,
)

# requests (python3-requests on Ubuntu) is a requirement on the target that Ansible does not bring: the
# modules that reach the hub fail with REQUESTS_IMPORT_ERROR as a clear message, not an import traceback.
try:
    import requests
    import urllib3
except ImportError:
    requests = urllib3 = None
    REQUESTS_IMPORT_ERROR = traceback.format_exc()
else:
    REQUESTS_IMPORT_ERROR = None

TOKEN_VAR = "ds4_hf_token"
CATALOG_VAR = "ds4_model_catalog"
# Large reads keep the per-chunk Python work (one hash update, one write) small next to the bytes moved.
CHUNK = 8 << 20
# Where only a blocking read(n) is available (urllib3 1.26): the smallest read, and the read times (s)
# below which the reads grow and above which they shrink (_body_chunks).
READ_MIN = 16 << 10
READ_QUICK = 0.05
READ_SLOW = 0.25
MAX_REDIRECTS = 10
BACKOFF_CAP = 60.0
# The hash runs on a second thread, fed HASH_BATCH bytes at a time, at most HASH_AHEAD bytes behind.
HASH_BATCH = 4 << 20
HASH_AHEAD = 64 << 20
# Bounded: a file whose content disagrees with its hash twice is a hub problem, not a transfer one.
VERIFY_ATTEMPTS = 2
USER_AGENT = "ds4-fleet/ds4_hub_file"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# What a cut or stalled transfer raises: through requests (HEAD, GET) or straight from urllib3 (body reads).
_TRANSIENT_EXC = (
    (
        requests.ConnectionError,
        requests.Timeout,
        requests.exceptions.ChunkedEncodingError,
        urllib3.exceptions.ProtocolError,
        urllib3.exceptions.ReadTimeoutError,
    )
    if requests
    else ()
)


class HubError(Exception):
    """A failure to report as is; `transient` ones are retried."""

    transient = False


class HubAuthError(HubError):
    pass


class HubNotFoundError(HubError):
    pass


class HubRangeError(HubError):
    pass


class HubTransientError(HubError):
    transient = True

    def __init__(self, message, retry_after=None):
        super().__init__(message)
        self.retry_after = retry_after


class HubMismatchError(HubError):
    pass


class NoSpaceError(HubError):
    def __init__(self, message, shortfall_bytes):
        super().__init__(message)
        self.shortfall_bytes = shortfall_bytes


@dataclass(frozen=True)
class FileRef:
    endpoint: str
    repo: str
    revision: str
    name: str

    @property
    def url(self):
        revision = quote(self.revision, safe="")
        return f"{self.endpoint.rstrip('/')}/{self.repo}/resolve/{revision}/{quote(self.name)}"

    def describe(self):
        return f"repo {self.repo}, revision {self.revision}, file {self.name} on {self.endpoint}"


@dataclass(frozen=True)
class FileMeta:
    size: int | None
    sha256: str | None
    commit: str | None
    etag: str | None


def new_session(token=""):
    session = requests.Session()
    # identity: the sizes must be the bytes on disk, never a compressed transfer's.
    session.headers.update({"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
    if token:
        # requests drops this header on a redirect to another host (the storage CDN).
        session.headers["Authorization"] = f"Bearer {token}"
    return session


def _origin(url):
    parts = urlsplit(url)
    return (
        parts.scheme,
        (parts.hostname or "").lower(),
        parts.port or {"http": 80, "https": 443}.get(parts.scheme),
    )


def raise_for_status(response, ref, authenticated):
    """Map an HTTP error to the error class an operator can act on."""
    code = response.status_code
    if code < 400:
        return
    hub_says = response.headers.get("X-Error-Code") or response.headers.get("X-Error-Message")
    why = f" ({hub_says})" if hub_says else ""
    if code in (401, 403):
        if authenticated:
            hint = f"the token in {TOKEN_VAR} was refused: use one that can read {ref.repo}"
        else:
            hint = f"the repo is gated or private: set {TOKEN_VAR} to a token that can read it"
        raise HubAuthError(f"HTTP {code}{why} for {ref.describe()}: {hint}")
    if code == 404:
        raise HubNotFoundError(
            f"not found (HTTP 404{why}): {ref.describe()}; check the repo, revision and file in {CATALOG_VAR}"
        )
    if code == 416:
        raise HubRangeError(f"HTTP 416 for a ranged request of {ref.describe()}")
    if code == 429 or code >= 500:
        retry_after = response.headers.get("Retry-After", "")
        raise HubTransientError(
            f"HTTP {code}{why} for {ref.describe()}",
            retry_after=int(retry_after) if retry_after.isdigit() else None,
        )
    raise HubError(f"HTTP {code}{why} for {ref.describe()}")


def fetch_metadata(session, ref, timeout):
    """HEAD the resolve URL, following redirects only while they stay on the hub's origin.

    The hub puts the metadata on the redirect that leaves it for storage (and the token must not follow
    it there); a hub that serves the file itself answers with Content-Length and ETag instead.
    """
    url = ref.url
    hub = _origin(url)
    for _ in range(MAX_REDIRECTS):
        response = session.head(url, allow_redirects=False, timeout=timeout)
        raise_for_status(response, ref, "Authorization" in session.headers)
        if not response.is_redirect:
            break
        target = urljoin(url, response.headers["Location"])
        if _origin(target) != hub:
            break
        url = target
    else:
        raise HubError(f"more than {MAX_REDIRECTS} redirects on the hub for {ref.describe()}")
    headers = response.headers
    size = headers.get("X-Linked-Size") or (None if response.is_redirect else headers.get("Content-Length"))
    etag = headers.get("X-Linked-Etag") or headers.get("ETag")
    if etag is not None:
        etag = etag.removeprefix("W/").strip('"')
    return FileMeta(
        size=int(size) if size is not None else None,
        sha256=etag if etag and _SHA256.match(etag) else None,
        commit=headers.get("X-Repo-Commit"),
        etag=etag,
    )


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def write_progress(path, **fields):
    """Replace the progress file in one rename, so a reader never sees half of it.

    Format (JSON object; docs/weights.md): file, state ("hashing", "fetching", "retrying", "done",
    "failed"), bytes_done, total, resumed_from (bytes on disk when this run started fetching), rate_bps
    (this run's average), eta_s (null until a rate is known), elapsed_s, attempt (try of the current
    request), error (when retrying or failed), updated (epoch seconds), pid.
    """
    if not path:
        return
    fields.update(updated=round(time.time(), 3), pid=os.getpid())
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(fields, f, sort_keys=True)
    os.replace(tmp, path)


class _Progress:
    """Throttled progress for one file: writes at most every `interval` seconds, plus state changes."""

    def __init__(self, path, name, total, interval, start_done):
        self.path, self.name, self.total, self.interval = path, name, total, interval
        self.start_done = start_done
        self.started = time.monotonic()
        self.next_at = 0.0
        self.attempt = 1

    def due(self, now):
        return self.path is not None and now >= self.next_at

    def report(self, state, done, now=None, error=None):
        now = time.monotonic() if now is None else now
        self.next_at = now + self.interval
        elapsed = now - self.started
        moved = done - self.start_done
        rate = moved / elapsed if elapsed > 0 and moved > 0 else 0.0
        fields = {
            "file": self.name,
            "state": state,
            "bytes_done": done,
            "total": self.total,
            "resumed_from": self.start_done,
            "rate_bps": round(rate),
            "eta_s": round((self.total - done) / rate, 1) if rate else None,
            "elapsed_s": round(elapsed, 1),
            "attempt": self.attempt,
        }
        if error is not None:
            fields["error"] = error
        write_progress(self.path, **fields)


class _HashBehind:
    """sha256 fed on a second thread, in order, so that hashing overlaps the socket reads and file writes.

    hashlib releases the GIL while it hashes a large buffer, so the two threads run on two cores. Chunks
    are handed over in batches, so the handoff costs little next to the bytes, and at most HASH_AHEAD
    bytes wait, so the memory stays bounded on a link that outruns the hash.
    """

    def __init__(self, hasher):
        self._hasher = hasher
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ds4-sha256")
        self._waiting = collections.deque()
        self._batch, self._batched = [], 0

    def update(self, chunk):
        self._batch.append(chunk)
        self._batched += len(chunk)
        if self._batched >= HASH_BATCH:
            self._hand_over()

    def _hand_over(self):
        if self._batch:
            self._waiting.append(self._pool.submit(_feed, self._hasher.update, self._batch))
            self._batch, self._batched = [], 0
        while len(self._waiting) > HASH_AHEAD // HASH_BATCH:
            self._waiting.popleft().result()

    def _drain(self):
        self._hand_over()
        while self._waiting:
            self._waiting.popleft().result()

    def restart(self):
        self._drain()
        self._hasher = hashlib.sha256()

    def hexdigest(self):
        self._drain()
        return self._hasher.hexdigest()

    def close(self):
        self._pool.shutdown(cancel_futures=True)


def _feed(update, chunks):
    for chunk in chunks:
        update(chunk)


def _hash_file(f, length, hasher, chunk_size, progress=None):
    """Feed the first `length` bytes of open file `f` to `hasher`, through one reused buffer."""
    buf = bytearray(chunk_size)
    view = memoryview(buf)
    f.seek(0)
    done = 0
    while done < length:
        n = f.readinto(view[: min(chunk_size, length - done)])
        if not n:
            raise HubError(f"{f.name} ended at {done} bytes while hashing {length}")
        hasher.update(view[:n])
        done += n
        if progress is not None:
            now = time.monotonic()
            if progress.due(now):
                progress.report("hashing", done, now)


def hash_path(path, chunk_size=CHUNK, progress=None):
    with open(path, "rb") as f:
        hasher = hashlib.sha256()
        _hash_file(f, os.fstat(f.fileno()).st_size, hasher, chunk_size, progress)
    return hasher.hexdigest()


def _stat_key(st):
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "dev": st.st_dev}


def read_record(path, st):
    """The verification record beside a file, or None when absent, unreadable or about another file."""
    try:
        with open(path, encoding="utf-8") as f:
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
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return record


def _fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _stat(path):
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


class HubFile:
    """One file of the hub and its place on disk: `ensure()` brings it to a verified state."""

    def __init__(
        self,
        ref,
        dest_dir,
        *,
        token="",
        expected_size=None,
        expected_sha256=None,
        progress_path=None,
        retries=5,
        retry_delay=2.0,
        timeout=30.0,
        progress_interval=2.0,
        chunk_size=CHUNK,
        session=None,
    ):
        if "/" in ref.name or ref.name.startswith("."):
            raise HubError(f"file {ref.name!r} must be a plain file name: dest is the directory it goes in")
        self.ref = ref
        self.dest_dir = dest_dir
        self.path = os.path.join(dest_dir, ref.name)
        self.part = os.path.join(dest_dir, part_name(ref.name))
        self.sidecar = os.path.join(dest_dir, sidecar_name(ref.name))
        self.progress_path = progress_path
        self.expected_size = expected_size
        self.expected_sha256 = expected_sha256.lower() if expected_sha256 else None
        self.retries, self.retry_delay, self.timeout = retries, retry_delay, timeout
        self.progress_interval, self.chunk_size = progress_interval, chunk_size
        self.authenticated = bool(token)
        self.session = session or new_session(token)
        self.attempts = 0
        self.warnings = []
        self.progress = None

    # -- helpers -----------------------------------------------------------------------------------

    def _retrying(self, what, call, progress=None, position=None):
        """Run `call` until it succeeds, retrying transient failures with capped exponential backoff.

        With `progress`, each wait is reported as state "retrying" at byte `position()`.
        """
        attempt = 0
        while True:
            self.attempts += 1
            wait = self.retry_delay * 2**attempt
            try:
                return call()
            except HubError as e:
                if not e.transient or attempt == self.retries:
                    raise
                error = str(e)
                wait = max(wait, e.retry_after or 0)
            except requests.exceptions.SSLError as e:
                # A ConnectionError to requests, but a certificate does not get better by waiting.
                raise HubError(f"{what} of {self.ref.describe()} failed: {e}") from e
            except _TRANSIENT_EXC as e:
                if attempt == self.retries:
                    raise HubTransientError(f"{what} of {self.ref.describe()} failed: {e}") from e
                error = f"{type(e).__name__}: {e}"
            attempt += 1
            if progress is not None:
                progress.attempt = attempt + 1
                progress.report("retrying", position(), error=error)
            time.sleep(min(BACKOFF_CAP, wait))

    def _record_covers(self, record):
        """Whether a valid record proves this file without asking the hub."""
        if record is None or (self.expected_size is not None and record["size"] != self.expected_size):
            return False
        if self.expected_sha256 is not None:
            return record.get("sha256") == self.expected_sha256
        # Without an expected hash only a pinned commit cannot move under the file.
        return (
            record.get("repo") == self.ref.repo
            and record.get("revision") == self.ref.revision
            and bool(_COMMIT.match(self.ref.revision))
        )

    def _target(self, meta):
        """The size and sha256 to verify against: the hub's, cross-checked with the catalog's."""
        for what, hub, expected in (
            ("size", meta.size, self.expected_size),
            ("sha256", meta.sha256, self.expected_sha256),
        ):
            if hub is not None and expected is not None and hub != expected:
                raise HubMismatchError(
                    f"the hub's {self.ref.name} at revision {self.ref.revision} (commit {meta.commit}) "
                    f"has {what} {hub}, {CATALOG_VAR} expects {expected}: update the catalog entry or pin "
                    "the revision it was taken from"
                )
        size = meta.size if meta.size is not None else self.expected_size
        sha256 = meta.sha256 or self.expected_sha256
        if size is None or sha256 is None:
            missing = "size" if size is None else "sha256"
            raise HubError(
                f"cannot verify {self.ref.describe()}: the hub gave no {missing} (ETag {meta.etag!r}) "
                f"and {CATALOG_VAR} has none"
            )
        return size, sha256

    def _result(self, action, changed, **extra):
        st = _stat(self.path)
        result = {
            "changed": changed,
            "action": action,
            "path": self.path,
            "sidecar": self.sidecar,
            "progress_file": self.progress_path,
            "attempts": self.attempts,
            "warnings": self.warnings,
            "before": self.before,
        }
        result.update(extra)
        result.setdefault("size", st.st_size if st else None)
        return result

    # -- the state machine ---------------------------------------------------------------------------

    def ensure(self, check_mode=False):
        st = _stat(self.path)
        record = read_record(self.sidecar, st) if st else None
        self.before = {
            "path": self.path,
            "size": st.st_size if st else None,
            "sha256": (record or {}).get("sha256"),
        }
        if self._record_covers(record):
            return self._verified(record, "the verification record matches the file", changed=False)
        try:
            meta = self._retrying("HEAD", lambda: fetch_metadata(self.session, self.ref, self.timeout))
        except HubError as e:
            # A hub outage must not block a host whose file was verified from this very repo and revision.
            if (
                e.transient
                and record
                and record.get("repo") == self.ref.repo
                and record.get("revision") == self.ref.revision
            ):
                self.warnings.append(f"kept the verified {self.ref.name} without checking the hub: {e}")
                return self._verified(record, "the hub could not be reached", changed=False)
            raise
        size, sha256 = self._target(meta)
        if record and record.get("sha256") == sha256 and record["size"] == size:
            return self._verified(
                record, "the hub's metadata matches the record", changed=False, commit=meta.commit
            )

        if st and st.st_size == size:
            if check_mode:
                return self._result(
                    "would_verify",
                    True,
                    sha256=sha256,
                    commit=meta.commit,
                    bytes_to_fetch=0,
                    msg=f"would hash {self.path} ({describe_bytes(size)}) and record it",
                )
            progress = _Progress(self.progress_path, self.ref.name, size, self.progress_interval, 0)
            if hash_path(self.path, self.chunk_size, progress) == sha256:
                write_record(self.sidecar, os.stat(self.path), self.ref, sha256, meta.commit)
                progress.report("done", size)
                return self._result(
                    "hashed",
                    True,
                    sha256=sha256,
                    commit=meta.commit,
                    bytes_fetched=0,
                    msg=f"{self.path} matched sha256 {sha256}; recorded it",
                )
            self.warnings.append(f"{self.path} does not match sha256 {sha256}: fetching it again")

        return self._fetch(meta, size, sha256, replaces=st is not None, check_mode=check_mode)

    def _verified(self, record, why, changed, commit=None):
        return self._result(
            "verified",
            changed,
            size=record["size"],
            sha256=record["sha256"],
            commit=commit or record.get("commit"),
            bytes_fetched=0,
            msg=f"{self.path} is verified: {why}",
        )

    def _fetch(self, meta, size, sha256, replaces, check_mode):
        part_st = _stat(self.part)
        have = part_st.st_size if part_st and part_st.st_size <= size else 0
        wanted = size - have
        free = free_bytes(self.dest_dir)
        if wanted > free:
            raise NoSpaceError(
                f"not enough space in {self.dest_dir} to fetch {self.ref.name}: it needs "
                f"{describe_bytes(wanted)}, {describe_bytes(free)} are free, short by "
                f"{describe_bytes(wanted - free)}",
                wanted - free,
            )
        if check_mode:
            verb = f"resume at byte {have:,}" if have else "fetch"
            return self._result(
                "would_resume" if have else "would_fetch",
                True,
                size=size,
                sha256=sha256,
                commit=meta.commit,
                bytes_to_fetch=wanted,
                resumed_from=have,
                msg=f"would {verb} {self.ref.name}: {describe_bytes(wanted)} from {self.ref.url}"
                + (", replacing the file in place" if replaces else ""),
            )

        started = time.monotonic()
        failures = 0
        resumed_from = None
        fetched = 0
        with open(self.part, "ab") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                raise HubError(f"another run is already fetching {self.part}") from e
            try:
                while True:
                    digest, done, start, moved = self._download(f, size)
                    resumed_from = start if resumed_from is None else resumed_from
                    fetched += moved
                    if done == size and digest == sha256:
                        break
                    failures += 1
                    f.truncate(0)
                    if failures >= VERIFY_ATTEMPTS:
                        os.unlink(self.part)
                        raise HubMismatchError(
                            f"{self.ref.describe()} came down {failures} times with sha256 {digest}, "
                            f"not {sha256} as the hub says: the part was discarded"
                        )
                    self.warnings.append(
                        f"sha256 of {self.part} was {digest}, not {sha256}: discarded it, fetching again"
                    )
                f.flush()
                os.fsync(f.fileno())
            except (HubError, OSError) as e:
                if self.progress is not None:
                    self.progress.report("failed", os.fstat(f.fileno()).st_size, error=str(e))
                raise
            os.replace(self.part, self.path)
        _fsync_dir(self.dest_dir)
        record = write_record(self.sidecar, os.stat(self.path), self.ref, sha256, meta.commit)
        self.progress.report("done", size)
        elapsed = time.monotonic() - started
        rate = round(fetched / elapsed) if elapsed > 0 else 0
        return self._result(
            "resumed" if resumed_from else "fetched",
            True,
            size=record["size"],
            sha256=sha256,
            commit=meta.commit,
            bytes_fetched=fetched,
            resumed_from=resumed_from,
            verify_failures=failures,
            elapsed_s=round(elapsed, 1),
            rate_bps=rate,
            msg=f"{self.path} fetched and verified (sha256 {sha256}), {describe_bytes(fetched)} at "
            f"{rate / 1e6:.0f} MB/s",
        )

    def _download(self, f, size):
        """Fill the open part `f` up to `size` bytes; return (sha256, bytes, start offset, bytes moved).

        The part already there is hashed once; the hash then runs along the writes, across retries.
        """
        f.flush()
        start = os.fstat(f.fileno()).st_size
        if start > size:
            f.truncate(0)
            start = 0
        self.progress = progress = _Progress(
            self.progress_path, self.ref.name, size, self.progress_interval, start
        )
        hasher = hashlib.sha256()
        if start:
            with open(self.part, "rb") as r:
                _hash_file(r, start, hasher, self.chunk_size, progress)
            progress.started = time.monotonic()
        state = {"done": start, "hasher": _HashBehind(hasher), "moved": 0}

        def attempt():
            done = state["done"]
            headers = {"Range": f"bytes={done}-"} if done else {}
            with self.session.get(
                self.ref.url, headers=headers, stream=True, timeout=self.timeout
            ) as response:
                try:
                    raise_for_status(response, self.ref, self.authenticated)
                except HubRangeError as e:
                    # The hub's file is shorter than the part: the part is not a prefix of it.
                    _restart(f, state)
                    raise HubTransientError(f"{e}; restarting from byte 0") from e
                if not _range_starts_at(response, done):
                    # The server ignored the range: take the whole body from the start.
                    _restart(f, state)
                    done = 0
                self._copy(response, f, state, done, size, progress)

        try:
            # A complete part has nothing left to ask for: its hash decides.
            if start < size:
                self._retrying("download", attempt, progress, lambda: state["done"])
            f.flush()
            return state["hasher"].hexdigest(), state["done"], start, state["moved"]
        finally:
            state["hasher"].close()

    def _copy(self, response, f, state, done, size, progress):
        """Hash and write the body as it comes (see _body_chunks)."""
        encoding = response.headers.get("Content-Encoding", "identity").lower()
        if encoding != "identity":
            raise HubError(f"{self.ref.describe()} came {encoding}-encoded though identity was asked for")
        update, write = state["hasher"].update, f.write
        due_at = progress.next_at
        first = done
        broken = None
        try:
            for chunk in _body_chunks(response.raw, self.chunk_size):
                update(chunk)
                write(chunk)
                done += len(chunk)
                if done > size:
                    break
                now = time.monotonic()
                if now >= due_at:
                    progress.report("fetching", done, now)
                    due_at = progress.next_at
        except _TRANSIENT_EXC as e:
            broken = e
        finally:
            state["done"] = done
            state["moved"] += done - first
        if done < size:
            why = f": {broken}" if broken else ""
            raise HubTransientError(
                f"the connection ended at byte {done:,} of {size:,} for {self.ref.describe()}{why}"
            ) from broken


def _body_chunks(raw, chunk_size):
    """The response body in chunks of at most chunk_size bytes, each as soon as the network gives it.

    urllib3 2's read1 returns what the socket has: large chunks when the network outruns the loop, small
    ones (and so timely progress) on a slow link, where the per-chunk cost is free. urllib3 1.26 (Debian
    12, Ubuntu 22.04) has no read1, and its read(n) waits for all n bytes: the size asked for starts at
    READ_MIN and doubles while reads come back quickly, halving when one keeps the caller waiting, so a
    slow link still reports progress and a fast one still moves large chunks.
    """
    if hasattr(raw, "read1"):
        while chunk := raw.read1(chunk_size, decode_content=False):
            yield chunk
        return
    n = READ_MIN
    while True:
        asked = time.monotonic()
        chunk = raw.read(n, decode_content=False)
        if not chunk:
            return
        yield chunk
        took = time.monotonic() - asked
        if took < READ_QUICK:
            n = min(chunk_size, n * 2)
        elif took > READ_SLOW:
            n = max(READ_MIN, n // 2)


def _restart(f, state):
    f.truncate(0)
    state["done"] = 0
    state["hasher"].restart()


def _range_starts_at(response, offset):
    if response.status_code != 206:
        return offset == 0
    match = re.match(r"bytes (\d+)-", response.headers.get("Content-Range", ""))
    return bool(match) and int(match.group(1)) == offset
