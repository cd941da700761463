"""module_utils/_common/digest.py: digests of secret settings kept where others read them, keyed per Spark."""

from __future__ import annotations

import hashlib
import hmac
import os
import stat

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._common.digest import (
    KEY_BYTES,
    DigestKeyError,
    keyed,
    load_key,
)


def test_a_digest_is_an_hmac_under_the_key_never_a_plain_sha256():
    key = b"k" * KEY_BYTES
    digest = keyed("sk-live-1", key)
    assert digest == "hmac-sha256:" + hmac.new(key, b"sk-live-1", hashlib.sha256).hexdigest()[:16]
    assert hashlib.sha256(b"sk-live-1").hexdigest()[:12] not in digest
    assert keyed("sk-live-1", b"o" * KEY_BYTES) != digest
    assert keyed("sk-live-2", key) != digest and keyed("sk-live-1", key) == digest


def test_the_key_is_made_once_root_s_alone_in_a_directory_of_root_s_alone(tmp_path):
    path = tmp_path / "ds4-fleet" / "digest.key"
    key, made = load_key(str(path))
    assert made and len(key) == KEY_BYTES
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.stat().st_uid == os.geteuid()
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert load_key(str(path)) == (key, False)


def test_without_a_key_and_not_to_make_one_there_is_none(tmp_path):
    assert load_key(str(tmp_path / "digest.key"), create=False) == (None, False)
    assert not (tmp_path / "digest.key").exists()


@pytest.mark.parametrize("case", ["link", "readable", "short", "open directory"])
def test_a_key_anyone_else_could_read_or_swap_is_refused(tmp_path, case):
    directory = tmp_path / "ds4-fleet"
    directory.mkdir(mode=0o700)
    path = directory / "digest.key"
    if case == "link":
        (tmp_path / "elsewhere").write_bytes(b"k" * KEY_BYTES)
        path.symlink_to(tmp_path / "elsewhere")
    else:
        path.write_bytes(b"k" * (KEY_BYTES if case != "short" else 4))
        path.chmod(0o644 if case == "readable" else 0o600)
    if case == "open directory":
        path.unlink()
        directory.chmod(0o755)
    with pytest.raises(DigestKeyError, match=str(path) if case != "open directory" else str(directory)):
        load_key(str(path))
