"""The record of the last finished run on a Spark, and whether the Spark is still as that run left it.

A run of site.yml that ends without a failure records what it applied: the fingerprint of its inputs
(module ds4_settings_check: every public setting as the play templates it, and the collection's own
files) and the state of what it manages (files with their content, owner and mode; links; directories;
the units' states). The next run compares: the same fingerprint, nothing drifted and the engine
answering means nothing is to change, and the run can skip to its end. Anything else (a changed
setting, a new collection, an edited file, a stopped unit, a missing weight file, no record) takes the
whole run, which first removes the record, so that a run that fails half-way leaves none behind.

Files up to HASH_LIMIT bytes are compared by content; larger ones (weights, the engine's binary) by size,
modification time and inode, as the weights' own verification records do.
"""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import os
import pwd
import stat

from ansible_collections.ds4.fleet.plugins.module_utils._common.digest import (
    KEY_FILE,
    DigestKeyError,
    keyed,
    load_key,
)
from ansible_collections.ds4.fleet.plugins.module_utils._common.redact import URLS, url
from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import (
    AGENT_STATUS,
    EngineUnreachable,
    ProbeError,
    engine_url,
    read_stats,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import (
    private_dir,
    read_object,
    replace_file,
)

# Files larger than this are compared by size, time and inode, not read.
HASH_LIMIT = 16 * 1024 * 1024
RECORD_VERSION = 1


# The options of the module ds4_applied but its state, which the module ds4_run_lock takes too
# (unless_unchanged): the record, the run's inputs, what is compared and where the engine answers.
OPTIONS = {
    "path": {"type": "path", "default": "/var/lib/ds4-fleet/applied.json"},
    "fingerprint": {"type": "str", "required": True},
    "secrets": {"type": "dict", "default": {}, "no_log": True},
    "digest_key": {"type": "path", "default": KEY_FILE},
    "paths": {"type": "list", "elements": "path", "default": []},
    "trees": {"type": "list", "elements": "path", "default": []},
    "units": {"type": "list", "elements": "str", "default": []},
    "user": {"type": "str", "default": "ds4"},
    "host": {"type": "str", "default": "127.0.0.1"},
    "port": {"type": "int", "default": 8000},
    "engine_answers": {"type": "bool", "default": True},
}

# What of the collection shapes a run: a new version of any of these files takes the whole run.
COLLECTION_PARTS = ("roles", "plugins", "playbooks")


class AppliedError(Exception):
    pass


def collection_digest(root):
    """sha256 over the names and contents of the collection's files that shape a run (not its bytecode)."""
    digest = hashlib.sha256()
    for part in COLLECTION_PARTS:
        for directory, dirs, files in os.walk(os.path.join(root, part)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith(".pyc"):
                    continue
                path = os.path.join(directory, name)
                with open(path, "rb") as handle:
                    digest.update(f"{os.path.relpath(path, root)}\0".encode())
                    digest.update(hashlib.sha256(handle.read()).digest())
    return digest.hexdigest()


def fingerprint(values, collection_root, secret_names=()):
    """The inputs of a run in one digest: every public setting as the play templates it, and the
    collection's own files. The settings named in SECRET_NAMES are left out, and a URL's userinfo
    (_common.redact.URLS): a plain sha256 over a weak secret and settings one can read elsewhere gives the
    secret away to a few guesses. The secrets reach the Spark's record by keyed digest alone
    (keyed_fingerprint)."""
    plain = {
        name: None
        if name in secret_names
        else url(value)
        if name in URLS and isinstance(value, str)
        else value
        for name, value in values.items()
    }
    settings = json.dumps(plain, sort_keys=True, default=str)
    return hashlib.sha256(f"{settings}\0{collection_digest(collection_root)}".encode()).hexdigest()


def keyed_fingerprint(fingerprint_, secrets, key):
    """The fingerprint a Spark records and compares: the run's FINGERPRINT and its SECRETS (setting ->
    value) under the Spark's digest key (_common.digest.keyed), never a plain digest of a secret."""
    return f"{fingerprint_}+{keyed(json.dumps(secrets, sort_keys=True, default=str), key)}"


def _entry(path):
    """One path's state: a link's target, a directory's or a file's owner and mode, a file's content."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"missing": True}
    owner = {"uid": st.st_uid, "gid": st.st_gid, "mode": stat.S_IMODE(st.st_mode)}
    if stat.S_ISLNK(st.st_mode):
        return {"link": os.readlink(path)}
    if stat.S_ISDIR(st.st_mode):
        return {"dir": True, **owner}
    if not stat.S_ISREG(st.st_mode):
        return {"special": stat.S_IFMT(st.st_mode), **owner}
    if st.st_size > HASH_LIMIT:
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, **owner}
    digest = hashlib.sha256()
    # Never waiting on what was put at the path since the lstat (a FIFO would hold the run lock for good,
    # issue 55): opened without blocking, and read only while it is still a regular file.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return {"missing": True}
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return {"link": os.readlink(path)}
        raise
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            owner = {"uid": st.st_uid, "gid": st.st_gid, "mode": stat.S_IMODE(st.st_mode)}
            return (
                {"dir": True, **owner}
                if stat.S_ISDIR(st.st_mode)
                else {"special": stat.S_IFMT(st.st_mode), **owner}
            )
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    owner = {"uid": st.st_uid, "gid": st.st_gid, "mode": stat.S_IMODE(st.st_mode)}
    return {"size": st.st_size, "sha256": digest.hexdigest(), **owner}


def _expand(pattern):
    """A path, or a glob's matches; a pattern that matches nothing is recorded as itself, missing."""
    if glob.has_magic(pattern):
        return sorted(glob.glob(pattern))
    return [pattern]


def _walk(root):
    """Every path below a directory, not following links."""
    found = []
    for directory, dirs, files in os.walk(root):
        dirs.sort()
        found += [os.path.join(directory, name) for name in sorted(dirs + files)]
    return found


def snapshot(paths, trees=(), units=None):
    """{path: state} for each of `paths` (globs allowed) and everything below each of `trees`, and
    {unit: state} from `units` ({unit: (enabled, active)} as systemctl says)."""
    files = {}
    for pattern in [*paths, *trees]:
        for path in _expand(pattern):
            files[path] = _entry(path)
    for root in trees:
        for pattern in _expand(root):
            if files.get(pattern, {}).get("dir"):
                for path in _walk(pattern):
                    files[path] = _entry(path)
    return {"files": files, "units": dict(units or {})}


def parse_unit_states(units, shown):
    """{unit: [unit-file state, active state]} from `systemctl show --property=UnitFileState,ActiveState`
    of `units`, which prints one block per unit, in the order asked."""
    blocks = shown.strip().split("\n\n")
    if len(blocks) != len(units):
        raise AppliedError(f"systemctl showed {len(blocks)} units for {len(units)}: {shown[:200]!r}")
    states = {}
    for unit, block in zip(units, blocks, strict=True):
        properties = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        states[unit] = [properties.get("UnitFileState", ""), properties.get("ActiveState", "")]
    return states


def user_state(name):
    """The service user as the run left it: ids, home and shell."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return {"missing": True}
    return {"uid": entry.pw_uid, "gid": entry.pw_gid, "home": entry.pw_dir, "shell": entry.pw_shell}


def difference(record, fingerprint, now):
    """Why the Spark is not as the recorded run left it, in words; None when it is."""
    if not record:
        return "no finished run is recorded on this Spark"
    if record.get("version") != RECORD_VERSION or record.get("fingerprint") != fingerprint:
        return "the settings or the collection differ from the last finished run's"
    for kind in ("files", "units", "user"):
        before, after = record.get("state", {}).get(kind), now.get(kind)
        if before == after:
            continue
        if kind == "user":
            return "the service user changed since the last finished run"
        for name in sorted(set(before or {}) | set(after or {})):
            if (before or {}).get(name) != (after or {}).get(name):
                what = "file" if kind == "files" else "unit"
                return f"{what} {name} changed since the last finished run"
    return None


def unit_states(units, run_command):
    """{unit: [unit-file state, active state]}, as systemctl shows them, in one call of RUN_COMMAND (an
    AnsibleModule's: argv -> (rc, out, err))."""
    if not units:
        return {}
    rc, out, err = run_command(["systemctl", "show", "--property=UnitFileState,ActiveState", "--", *units])
    if rc != 0:
        raise AppliedError(f"systemctl show failed: {err.strip()}")
    return parse_unit_states(units, out)


def inputs_and_state(options, run_command, check_mode):
    """(the run's keyed inputs, or None where no digest key is there yet in CHECK_MODE; the state now) from
    OPTIONS, those of the module ds4_applied: the digest key is made when missing, not in check mode."""
    try:
        key, _created = load_key(options["digest_key"], create=not check_mode)
    except DigestKeyError as exc:
        raise AppliedError(str(exc)) from exc
    inputs = keyed_fingerprint(options["fingerprint"], options["secrets"] or {}, key) if key else None
    now = snapshot(options["paths"], options["trees"], unit_states(options["units"], run_command))
    now["user"] = user_state(options["user"])
    return inputs, now


def compare(options, run_command, check_mode):
    """Why the Spark is not as the last finished run left it, in words, or None when it is and its engine
    answers on OPTIONS' host and port (OPTIONS: those of the module ds4_applied). A pair's worker serves no
    HTTP (engine_answers false): its units' active states, in the record, say whether it runs. A record that
    no longer holds is removed, not in CHECK_MODE, so that only a whole run that finishes writes one again."""
    inputs, now = inputs_and_state(options, run_command, check_mode)
    reason = difference(read_record(options["path"]), inputs, now)
    if reason is None and options["engine_answers"]:
        try:
            read_stats(engine_url(options["host"], options["port"]), agent=AGENT_STATUS)
        except (EngineUnreachable, ProbeError) as exc:
            reason = f"the engine does not answer: {exc}"
    if reason is not None and not check_mode:
        remove_record(options["path"])
    return reason


def read_record(path):
    """The record, or None when there is none; never through a link."""
    try:
        return read_object(path)
    except OSError as exc:
        raise AppliedError(f"cannot read the run record {path}: {exc.strerror}") from exc
    except ValueError:
        # A record cut short is no record: the whole run follows and writes a new one.
        return None


def write_record(path, fingerprint, now):
    """Replace the record atomically, in a directory only root can write."""
    directory = os.path.dirname(path)
    if not private_dir(directory):
        raise AppliedError(
            f"{directory} must be a directory of {pwd.getpwuid(os.geteuid()).pw_name} alone (mode 0700), "
            "not a link or anyone else's: the run record is not written there"
        )
    record = {"version": RECORD_VERSION, "fingerprint": fingerprint, "state": now}
    replace_file(path, json.dumps(record, sort_keys=True).encode("utf-8"), 0o600)


def remove_record(path):
    """Forget the last finished run; True when there was a record."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
