"""Digests of secret settings kept where others read them: keyed, so that a weak secret is not guessed.

The speed records (the local fact ds4_perf.fact, which every local user may read) and a diff keep each
ds4_extra_env value as a digest, which tells that a value changed and never the value. A plain sha256 of a
short value is found by hashing candidates until one matches; an HMAC-SHA256 under a key that only root
reads is not. Each Spark has a key of its own, made once (KEY_FILE: random, mode 0600, in a directory of
root's alone) and never shown; a key that is a link, anyone else's or readable by others is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat

from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import private_dir

KEY_FILE = "/var/lib/ds4-fleet/digest.key"
KEY_BYTES = 32
PREFIX = "hmac-sha256:"
# 64 bits of the HMAC: enough to tell one value from another; without the key they tell nothing.
DIGITS = 16


class DigestKeyError(Exception):
    pass


def keyed(value, key):
    """The digest of `value` (a string) under `key`, as records and diffs show it."""
    return PREFIX + hmac.new(key, value.encode("utf-8"), hashlib.sha256).hexdigest()[:DIGITS]


def _private(st):
    return st.st_uid == os.geteuid() and not stat.S_IMODE(st.st_mode) & 0o077


def _make(path):
    directory = os.path.dirname(path)
    if not private_dir(directory):
        raise DigestKeyError(
            f"{directory} must be a directory of the running user alone (mode 0700), not a link or anyone "
            "else's: the key of the digests of secret settings is kept there"
        )
    key = os.urandom(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return None
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
        handle.flush()
        os.fsync(handle.fileno())
    return key


def load_key(path, create=True):
    """(the key in `path`, whether this call made it). With no key there, one is made when `create`,
    else (None, False). Read through no link, and only from a regular file of the running user (root)
    that no one else may read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None, False
        key = _make(path)
        # Another run made it meanwhile: read theirs.
        return (key, True) if key is not None else load_key(path, create=False)
    except OSError as exc:
        raise DigestKeyError(
            f"the digest key {path} cannot be read (a link is refused): {exc.strerror}"
        ) from exc
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        key = handle.read()
    if not stat.S_ISREG(st.st_mode) or not _private(st) or len(key) < KEY_BYTES:
        raise DigestKeyError(
            f"the digest key {path} must be a regular file of the running user alone (mode 0600) of "
            f"{KEY_BYTES} bytes or more; remove it, and the next run makes a new one"
        )
    return key, False
