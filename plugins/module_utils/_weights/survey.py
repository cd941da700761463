"""What the host has, for the disk plan: sizes of the catalog's files, parts, free space, open files.

Reads only; _weights.disk_plan.plan() decides. Only file names the catalog lists are ever looked at.
"""

from __future__ import annotations

import contextlib
import os
import stat

from ansible_collections.ds4.fleet.plugins.module_utils._weights.file_names import part_name, sidecar_name
from ansible_collections.ds4.fleet.plugins.module_utils._weights.records import part_bytes_done, read_record


def _regular(path):
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _link(path):
    """Where a symbolic link at PATH points, or None when PATH is no link."""
    try:
        return os.readlink(path) if stat.S_ISLNK(os.lstat(path).st_mode) else None
    except OSError:
        return None


def _existing_ancestor(path):
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def open_paths(proc="/proc"):
    """Every path some process has mapped or open (the engine mmaps its GGUFs), as far as readable."""
    found = set()
    for pid in os.listdir(proc):
        if not pid.isdigit():
            continue
        try:
            with open(f"{proc}/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    fields = line.rstrip("\n").split(None, 5)
                    if len(fields) == 6 and fields[5].startswith("/"):
                        found.add(fields[5].removesuffix(" (deleted)"))
        except OSError:
            pass
        try:
            fds = os.listdir(f"{proc}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                found.add(os.readlink(f"{proc}/{pid}/fd/{fd}"))
    return found


def survey(gguf_dir, wanted, other, size_of, adopt_dirs=(), in_use=(), proc="/proc"):
    """The keyword arguments of _weights.disk_plan.plan() for this host.

    wanted    catalog entries (model_files); a null size is taken from the file's verification record
              or, failing that, from `size_of(entry)` (the hub's metadata)
    other     names of the other generation's files
    in_use    paths the caller knows the service uses; files open in any process are added

    Paths are compared resolved: a model reached through a link is in use when its target is open,
    and its bytes are not counted as freed on gguf_dir's filesystem when another one holds them
    (`elsewhere`). A symbolic link in an adopt directory is never adopted (`skipped` says why): the
    move or copy would take whatever it points at.
    """
    gguf_dir = os.path.normpath(gguf_dir)
    anchor = _existing_ancestor(gguf_dir)
    fs = os.statvfs(anchor)
    dev = os.stat(anchor).st_dev
    names = [w["name"] for w in wanted] + list(other)
    present, partial, elsewhere = _on_disk(gguf_dir, names, dev)
    sized = [_sized(gguf_dir, entry, size_of) for entry in wanted]
    busy = {os.path.realpath(p) for p in in_use} | open_paths(proc)
    real_dir = os.path.realpath(gguf_dir)
    in_use_here = [
        os.path.join(gguf_dir, n)
        for name in names
        for n in (name, part_name(name))
        if os.path.realpath(os.path.join(real_dir, n)) in busy
    ]
    adoptable, skipped = [], []
    for entry in sized:
        if entry["name"] in present:
            continue
        for directory in adopt_dirs:
            if os.path.realpath(directory) == real_dir:
                continue
            found = _adoptable(directory, entry["name"], dev, skipped)
            if found:
                adoptable.append(found)
                break
    return {
        "gguf_dir": gguf_dir,
        "wanted": sized,
        "free_bytes": fs.f_bavail * fs.f_frsize,
        "present": present,
        "partial": partial,
        "other": list(other),
        "in_use": in_use_here,
        "adoptable": adoptable,
        "elsewhere": elsewhere,
        "skipped": skipped,
    }


def _on_disk(gguf_dir, names, dev):
    """({name: size} complete, {name: bytes on disk} of parts, [names another filesystem holds])."""
    present, partial, elsewhere = {}, {}, []
    for name in names:
        path = os.path.join(gguf_dir, name)
        st = _regular(path)
        if st:
            present[name] = st.st_size
            if _link(path) is not None or st.st_dev != dev:
                elsewhere.append(name)
        if _regular(os.path.join(gguf_dir, part_name(name))):
            # A part fetched by ranges has holes: only the ranges on disk count.
            partial[name] = part_bytes_done(gguf_dir, name)
    return present, partial, elsewhere


def _sized(gguf_dir, entry, size_of):
    """The wanted entry with its size and where that came from: the catalog, the record, or the hub."""
    entry = dict(entry)
    if entry.get("size") is not None:
        entry["size_source"] = "catalog"
        return entry
    st = _regular(os.path.join(gguf_dir, entry["name"]))
    record = read_record(os.path.join(gguf_dir, sidecar_name(entry["name"])), st) if st else None
    if record:
        entry.update(size=record["size"], size_source="verification record")
    else:
        entry.update(size=size_of(entry), size_source="hub")
    return entry


def _adoptable(directory, name, dev, skipped):
    """The copy of `name` (or of its part) in `directory` to adopt, or None; a link is skipped, saying why."""
    for candidate in (name, part_name(name)):
        path = os.path.join(directory, candidate)
        target = _link(path)
        if target is not None:
            skipped.append(
                f"{path} is a symbolic link (to {target}), not adopted: only a regular file is "
                "moved or copied into place; put the file itself there to adopt it"
            )
            continue
        st = _regular(path)
        if st:
            # The file itself, by device and inode: adoption moves it only while it is still this one.
            return {
                "name": name,
                "path": path,
                "size": st.st_size,
                "same_fs": st.st_dev == dev,
                "dev": st.st_dev,
                "ino": st.st_ino,
            }
    return None
