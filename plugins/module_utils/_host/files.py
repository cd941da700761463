"""A set of files installed whole into one directory of root's, in one pass.

Each file is compared with what lies at its name (read without following a link) and, where its content,
mode or owner differ, written beside its name and renamed over it (_spark.no_follow.replace_file): a link
put at the name is replaced, never written through. This is what ansible.builtin.copy does file by file,
in two module runs each (a stat, then a copy or a file); the service role installs its seven host
programs this way in one run, on every run that converges a Spark.
"""

from __future__ import annotations

import errno
import os
import stat

from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import UnsafePath, replace_file


def _checked_dir(directory):
    """DIRECTORY's lstat, refused unless it is a directory of the running user that no one else may write
    into: another user could otherwise swap a file for a link between the check and the rename."""
    if not isinstance(directory, str) or not directory.startswith("/"):
        raise UnsafePath(f"{directory!r} is not an absolute path")
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        raise UnsafePath(f"{directory} does not exist") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{directory} is a symbolic link: refusing to go through it")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{directory} is not a directory")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise UnsafePath(f"{directory} may be written by a user other than this one (uid {st.st_uid})")
    return st


def _current(path):
    """(content, mode, uid, gid) of the regular file at PATH; None when there is none or a link is there
    (replaced, not followed). Anything else at the name (a directory) is refused."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            return None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePath(f"{path} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
    finally:
        os.close(fd)


def _text(content):
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return "(not text)\n"


def install(directory, files, check_mode=False):
    """Install FILES ({name: (content bytes, mode int)}) into DIRECTORY, owned by the running user and its
    group. Returns {"changed": [names written, or to be in check mode], "diff": [one per changed file]}.
    In check mode a missing DIRECTORY is one an earlier task would have made: every file is to be written."""
    present = os.path.lexists(directory)
    if present or not check_mode:
        _checked_dir(directory)
    uid, gid = os.geteuid(), os.getegid()
    changed, diff = [], []
    for name in sorted(files):
        if os.path.basename(name) != name or name in ("", ".", ".."):
            raise UnsafePath(f"{name!r} is not a file name")
        content, mode = files[name]
        path = os.path.join(directory, name)
        now = _current(path) if present else None
        if now == (content, mode, uid, gid):
            continue
        changed.append(name)
        diff.append(
            {
                "before_header": f"{path} (mode {oct(now[1])[2:]:0>4})" if now else f"{path} (absent)",
                "after_header": f"{path} (mode {oct(mode)[2:]:0>4})",
                "before": _text(now[0]) if now else "",
                "after": _text(content),
            }
        )
        if not check_mode:
            replace_file(path, content, mode, uid, gid, suffix=".ds4-new")
    return {"changed": changed, "diff": diff}
