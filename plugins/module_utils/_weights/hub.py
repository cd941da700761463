"""Bring one hub file to a verified state on disk (module ds4_hub_file).

The file is fetched into `<file>.part` over several connections (_weights.transfer), hashed as it comes,
synced and renamed into place only once its size and sha256 match; nothing unverified is ever under the
file's name. A record beside it (_weights.records) spares the next run from hashing it again; progress goes
to a JSON file that a poller reads (_weights.progress). The protocol is in _weights.protocol.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import time
from urllib.parse import quote

from ansible_collections.ds4.fleet.plugins.module_utils._common.bytes import describe_bytes
from ansible_collections.ds4.fleet.plugins.module_utils._common.commit import is_pinned_revision
from ansible_collections.ds4.fleet.plugins.module_utils._common.flock import (
    LOCK_DIR,
    LockBusy,
    acquire,
    open_lock,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import (
    UnsafePath,
    open_file,
    set_attributes,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.file_names import part_name, sidecar_name
from ansible_collections.ds4.fleet.plugins.module_utils._weights.progress import Progress
from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import (
    CATALOG_VAR,
    TRANSIENT_EXC,
    HubChangedError,
    HubError,
    HubMismatchError,
    NoSpaceError,
    fetch_metadata,
    new_session,
    retrying,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.records import (
    PartState,
    free_bytes,
    fsync_dir,
    hash_into,
    read_record,
    stat_or_none,
    write_record,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.relay import RELAY_START
from ansible_collections.ds4.fleet.plugins.module_utils._weights.transfer import (
    CONNECTIONS,
    HASH_WINDOW,
    PIECE,
    RangesIgnored,
    RunGone,
    Transfer,
)

# Large reads keep the per-chunk Python work small next to the bytes, when a file in place is hashed.
CHUNK = 8 << 20
# A peer is on the LAN: one that does not answer within this many seconds is given up for the next source.
PEER_TIMEOUT = 10.0
# A peer that has sent no byte for this many seconds while it says "not yet" (a relay whose own fetch has
# not begun, or is stalled; or a local user's server on the peer port) is given up for the next source:
# longer than a relay waits for its own fetch to begin (_weights.relay.RELAY_START).
PEER_STALL = RELAY_START + 30.0
# Bounded: a file whose content disagrees with its hash twice, or that changes twice under the transfer,
# is a hub problem, not a transfer one.
VERIFY_ATTEMPTS = 2


def hash_fd(fd, chunk_size=CHUNK, progress=None):
    """The sha256 of the open file `fd`, reported as state "hashing" on `progress`."""
    hasher = hashlib.sha256()
    size = os.fstat(fd).st_size

    def report(done):
        now = time.monotonic()
        if progress is not None and progress.due(now):
            progress.report("hashing", done, now)

    hash_into(fd, 0, size, hasher, chunk_size, report)
    return hasher.hexdigest()


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
        connections=CONNECTIONS,
        ramp=True,
        piece=PIECE,
        hash_window=HASH_WINDOW,
        peers=(),
        peer_token=None,
        session=None,
        heartbeat=None,
        uid=None,
        gid=None,
        mode=None,
    ):
        if "/" in ref.name or ref.name.startswith("."):
            raise HubError(f"file {ref.name!r} must be a plain file name: dest is the directory it goes in")
        if connections < 1 or piece < 1 or hash_window < 0:
            raise HubError("connections and piece must be positive, hash_window not negative")
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
        self.connections, self.piece, self.hash_window = connections, piece, hash_window
        # Grow the connections up to `connections` while the rate gains from them (Ramp); off: all at once.
        self.ramp = ramp
        # Base URLs of Sparks serving their verified copies (_weights.relay), tried in order before the hub.
        self.peers = list(peers)
        # The run's token (_weights.relay.RUN_HEADER): a peer's answer without it is a stranger's on its port.
        self.peer_token = peer_token
        # The run's _weights.heartbeat.Heartbeat (or None): a transfer whose run is gone stops (RunGone).
        self.heartbeat = heartbeat
        self._token = token
        self.session = session or new_session(token)
        # Content GETs: without the token (Transfer adds it for the hub's own origin only).
        self._content_session = (lambda: session) if session is not None else new_session
        self._peer_session = (lambda: session) if session is not None else lambda: new_session(direct=True)
        # The file's owner, group and mode once verified (None: as it is), set through its descriptor.
        self.uid, self.gid, self.mode = uid, gid, mode
        self.attempts = 0
        self._moved_from = {}
        self.warnings = []
        self.progress = None
        self.before = None

    # -- helpers -----------------------------------------------------------------------------------

    def _count(self):
        self.attempts += 1

    def _metadata(self):
        return retrying(
            lambda: fetch_metadata(self.session, self.ref, self.timeout), what="HEAD", ref=self.ref,
            retries=self.retries, delay=self.retry_delay, count=self._count,
        )  # fmt: skip

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
            and is_pinned_revision(self.ref.revision)
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
        st = stat_or_none(self.path)
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
        """Bring the file to a verified state. A file already there (adopted, fetched before) is opened
        once, never through a link but the one the roles make for a file used in place, and hashed,
        stat-ed, chowned and chmodded through that one descriptor: whatever lies at its path meanwhile
        is never what gets owned."""
        try:
            fd = open_file(self.path, follow_last_link=True)
        except FileNotFoundError:
            fd = None
        except UnsafePath as e:
            raise HubError(str(e)) from e
        try:
            return self._ensure(fd, check_mode)
        finally:
            if fd is not None:
                os.close(fd)

    def _own(self, fd, check_mode, changed):
        """Whether anything changed, with the owner, group and mode set through `fd` where they differ."""
        return set_attributes(fd, self.uid, self.gid, self.mode, check_mode)[0] or changed

    def _ensure(self, fd, check_mode):
        st = os.fstat(fd) if fd is not None else None
        record = read_record(self.sidecar, st) if st else None
        self.before = {
            "path": self.path,
            "size": st.st_size if st else None,
            "sha256": (record or {}).get("sha256"),
        }
        if self._record_covers(record):
            changed = self._own(fd, check_mode, False)
            return self._verified(record, "the verification record matches the file", changed=changed)
        try:
            meta = self._metadata()
        except HubError as e:
            # A hub outage must not block a host whose file was verified from this very repo and revision.
            if (
                e.transient
                and record
                and record.get("repo") == self.ref.repo
                and record.get("revision") == self.ref.revision
            ):
                self.warnings.append(f"kept the verified {self.ref.name} without checking the hub: {e}")
                changed = self._own(fd, check_mode, False)
                return self._verified(record, "the hub could not be reached", changed=changed)
            raise
        size, sha256 = self._target(meta)
        if record and record.get("sha256") == sha256 and record["size"] == size:
            changed = self._own(fd, check_mode, False)
            return self._verified(
                record, "the hub's metadata matches the record", changed=changed, commit=meta.commit
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
            progress = Progress(self.progress_path, self.ref.name, size, self.progress_interval, 0)
            if hash_fd(fd, self.chunk_size, progress) == sha256:
                set_attributes(fd, self.uid, self.gid, self.mode)
                write_record(self.sidecar, os.fstat(fd), self.ref, sha256, meta.commit)
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
        state = PartState.load(self.dest_dir, self.ref.name, size, sha256)
        have = state.bytes_done
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
            verb = f"resume with {have:,} bytes on disk" if have else "fetch"
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
        outcome, st = self._fill_part(meta, state)
        os.replace(self.part, self.path)
        state.remove()
        fsync_dir(self.dest_dir)
        record = write_record(self.sidecar, st, self.ref, sha256, meta.commit)
        self.progress.report("done", size)
        elapsed = time.monotonic() - started
        fetched = outcome["bytes_fetched"]
        rate = round(fetched / elapsed) if elapsed > 0 else 0
        return self._result(
            "resumed" if have else "fetched",
            True,
            size=record["size"],
            sha256=sha256,
            commit=meta.commit,
            resumed_from=have,
            elapsed_s=round(elapsed, 1),
            rate_bps=rate,
            msg=f"{self.path} fetched and verified (sha256 {sha256}), {describe_bytes(fetched)} at "
            f"{rate / 1e6:.0f} MB/s over {outcome['connections']} connection(s)",
            **outcome,
        )

    def _fill_part(self, meta, state):
        """Fill the part under an exclusive lock, never through a link, and give it its owner and mode
        through the same descriptor before it takes the file's name; the transfer's outcome and the
        part's stat. The lock is a file of root's alone (_common.flock), not the part: any user may open a
        part of another owner's 0644 and hold an flock on it, and no fetch of that file would ever run."""
        lock_name = "part-" + hashlib.sha256(self.part.encode()).hexdigest()[:16] + ".lock"
        lock_path = os.path.join(LOCK_DIR, lock_name)
        try:
            lock = open_lock(lock_path)
        except LockBusy as e:
            raise HubError(str(e)) from e
        try:
            try:
                acquire(lock, lock_path, f"the lock of {self.part}", 0)
            except LockBusy as e:
                raise HubError(f"another run is already fetching {self.part}: {e}") from e
            return self._fill_locked_part(meta, state)
        finally:
            os.close(lock)

    def _fill_locked_part(self, meta, state):
        try:
            # Never through a link: the bytes would land wherever it points.
            fd = os.open(self.part, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise HubError(
                    f"{self.part} is a symbolic link: refusing to write through it; remove it to fetch "
                    f"{self.ref.name} afresh"
                ) from e
            raise
        try:
            outcome = self._fill(fd, meta, state)
            set_attributes(fd, self.uid, self.gid, self.mode)
            os.fsync(fd)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return outcome, st

    def _transfer(self, fd, state, location, **kw):
        kw = {
            "relocate": lambda: self._metadata().location, "connections": self.connections, "ramp": self.ramp,
            "retries": self.retries, "timeout": self.timeout, "session_factory": self._content_session,
            "heartbeat": self.heartbeat, **kw,
        }  # fmt: skip
        return Transfer(
            ref=self.ref, location=location, fd=fd, state=state,
            token=self._token, piece=self.piece, window=self.hash_window, retry_delay=self.retry_delay,
            progress=self.progress, count=self._count, dest_dir=self.dest_dir, **kw,
        )  # fmt: skip

    def _fill(self, fd, meta, state):
        """Fill the locked part until its sha256 matches, from the peers first, then from the hub."""
        if not state.done:
            os.ftruncate(fd, 0)  # a part of another file, or none
        # From here on the part is written out of order: only its list says which bytes are there.
        state.save()
        self.progress = Progress(
            self.progress_path, self.ref.name, state.size, self.progress_interval, state.bytes_done
        )
        # Written before the first byte: on a disk that fills, it is there to be rewritten as failed.
        self.progress.report("fetching", state.bytes_done)
        self._moved_from = {}
        try:
            for peer in self.peers:
                outcome = self._fill_from_peer(fd, state, peer)
                if outcome is not None:
                    return outcome
            return self._fill_from_hub(fd, meta, state)
        except (HubError, OSError) as e:
            self.progress.report("failed", state.bytes_done, error=str(e))
            # A relay serving this part (_weights.relay) stops waiting for bytes that will not come (a part
            # discarded took its list with it: the relay has seen it go).
            if os.path.exists(self.part):
                with contextlib.suppress(OSError):
                    state.publish(state.done, ended=True)
            raise

    def _outcome(self, transfer, source, failures=0, reread=0):
        self._moved_from[source] = self._moved_from.get(source, 0) + transfer.moved
        return {
            "bytes_fetched": sum(self._moved_from.values()),
            "bytes_from": dict(self._moved_from),
            "source": source,
            "verify_failures": failures,
            "connections": transfer.used_connections,
            "hashed_from_disk": reread,
        }

    def _fill_from_peer(self, fd, state, peer):
        """The outcome when `peer` gave the whole verified file, else None (the ranges it gave are kept
        unless its bytes fail the hash): a dead, refusing or wrong peer costs a try of the next source."""
        location = f"{peer.rstrip('/')}/{quote(self.ref.name)}"
        transfer = self._transfer(
            fd, state, location, relocate=None, peer_sha256=state.sha256, retries=min(self.retries, 1),
            timeout=min(self.timeout, PEER_TIMEOUT), session_factory=self._peer_session, stall=PEER_STALL,
            peer_token=self.peer_token,
        )  # fmt: skip
        try:
            digest, reread = transfer.run()
        except (NoSpaceError, RunGone):
            raise
        except (HubError, RangesIgnored, OSError, *TRANSIENT_EXC) as e:
            self._outcome(transfer, peer)
            self.warnings.append(f"the peer {peer} failed for {self.ref.name} ({e}): trying the next source")
            return None
        outcome = self._outcome(transfer, peer, reread=reread)
        if digest == state.sha256:
            return outcome
        self.warnings.append(
            f"the copy of {self.ref.name} from the peer {peer} had sha256 {digest}, not {state.sha256}: "
            "discarded it, trying the next source"
        )
        state.remove()
        os.ftruncate(fd, 0)
        state.save()
        return None

    def _fill_from_hub(self, fd, meta, state):
        sha256 = state.sha256
        failures = changes = reread = 0
        one_stream = False
        location = meta.location or self.ref.url
        while True:
            transfer = self._transfer(fd, state, location, connections=1 if one_stream else self.connections)
            try:
                digest, hashed_again = transfer.run(one_stream=one_stream)
            except RangesIgnored as e:
                self._outcome(transfer, "hub")
                one_stream = True
                self.warnings.append(f"the storage ignores byte ranges ({e}): fetching over one connection")
                continue
            except HubChangedError as e:
                self._outcome(transfer, "hub")
                changes += 1
                if changes >= VERIFY_ATTEMPTS:
                    raise
                self.warnings.append(f"{e}: discarded the part, starting over")
                state.remove()
                os.ftruncate(fd, 0)
                location = self._metadata().location or self.ref.url
                continue
            reread += hashed_again
            outcome = self._outcome(transfer, "hub", failures, reread)
            if digest == sha256:
                return outcome
            failures += 1
            state.remove()
            os.ftruncate(fd, 0)
            if failures >= VERIFY_ATTEMPTS:
                os.unlink(self.part)
                raise HubMismatchError(
                    f"{self.ref.describe()} came down {failures} times with sha256 {digest}, "
                    f"not {sha256} as the hub says: the part was discarded"
                )
            self.warnings.append(
                f"sha256 of {self.part} was {digest}, not {sha256}: discarded it, fetching again"
            )
