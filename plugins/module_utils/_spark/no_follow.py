"""Files and directories of a Spark reached without following a link an untrusted user could have made.

A root-run role must never write, chown or chmod through a link it did not make (issue 26). Each path here
is walked from / one component at a time with openat (O_NOFOLLOW), and whatever is changed is changed
through the descriptor that was opened and checked, never by path again:

- read_text and read_object: a run's own files (its lock, its records);
- private_dir and replace_file: a run's own records (/var/lib/ds4-fleet), in a directory of root's alone,
  written whole beside their path and renamed over it, never through a link at either name;
- owned_dir: a directory handed to a user (the KV banks to the service user, the weights to
  ds4_weights_owner), made and chowned by a walk that refuses a link at any component and any parent a
  third user could change;
- open_file and set_attributes: a weight file (adopted from an installer's ~/gguf or fetched), hashed,
  stat-ed, chowned and chmodded through one descriptor;
- write_at: a file a root-run program rewrites in a directory another user may own (the watchdog's
  ds4.prom in node_exporter's textfile directory), written whole beside its name in the directory reached
  without a link, and renamed over it there.

This file imports nothing of the collection: the watchdog uses it on the host (_ds4_host_modules).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(Exception):
    """A path refused: a link at a component, a parent a third user may change, a non-directory."""


def read_text(path):
    """The file's text, or None when there is no file. A link (ELOOP) or anything else unreadable raises
    OSError, for the caller to say what the file was."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, encoding="utf-8") as handle:
        return handle.read()


def read_object(path):
    """The JSON object a record holds, or None when there is no file. A link or an unreadable file raises
    OSError (as read_text), anything but a JSON object in UTF-8 ValueError: the caller says which record
    it was and what to do with it."""
    text = read_text(path)
    if text is None:
        return None
    found = json.loads(text)
    if not isinstance(found, dict):
        raise ValueError(f"a JSON {type(found).__name__}, not an object")
    return found


def private_dir(directory):
    """Make DIRECTORY (mode 0700) when it is missing; whether it is a directory of the running user alone:
    not a link, nobody else's, no group or other bits. The caller refuses it, naming what it keeps there."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    st = os.lstat(directory)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not stat.S_IMODE(st.st_mode) & 0o077


def replace_file(path, content, mode, uid=None, gid=None, suffix=".tmp"):
    """Write PATH (bytes) whole and atomically: a new file PATH+SUFFIX beside it (never through a link at
    either name), its owner and mode set through its descriptor, flushed to disk, then renamed over PATH."""
    temporary = path + suffix
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temporary)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            if uid is not None:
                os.fchown(handle.fileno(), uid, gid)
            os.fchmod(handle.fileno(), mode)
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def _components(path):
    if not isinstance(path, str) or not path.startswith("/") or os.path.normpath(path) != path:
        raise UnsafePath(f"{path!r} is not a normalised absolute path")
    return [part for part in path.split("/") if part]


def _what_is(dir_fd, name):
    """Why a component could not be opened as a directory: a link or not a directory."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return "cannot be examined"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    return "is not a directory"


def _open_dir_at(dir_fd, name, shown):
    """The directory `name` in `dir_fd`, never through a link; None when it does not exist."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePath(f"{shown} {_what_is(dir_fd, name)}: refusing to go through it") from e
        raise


def _check_parent(fd, shown, trusted_uids):
    """A directory on the way: only root (or the user it is handed to) may change what it holds."""
    st = os.fstat(fd)
    if st.st_uid not in trusted_uids:
        raise UnsafePath(
            f"{shown} belongs to uid {st.st_uid}, neither root nor the directory's owner to be: that user "
            "could swap what lies below it"
        )
    if st.st_mode & 0o022:
        raise UnsafePath(
            f"{shown} is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):04o}): they "
            "could swap what lies below it"
        )


def _attributes(st):
    return {"uid": st.st_uid, "gid": st.st_gid, "mode": f"{stat.S_IMODE(st.st_mode):04o}"}


def set_attributes(fd, uid=None, gid=None, mode=None, check_mode=False):
    """Owner, group and mode of the open file or directory `fd`, set through it (fchown, fchmod) where
    they differ; None leaves one as it is. Returns (changed, before, after), each {uid, gid, mode}."""
    st = os.fstat(fd)
    before = _attributes(st)
    want_uid = st.st_uid if uid is None else uid
    want_gid = st.st_gid if gid is None else gid
    want_mode = stat.S_IMODE(st.st_mode) if mode is None else mode
    after = {"uid": want_uid, "gid": want_gid, "mode": f"{want_mode:04o}"}
    changed = before != after
    if changed and not check_mode:
        if (want_uid, want_gid) != (st.st_uid, st.st_gid):
            os.fchown(fd, want_uid, want_gid)
        # After the chown, which clears the set-id bits of a file.
        if want_mode != stat.S_IMODE(os.fstat(fd).st_mode):
            os.fchmod(fd, want_mode)
    return changed, before, after


def owned_dir(path, uid, gid, mode, check_mode=False, parent_uids=()):
    """Make `path` a directory owned by uid:gid with `mode`, walking from / through descriptors.

    Each existing component above it must be a directory, not a link, owned by root, by `uid` itself
    (a user's own home, for a directory handed to that user) or by one of `parent_uids` (node_exporter's
    user, whose /var/lib/prometheus holds root's textfile directory: whatever that user swaps in below is
    refused as a link or is a directory of that user's made root's), and not writable by its group or others;
    a missing one is made by root, mode 0755. The directory itself must not be a link; it is made if
    missing and chowned and chmodded through the descriptor that opened it. Raises UnsafePath naming the
    component. Returns {changed, created: [paths made], before, after} (before is None when it was
    made; in check mode nothing changes and a missing path is reported as to be made)."""
    parts = _components(path)
    if not parts:
        raise UnsafePath("/ is never handed to a user")
    trusted = {0, uid, *parent_uids}
    fd = os.open("/", _DIR_FLAGS)
    created = []
    try:
        _check_parent(fd, "/", trusted)
        shown = ""
        for index, name in enumerate(parts):
            shown += "/" + name
            last = index == len(parts) - 1
            child = _open_dir_at(fd, name, shown)
            if child is None:
                created.append(shown)
                if check_mode:
                    created += ["/" + "/".join(parts[: i + 1]) for i in range(index + 1, len(parts))]
                    after = {"uid": uid, "gid": gid, "mode": f"{mode:04o}"}
                    return {"changed": True, "created": created, "before": None, "after": after}
                os.mkdir(name, 0o700, dir_fd=fd)
                child = _open_dir_at(fd, name, shown)
                if child is None:
                    raise UnsafePath(f"{shown} vanished as soon as it was made")
                if not last:
                    # Made by root for root, until the walk reaches the directory handed over.
                    os.fchown(child, 0, 0)
                    os.fchmod(child, 0o755)
            os.close(fd)
            fd = child
            if not last:
                _check_parent(fd, shown, trusted)
        changed, before, after = set_attributes(fd, uid, gid, mode, check_mode)
        made = bool(created)
        return {
            "changed": changed or made,
            "created": created,
            "before": None if made else before,
            "after": after,
        }
    finally:
        os.close(fd)


def _parent_fd(parts):
    """A descriptor of the directory that holds the path made of `parts`, walked from / with no link at any
    component. Raises FileNotFoundError when a directory on the way does not exist, UnsafePath for a link."""
    fd = os.open("/", _DIR_FLAGS)
    shown = ""
    try:
        for name in parts[:-1]:
            shown += "/" + name
            child = _open_dir_at(fd, name, shown)
            if child is None:
                raise FileNotFoundError(errno.ENOENT, "no such directory", shown)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path, follow_last_link=False):
    """A descriptor of the regular file `path`, read-only, walked from / with no link at any component.

    With `follow_last_link`, a link at the last component (one the roles make: a weight file used in
    place, linked into ds4_gguf_dir) is followed once, to an absolute target walked the same way.
    Raises FileNotFoundError when nothing is there, UnsafePath for a link or a non-regular file."""
    parts = _components(path)
    fd = _parent_fd(parts)
    try:
        try:
            found = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
        except OSError as e:
            if e.errno != errno.ELOOP:
                raise
            if not follow_last_link:
                raise UnsafePath(f"{path} is a symbolic link: refusing to go through it") from e
            target = os.readlink(parts[-1], dir_fd=fd)
            if not target.startswith("/"):
                raise UnsafePath(f"{path} is a link to a relative path ({target}): refusing it") from e
            return open_file(os.path.normpath(target))
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(found).st_mode):
        os.close(found)
        raise UnsafePath(f"{path} is not a regular file")
    return found


def _parent_of(path):
    """(descriptor of the directory that holds `path`, its last component), walked from / with no link at
    any component; None when a directory on the way does not exist."""
    parts = _components(path)
    if not parts:
        raise UnsafePath("/ is never removed")
    try:
        return _parent_fd(parts), parts[-1]
    except FileNotFoundError:
        return None


def _remove_at(dir_fd, name, shown, keep, gone, check_mode, select=None):
    """Remove `name` in the directory `dir_fd`: a file or a link by unlinkat (a link is never followed, only
    itself removed), a directory by its entries first (opened with O_NOFOLLOW). Paths in `keep` and the
    directories above them stay; `select(name, stat)` (at the top only) picks the entries of a directory.
    Returns the paths removed, a directory named alone when all of it went, and whether `name` went."""
    if shown in keep:
        return [], False
    if shown in gone:
        return [], True
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return [], True
    if not stat.S_ISDIR(st.st_mode):
        if not check_mode:
            os.unlink(name, dir_fd=dir_fd)
        gone.add(shown)
        return [shown], True
    fd = _open_dir_at(dir_fd, name, shown)
    if fd is None:
        return [], True
    removed, whole = [], True
    try:
        for child in sorted(os.listdir(fd)):
            path = f"{shown}/{child}"
            if select is not None and not select(child, os.stat(child, dir_fd=fd, follow_symlinks=False)):
                whole = False
                continue
            below, went = _remove_at(fd, child, path, keep, gone, check_mode)
            removed += below
            whole = whole and went
    finally:
        os.close(fd)
    if not whole or select is not None:
        return removed, False
    if not check_mode:
        os.rmdir(name, dir_fd=dir_fd)
    gone.add(shown)
    return [shown], True


def remove(path, keep=(), gone=None, check_mode=False, select=None, empty_only=False):
    """Remove `path` and what lies below it, walked from / through descriptors: a link at a component above
    it is refused (UnsafePath), a link at it or below it is removed itself, never followed. Below it, the
    paths in `keep` and the directories that hold them stay; with `select(name, stat)`, only the entries of
    the directory `path` that it picks go, and the directory stays; with `empty_only`, a directory goes only
    when nothing is left in it. `gone` (a set) carries what a check run counts as removed already, so that a
    directory emptied by an earlier call counts as empty. Returns the paths removed (or, in check mode, that
    would be), a directory named alone when all of it went."""
    gone = set() if gone is None else gone
    found = _parent_of(path)
    if found is None:
        return []
    fd, name = found
    try:
        if empty_only:
            child = _open_dir_at(fd, name, path)
            if child is None:
                return []
            try:
                left = [entry for entry in os.listdir(child) if f"{path}/{entry}" not in gone]
            finally:
                os.close(child)
            if left or path in gone:
                return []
            if not check_mode:
                os.rmdir(name, dir_fd=fd)
            gone.add(path)
            return [path]
        return _remove_at(fd, name, path, set(keep), gone, check_mode, select)[0]
    finally:
        os.close(fd)


def disown(path, uid, check_mode=False):
    """Hand the directory `path` to root (root:root, its mode kept) when `uid` owns it: a directory the
    operator named stays, but nothing in it is left to an account about to be deleted, whose uid the next
    account made would inherit. Walked from / through descriptors; returns [path] when it changed hands."""
    found = _parent_of(path)
    if found is None:
        return []
    fd, name = found
    try:
        child = _open_dir_at(fd, name, path)
    finally:
        os.close(fd)
    if child is None:
        return []
    try:
        if os.fstat(child).st_uid != uid:
            return []
        set_attributes(child, 0, 0, check_mode=check_mode)
        return [path]
    finally:
        os.close(child)


def move_planned(src, dest, dev, ino):
    """Rename the regular file `src` to `dest` only while it is the file a plan found (its st_dev and
    st_ino): both directories walked from / with no link at any component, the name checked before the
    rename (a link or another file swapped in since the plan is refused, nothing moved) and the moved one
    after it (a swap in between is renamed back and refused). Raises UnsafePath, FileNotFoundError."""
    src_parts, dest_parts = _components(src), _components(dest)
    src_fd = _parent_fd(src_parts)
    try:
        dest_fd = _parent_fd(dest_parts)
        try:
            src_name, dest_name = src_parts[-1], dest_parts[-1]
            st = os.stat(src_name, dir_fd=src_fd, follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (dev, ino):
                raise UnsafePath(f"{src} is not the file the plan found (a link or another since): not moved")
            os.rename(src_name, dest_name, src_dir_fd=src_fd, dst_dir_fd=dest_fd)
            moved = os.stat(dest_name, dir_fd=dest_fd, follow_symlinks=False)
            if not stat.S_ISREG(moved.st_mode) or (moved.st_dev, moved.st_ino) != (dev, ino):
                os.rename(dest_name, src_name, src_dir_fd=dest_fd, dst_dir_fd=src_fd)
                raise UnsafePath(f"{src} was swapped while it was moved: put back, not moved")
        finally:
            os.close(dest_fd)
    finally:
        os.close(src_fd)


def write_at(path, content, mode):
    """Replace the file PATH (bytes) whole: its directory walked from / with no link at any component, a
    new file made in it (O_EXCL, never through a link), its mode set through its descriptor, then renamed
    over PATH within that directory. Raises UnsafePath for a link on the way, OSError otherwise."""
    parts = _components(path)
    if not parts:
        raise UnsafePath("/ is never written as a file")
    fd = _parent_fd(parts)
    try:
        temporary = f".{parts[-1]}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=fd)
        out = os.open(
            temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd
        )
        try:
            with os.fdopen(out, "wb") as handle:
                os.fchmod(handle.fileno(), mode)
                handle.write(content)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary, dir_fd=fd)
            raise
    finally:
        os.close(fd)
