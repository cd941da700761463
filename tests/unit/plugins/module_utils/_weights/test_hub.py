"""The hub client (module_utils/ds4_hub*.py) against the hub stand-in: metadata, resume, verify, errors."""

import hashlib
import json
import os
import threading
import time

import pytest
import requests
from ansible_collections.ds4.fleet.plugins.module_utils._weights import hub as ds4_hub
from ansible_collections.ds4.fleet.plugins.module_utils._weights import progress as ds4_hub_progress
from ansible_collections.ds4.fleet.plugins.module_utils._weights import transfer as ds4_hub_transfer
from ansible_collections.ds4.fleet.plugins.module_utils._weights.hub import HubFile
from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import (
    FileRef,
    HubAuthError,
    HubMismatchError,
    HubNotFoundError,
    HubTransientError,
    NoSpaceError,
    fetch_metadata,
    new_session,
)
from waits import wait_for

BASE = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
LEGACY_BASE = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf"
DRAFTER = "DSpark-drafter-Q2K-Q8-0731.gguf"
MTP = "DeepSeek-V4-Flash-MTP-Q4K-Q8_0-F32.gguf"
GATED = "ds4-standin-gated.gguf"
TOKEN = "hf_standin_token"


def ref(hub, hub_files, name, revision="main", repo=None):
    return FileRef(hub.endpoint, repo or hub_files[name]["repo"], revision, name)


def hub_file(hub, hub_files, name, dest, **kw):
    kw.setdefault("retry_delay", 0.01)
    return HubFile(ref(hub, hub_files, name, kw.pop("revision", "main")), str(dest), **kw)


def sha256_of(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


class NoNetwork:
    """A session that fails the test if anything asks the hub."""

    headers = {}

    def head(self, *a, **kw):
        raise AssertionError("asked the hub")

    get = head


def test_metadata_comes_from_the_redirect_that_leaves_the_hub(hub, hub_files):
    for name in (BASE, LEGACY_BASE, DRAFTER, MTP):
        meta = fetch_metadata(new_session(), ref(hub, hub_files, name), 5)
        want = hub_files[name]
        assert (meta.size, meta.sha256, meta.commit) == (want["size"], want["sha256"], want["commit"])


def test_fetch_writes_verified_file_record_and_progress(hub, hub_files, tmp_path):
    want = hub_files[DRAFTER]
    result = hub_file(hub, hub_files, DRAFTER, tmp_path, progress_path=str(tmp_path / "p.json")).ensure()
    path = tmp_path / DRAFTER
    assert result["action"] == "fetched" and result["changed"] is True
    assert sha256_of(path) == want["sha256"] == result["sha256"]
    assert result["bytes_fetched"] == want["size"] and result["resumed_from"] == 0
    assert result["commit"] == want["commit"]
    assert not (tmp_path / f"{DRAFTER}.part").exists()
    record = json.loads((tmp_path / f".{DRAFTER}.verified.json").read_text())
    st = path.stat()
    assert record["sha256"] == want["sha256"] and record["commit"] == want["commit"]
    assert (record["size"], record["mtime_ns"], record["ino"]) == (st.st_size, st.st_mtime_ns, st.st_ino)
    progress = json.loads((tmp_path / "p.json").read_text())
    assert progress["state"] == "done" and progress["bytes_done"] == progress["total"] == want["size"]


def test_a_cut_at_half_resumes_in_the_same_run(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    hub.set_fault(BASE, cut_after=want["size"] // 2)
    result = hub_file(hub, hub_files, BASE, tmp_path, retries=2).ensure()
    assert result["action"] == "fetched"
    assert result["attempts"] == 3  # HEAD, the cut GET, the ranged GET
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_cut_at_half_resumes_on_the_next_run_hashing_the_part_once(hub, hub_files, tmp_path, monkeypatch):
    want = hub_files[BASE]
    half = want["size"] // 2
    hub.set_fault(BASE, cut_after=half)
    with pytest.raises(HubTransientError, match=f"ended at byte {half:,} of {want['size']:,}"):
        hub_file(hub, hub_files, BASE, tmp_path, retries=0).ensure()
    assert (tmp_path / f"{BASE}.part").stat().st_size == half
    assert not (tmp_path / BASE).exists()

    result = hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert result["action"] == "resumed"
    assert result["resumed_from"] == half and result["bytes_fetched"] == want["size"] - half
    assert result["hashed_from_disk"] == half, "the part is hashed once, the rest as it is written"
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_flipped_byte_is_caught_discarded_and_fetched_again(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    hub.set_fault(BASE, flip_offset=want["size"] // 3)
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert result["action"] == "fetched" and result["verify_failures"] == 1
    assert any("discarded it, fetching again" in w for w in result["warnings"])
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_corrupt_part_is_discarded_and_fetched_again(hub, hub_files, tmp_path):
    want = hub_files[DRAFTER]
    data = bytearray(want["path"].read_bytes()[: want["size"] // 2])
    data[100] ^= 0xFF
    (tmp_path / f"{DRAFTER}.part").write_bytes(data)
    result = hub_file(hub, hub_files, DRAFTER, tmp_path).ensure()
    assert result["verify_failures"] == 1 and result["resumed_from"] == len(data)
    assert sha256_of(tmp_path / DRAFTER) == want["sha256"]


def test_content_that_never_matches_fails_and_leaves_no_part(hub, hub_files, tmp_path):
    hub.set_fault(MTP, flip_offset=10, times=2)
    with pytest.raises(HubMismatchError, match="came down 2 times with sha256"):
        hub_file(hub, hub_files, MTP, tmp_path, progress_path=str(tmp_path / "p.json")).ensure()
    assert os.listdir(tmp_path) == ["p.json"]
    assert json.loads((tmp_path / "p.json").read_text())["state"] == "failed"


@pytest.mark.parametrize(
    "name, revision, repo, code",
    [
        ("missing.gguf", "main", "antirez/deepseek-v4-gguf", "EntryNotFound"),
        (BASE, "v9.9", "antirez/deepseek-v4-gguf", "RevisionNotFound"),
        (BASE, "main", "antirez/no-such-repo", "RepoNotFound"),
    ],
)
def test_404_names_repo_revision_and_file(hub, tmp_path, name, revision, repo, code):
    with pytest.raises(HubNotFoundError) as e:
        HubFile(FileRef(hub.endpoint, repo, revision, name), str(tmp_path)).ensure()
    for word in (f"repo {repo}", f"revision {revision}", f"file {name}", code, "HTTP 404"):
        assert word in str(e.value)
    assert os.listdir(tmp_path) == []


def test_401_says_to_set_the_token(hub, hub_files, tmp_path):
    with pytest.raises(HubAuthError, match=r"HTTP 401 .*set ds4_hf_token to a token that can read it"):
        hub_file(hub, hub_files, GATED, tmp_path).ensure()


def test_a_refused_token_says_so_and_is_never_in_the_message(hub, hub_files, tmp_path):
    with pytest.raises(HubAuthError, match=r"HTTP 403 .*the token in ds4_hf_token was refused") as e:
        hub_file(hub, hub_files, GATED, tmp_path, token="hf_wrong_token").ensure()
    assert "hf_wrong_token" not in str(e.value)


def test_the_token_opens_a_gated_repo(hub, hub_files, tmp_path):
    result = hub_file(hub, hub_files, GATED, tmp_path, token=TOKEN).ensure()
    assert result["action"] == "fetched"
    assert sha256_of(tmp_path / GATED) == hub_files[GATED]["sha256"]


def test_no_space_is_refused_before_any_byte(hub, hub_files, tmp_path, monkeypatch):
    monkeypatch.setattr(ds4_hub, "free_bytes", lambda path: 1000)
    size = hub_files[BASE]["size"]
    with pytest.raises(NoSpaceError) as e:
        hub_file(hub, hub_files, BASE, tmp_path).ensure()
    assert e.value.shortfall_bytes == size - 1000
    assert f"not enough space in {tmp_path} to fetch {BASE}: it needs {size:,} bytes" in str(e.value)
    assert os.listdir(tmp_path) == []


def test_transient_errors_are_retried(hub, hub_files, tmp_path):
    hub.set_fault(MTP, status=500, times=2)
    result = hub_file(hub, hub_files, MTP, tmp_path).ensure()
    assert result["action"] == "fetched" and result["attempts"] == 4


def test_retries_are_bounded(hub, hub_files, tmp_path):
    hub.set_fault(MTP, status=502, times=None)
    with pytest.raises(HubTransientError, match="HTTP 502"):
        hub_file(hub, hub_files, MTP, tmp_path, retries=2).ensure()


def test_check_mode_says_what_it_would_fetch_and_writes_nothing(hub, hub_files, tmp_path):
    size = hub_files[BASE]["size"]
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure(check_mode=True)
    assert (result["action"], result["bytes_to_fetch"], result["changed"]) == ("would_fetch", size, True)
    assert f"would fetch {BASE}: {size:,} bytes" in result["msg"]
    assert os.listdir(tmp_path) == []
    (tmp_path / f"{BASE}.part").write_bytes(hub_files[BASE]["path"].read_bytes()[:1000])
    result = hub_file(hub, hub_files, BASE, tmp_path).ensure(check_mode=True)
    assert (result["action"], result["bytes_to_fetch"], result["resumed_from"]) == (
        "would_resume",
        size - 1000,
        1000,
    )


def test_a_recorded_file_is_neither_hashed_nor_fetched_again(hub, hub_files, tmp_path, monkeypatch):
    want = hub_files[DRAFTER]
    hub_file(hub, hub_files, DRAFTER, tmp_path).ensure()
    monkeypatch.setattr(ds4_hub, "hash_into", lambda *a, **kw: pytest.fail("hashed again"))
    # Expected hash given: the record suffices, the hub is not asked.
    result = hub_file(
        hub, hub_files, DRAFTER, tmp_path, expected_sha256=want["sha256"], session=NoNetwork()
    ).ensure()
    assert (result["action"], result["changed"]) == ("verified", False)
    # A branch without an expected hash: the hub is asked (it may have moved), the file is not hashed.
    result = hub_file(hub, hub_files, DRAFTER, tmp_path).ensure()
    assert (result["action"], result["changed"], result["commit"]) == ("verified", False, want["commit"])


def test_a_pinned_commit_needs_no_hub(hub, hub_files, tmp_path):
    commit = hub_files[MTP]["commit"]
    hub_file(hub, hub_files, MTP, tmp_path, revision=commit).ensure()
    result = hub_file(hub, hub_files, MTP, tmp_path, revision=commit, session=NoNetwork()).ensure()
    assert result["action"] == "verified"


def test_a_changed_file_is_noticed(hub, hub_files, tmp_path):
    hub_file(hub, hub_files, MTP, tmp_path).ensure()
    path = tmp_path / MTP
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))
    assert hub_file(hub, hub_files, MTP, tmp_path).ensure()["action"] == "hashed"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(data)
    result = hub_file(hub, hub_files, MTP, tmp_path).ensure()
    assert result["action"] == "fetched" and any("does not match" in w for w in result["warnings"])
    assert sha256_of(path) == hub_files[MTP]["sha256"]


def test_an_adopted_file_is_hashed_once_not_downloaded(hub, hub_files, tmp_path):
    (tmp_path / DRAFTER).write_bytes(hub_files[DRAFTER]["path"].read_bytes())
    result = hub_file(hub, hub_files, DRAFTER, tmp_path).ensure()
    assert (result["action"], result["bytes_fetched"]) == ("hashed", 0)
    assert hub_file(hub, hub_files, DRAFTER, tmp_path).ensure()["action"] == "verified"


def test_a_hub_outage_keeps_a_verified_file(hub, hub_files, tmp_path):
    hub_file(hub, hub_files, MTP, tmp_path).ensure()
    down = HubFile(
        FileRef("http://127.0.0.1:1", hub_files[MTP]["repo"], "main", MTP), str(tmp_path), retries=0
    )
    result = down.ensure()
    assert result["action"] == "verified"
    assert "without checking the hub" in result["warnings"][0]


def test_the_catalog_must_agree_with_the_hub(hub, hub_files, tmp_path):
    with pytest.raises(HubMismatchError, match=r"has sha256 [0-9a-f]{64}, ds4_model_catalog expects 0{64}"):
        hub_file(hub, hub_files, MTP, tmp_path, expected_sha256="0" * 64).ensure()
    with pytest.raises(HubMismatchError, match=r"has size \d+, ds4_model_catalog expects 5"):
        hub_file(hub, hub_files, MTP, tmp_path, expected_size=5).ensure()


def while_fetching(worker, check, what):
    """wait_for(check) while the fetch runs: a fetch that ends first fails at once (60 s: a hang guard)."""

    def look():
        assert worker.is_alive(), f"the fetch ended before {what}"
        return check()

    return wait_for(what, look, timeout=60, interval=0.02)


def wait_for_record(progress, worker, wanted, what):
    """The first progress record that `wanted` accepts, read while the fetch runs."""

    def record():
        found = json.loads(progress.read_text()) if progress.exists() else None
        return found if found and wanted(found) else None

    return while_fetching(worker, record, f"a progress record of {what}")


def test_progress_is_written_during_a_fetch_and_again_while_it_waits(hub, hub_files, tmp_path):
    size = hub_files[MTP]["size"]
    half = size // 2
    # One connection; the hub sends half the file, then holds the transfer until the test releases it: the
    # fetch stays midway for as long as the test looks, however fast or loaded the machine (the read
    # timeout is only a hang guard).
    hub.set_fault(MTP, hold_after=half)
    progress = tmp_path / "p.json"
    fetch = hub_file(
        hub, hub_files, MTP, tmp_path, connections=1, progress_path=str(progress), progress_interval=0.1,
        timeout=3600,
    )  # fmt: skip
    worker = threading.Thread(target=fetch.ensure)
    worker.start()
    try:
        midway = wait_for_record(
            progress, worker, lambda p: p["state"] == "fetching" and p["bytes_done"] == half, "half the file"
        )
        # Not only when bytes arrive or the state changes: a stalled transfer is seen to be stalled.
        later = wait_for_record(
            progress, worker, lambda p: p["updated"] > midway["updated"], "a later record while it waits"
        )
    finally:
        hub.release(MTP)
        worker.join()
    for p in (midway, later):
        assert (p["state"], p["bytes_done"], p["total"], p["file"]) == ("fetching", half, size, MTP), p
        # The time left is what remains at the rate so far.
        assert p["rate_bps"] > 0 and p["eta_s"] == pytest.approx(
            (size - half) / p["rate_bps"], rel=0.01, abs=0.1
        ), p
    assert later["elapsed_s"] >= midway["elapsed_s"] and later["rate_bps"] <= midway["rate_bps"], later
    assert json.loads(progress.read_text())["state"] == "done"
    assert sha256_of(tmp_path / MTP) == hub_files[MTP]["sha256"]


class _Urllib3v1Body:
    """A response body as urllib3 1.26 (Debian 12's python3-urllib3) offers it: read(n), no read1."""

    def __init__(self, raw, reads):
        self._raw, self._reads = raw, reads

    def read(self, amt=None, decode_content=None):
        self._reads.append(amt)
        return self._raw.read(amt, decode_content=decode_content)

    def __getattr__(self, name):
        if name in ("read1", "_fp"):  # nothing to read into a buffer: read(n) alone
            raise AttributeError(name)
        return getattr(self._raw, name)


def test_a_body_without_read1_is_read_from_small_blocks_and_still_resumes(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    hub.set_fault(BASE, cut_after=want["size"] // 2)
    reads = []
    session = new_session()
    session.hooks["response"].append(lambda r, *a, **kw: setattr(r, "raw", _Urllib3v1Body(r.raw, reads)))
    result = hub_file(hub, hub_files, BASE, tmp_path, retries=2, session=session).ensure()
    assert result["action"] == "fetched" and result["attempts"] == 3
    assert result["bytes_fetched"] == want["size"]
    assert sha256_of(tmp_path / BASE) == want["sha256"]
    assert reads[0] == ds4_hub_transfer.READ_MIN, "small first (how it grows: test_ds4_hub_transfer.py)"


def test_a_body_without_read1_still_reports_progress_while_a_read_waits(hub, hub_files, tmp_path):
    size = hub_files[BASE]["size"]
    half = size // 2
    # The hub holds the transfer at half the file: the fetch's read(n) waits there with part of its n
    # bytes, until the test releases it (the read timeout is only a hang guard).
    hub.set_fault(BASE, hold_after=half)
    session = new_session()
    session.hooks["response"].append(lambda r, *a, **kw: setattr(r, "raw", _Urllib3v1Body(r.raw, [])))
    progress = tmp_path / "p.json"
    fetch = hub_file(
        hub, hub_files, BASE, tmp_path, connections=1, progress_path=str(progress), progress_interval=0.1,
        session=session, timeout=3600,
    )  # fmt: skip
    worker = threading.Thread(target=fetch.ensure)
    worker.start()
    try:
        while_fetching(worker, lambda: hub.holds()[BASE]["waiting"], "the transfer reaching its hold")
        held_since = time.time()
        waiting = wait_for_record(
            progress, worker, lambda p: p["updated"] > held_since, "a record while the read waits"
        )
    finally:
        hub.release(BASE)
        worker.join()
    assert waiting["state"] == "fetching" and 0 < waiting["bytes_done"] <= half, waiting
    assert json.loads(progress.read_text())["state"] == "done"
    assert sha256_of(tmp_path / BASE) == hub_files[BASE]["sha256"]


def test_a_server_that_ignores_the_range_is_taken_from_byte_0(hub, hub_files, tmp_path):
    want = hub_files[BASE]
    half = want["size"] // 2
    (tmp_path / f"{BASE}.part").write_bytes(hub_files[BASE]["path"].read_bytes()[:half])

    class NoRanges(requests.Session):
        def get(self, url, headers=None, **kw):
            return super().get(url, headers={k: v for k, v in (headers or {}).items() if k != "Range"}, **kw)

    session = NoRanges()
    session.headers.update(new_session().headers)
    result = hub_file(hub, hub_files, BASE, tmp_path, session=session).ensure()
    assert result["action"] == "resumed" and result["resumed_from"] == half
    assert result["bytes_fetched"] == want["size"], "the whole body, from byte 0, replaced the part"
    assert sha256_of(tmp_path / BASE) == want["sha256"]


def test_a_link_at_the_part_is_never_written_through(hub, hub_files, tmp_path):
    # A link planted at <name>.part would have the fetch write the model's bytes wherever it points.
    target = tmp_path / "elsewhere"
    target.write_bytes(b"root's own file\n")
    target.chmod(0o600)
    (tmp_path / f"{MTP}.part").symlink_to(target)
    with pytest.raises(ds4_hub.HubError, match=r"\.part is a symbolic link: refusing to write through it"):
        hub_file(hub, hub_files, MTP, tmp_path).ensure()
    assert target.read_bytes() == b"root's own file\n"
    assert not (tmp_path / MTP).exists()


def test_a_flock_on_the_part_stops_no_fetch_and_the_run_s_lock_names_its_holder(
    hub, hub_files, tmp_path, monkeypatch
):
    # Any user may open another owner's 0644 part and flock it: the fetch must not depend on that.
    import fcntl

    lock_dir = tmp_path / "run-ds4-fleet"
    monkeypatch.setattr(ds4_hub, "LOCK_DIR", str(lock_dir))

    want = hub_files[MTP]
    part = tmp_path / f"{MTP}.part"
    part.write_bytes(b"")
    part.chmod(0o644)
    fd = os.open(part, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        result = hub_file(hub, hub_files, MTP, tmp_path).ensure()
    finally:
        os.close(fd)
    assert result["action"] == "fetched" and sha256_of(tmp_path / MTP) == want["sha256"]
    locks = list(lock_dir.glob("part-*.lock"))
    assert len(locks) == 1 and oct(lock_dir.stat().st_mode & 0o777) == "0o700"
    assert oct(locks[0].stat().st_mode & 0o777) == "0o600"
    (tmp_path / MTP).unlink()
    fd = os.open(locks[0], os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        held_by = rf"already fetching .*\.part: .* held by pid {os.getpid()} "
        with pytest.raises(ds4_hub.HubError, match=held_by):
            hub_file(hub, hub_files, MTP, tmp_path).ensure()
    finally:
        os.close(fd)


def test_a_link_at_a_record_is_replaced_never_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep\n")
    record = tmp_path / "progress.json"
    (tmp_path / "progress.json.tmp").symlink_to(target)
    ds4_hub_progress.write_progress(str(record), state="fetching")
    assert target.read_text() == "keep\n"
    assert json.loads(record.read_text())["state"] == "fetching"


# --- issue 26 point 6: an adopted file is opened once, then hashed, stat-ed, chowned through that descriptor


def test_an_adopted_file_is_owned_through_the_descriptor_that_was_hashed(
    hub, hub_files, tmp_path, monkeypatch
):
    if os.geteuid() != 0:
        pytest.skip("chowning to another user needs root")
    path = tmp_path / DRAFTER
    path.write_bytes(hub_files[DRAFTER]["path"].read_bytes())
    path.chmod(0o600)
    hashed, owned = [], []
    real_hash_into, real_fchown = ds4_hub.hash_into, os.fchown

    def hash_into(fd, *args, **kwargs):
        hashed.append(os.fstat(fd).st_ino)
        return real_hash_into(fd, *args, **kwargs)

    def fchown(fd, uid, gid):
        owned.append(os.fstat(fd).st_ino)
        real_fchown(fd, uid, gid)

    monkeypatch.setattr(ds4_hub, "hash_into", hash_into)
    monkeypatch.setattr(os, "fchown", fchown)
    for name in ("chown", "lchown", "chmod", "lchmod"):
        monkeypatch.setattr(os, name, lambda *a, **k: pytest.fail("changed by path"), raising=False)
    result = hub_file(hub, hub_files, DRAFTER, tmp_path, uid=65534, gid=65534, mode=0o644).ensure()
    assert (result["action"], result["changed"]) == ("hashed", True)
    assert hashed == owned == [path.stat().st_ino]
    assert (path.stat().st_uid, path.stat().st_gid, path.stat().st_mode & 0o777) == (65534, 65534, 0o644)


def test_a_link_beyond_the_roles_own_is_refused_before_hash_or_chown(hub, hub_files, tmp_path):
    # The roles link a file used in place into the directory; its owner swaps the file for a link.
    installer = tmp_path / "home" / "gguf"
    installer.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_bytes(hub_files[DRAFTER]["path"].read_bytes())
    victim.chmod(0o600)
    (installer / DRAFTER).symlink_to(victim)
    dest = tmp_path / "gguf"
    dest.mkdir()
    (dest / DRAFTER).symlink_to(installer / DRAFTER)
    with pytest.raises(ds4_hub.HubError, match=rf"{DRAFTER} is a symbolic link: refusing to go through it"):
        hub_file(hub, hub_files, DRAFTER, dest, uid=65534, gid=65534, mode=0o644).ensure()
    assert victim.stat().st_mode & 0o777 == 0o600 and not (dest / f".{DRAFTER}.verified.json").exists()
    # The roles' own link to the installer's file itself is followed, once.
    (installer / DRAFTER).unlink()
    victim.rename(installer / DRAFTER)
    assert hub_file(hub, hub_files, DRAFTER, dest).ensure()["action"] == "hashed"


def test_a_record_root_did_not_write_is_not_trusted(hub, hub_files, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("a record of another user needs root to make")
    hub_file(hub, hub_files, DRAFTER, tmp_path).ensure()
    # The weights' owner may write in the directory: a record of theirs could name any file they link in.
    os.chown(tmp_path / f".{DRAFTER}.verified.json", 65534, 65534)
    assert hub_file(hub, hub_files, DRAFTER, tmp_path).ensure()["action"] == "hashed"
    assert hub_file(hub, hub_files, DRAFTER, tmp_path).ensure()["action"] == "verified"
