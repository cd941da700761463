"""The last-known-good release of a Spark: what every rollback returns to.

`current` says what a Spark was switched to, not whether it ever served: a run killed after the switch and
before the smoke test leaves `current` on a release that never passed. So the activation records, only
once a release has passed its smoke test (and the speed gate), that release together with the launch files
it ran on (environment, unit, local fact), in one file written atomically:

    /var/lib/ds4-fleet/last-good.json   root's, 0600 in root's 0700 directory; never read or written
                                        through a link. 0600: the environment file may hold ds4_extra_env
                                        values, which may be secrets.

A rollback points `current` back at that release and puts back those launch files. A Spark with no record
(a first install, or one set up before the record existed) has nothing to roll back to.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import stat

from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import (
    private_dir,
    read_object,
    replace_file,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.version import is_release_name

RECORD_PATH = "/var/lib/ds4-fleet/last-good.json"
RECORD_VERSION = 1
# The new copy of a file is written beside it (launch files in /etc/ds4 and /etc/systemd/system) under a
# name of our own, which no other file there has.
_SUFFIX = ".ds4-last-good.tmp"
RELEASES_DIR = "releases"


class LastGoodError(ValueError):
    """A record that cannot be read, written or used; the message names the file."""


def release_dir(root, release):
    return os.path.join(root, RELEASES_DIR, release)


def _launch_file(path):
    """{mode, uid, gid, content} of one launch file, opened once and never through a link; None if absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LastGoodError(f"cannot read the launch file {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise LastGoodError(f"the launch file {path} is not a regular file")
        content = handle.read()
    return {
        "mode": stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
        "content": base64.b64encode(content).decode("ascii"),
    }


def make_record(root, release, files, *, model_generation="", speculation=""):
    """The record of RELEASE under ROOT, which has just passed its smoke test, and of the launch FILES
    (paths) it runs on as they are now. A file that does not exist is left out, and is left as it is by
    a rollback, as the copies kept before this record were."""
    if not is_release_name(release):
        raise LastGoodError(f"{release!r} is not a release name: no last-good record is made of it")
    found = {path: _launch_file(path) for path in files}
    return {
        "version": RECORD_VERSION,
        "release": release,
        "release_dir": release_dir(root, release),
        "model_generation": model_generation,
        "speculation": speculation,
        "files": {path: entry for path, entry in found.items() if entry is not None},
    }


def read_record(path=RECORD_PATH):
    """The record, or None when there is none. Never through a link; anything else unusable raises."""
    try:
        record = read_object(path)
    except OSError as exc:
        raise LastGoodError(f"cannot read the last-good record {path}: {exc.strerror}") from exc
    except ValueError:
        record = {}
    if record is None:
        return None
    if (
        record.get("version") != RECORD_VERSION
        or not is_release_name(record.get("release"))
        or not isinstance(record.get("release_dir"), str)
        or not isinstance(record.get("files"), dict)
    ):
        raise LastGoodError(
            f"the last-good record {path} is not one this collection writes: remove it, and the next "
            "activation that passes its smoke test writes a new one (until then, a failed activation has "
            "nothing to roll back to)"
        )
    return record


def recorded_release(root, path=RECORD_PATH):
    """The tag of the last-good release when it lives under ROOT (to protect it from prune and rebuild), or
    None. An unreadable record protects nothing here: the activation reads it again and says why."""
    try:
        record = read_record(path)
    except LastGoodError:
        return None
    if record is None or record["release_dir"] != release_dir(root, record["release"]):
        return None
    return record["release"]


def rollback_target(record, root):
    """{release, release_dir, reason}: what a failed activation under ROOT rolls back to. release is None
    when there is nothing (reason says why), never `current` as such: a release is a target only once it
    passed its smoke test. The release must still be a directory (not a link) with its ds4-server."""
    if record is None:
        return {
            "release": None,
            "release_dir": None,
            "reason": "no release has passed its smoke test on this Spark yet",
        }
    wanted = release_dir(root, record["release"])
    if record["release_dir"] != wanted:
        return {
            "release": None,
            "release_dir": None,
            "reason": (
                f"the last good release, {record['release']}, was recorded at {record['release_dir']}, "
                f"outside ds4_root ({root})"
            ),
        }
    try:
        st = os.lstat(wanted)
        present = stat.S_ISDIR(st.st_mode) and os.path.isfile(os.path.join(wanted, "ds4-server"))
    except OSError:
        present = False
    if not present:
        return {
            "release": None,
            "release_dir": None,
            "reason": f"the last good release, {record['release']}, is no longer built in {wanted}",
        }
    return {"release": record["release"], "release_dir": wanted, "reason": None}


def write_record(record, path=RECORD_PATH):
    """Replace the record atomically; True when it changed."""
    directory = os.path.dirname(path)
    if not private_dir(directory):
        raise LastGoodError(
            f"{directory} must be a directory of the user running the activation alone (mode 0700), not a "
            "link or anyone else's: the last-good record is not written there"
        )
    text = json.dumps(record, sort_keys=True)
    with contextlib.suppress(LastGoodError):
        if read_record(path) == record:
            return False
    replace_file(path, text.encode("utf-8"), 0o600, suffix=_SUFFIX)
    return True


def restore_files(record):
    """Put back each launch file of the record (content, owner, mode), atomically and never through a link;
    the paths whose content or metadata changed."""
    restored = []
    for path, entry in sorted(record["files"].items()):
        content = base64.b64decode(entry["content"])
        # A link or anything else at the path is replaced, never followed.
        with contextlib.suppress(LastGoodError):
            if _launch_file(path) == entry:
                continue
        replace_file(path, content, entry["mode"], entry["uid"], entry["gid"], suffix=_SUFFIX)
        restored.append(path)
    return restored
