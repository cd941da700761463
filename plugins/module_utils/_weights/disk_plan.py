"""The disk plan for the weights, computed before any byte moves.

Pure: it is given what the host has (sizes, free bytes, files in use) and decides what to fetch, what to
adopt from a shell installer's ~/gguf, and which files of the other generation may go and when. It
refuses (DiskPlanError) with the shortfall when even the allowed removals would not make room.
"""

from __future__ import annotations

import posixpath

from ansible_collections.ds4.fleet.plugins.module_utils._common.bytes import GIB, describe_bytes, gib
from ansible_collections.ds4.fleet.plugins.module_utils._weights.file_names import companion_names, part_name

# ds4_old_weights and its choices: the roles' argument specs list them too (ansible reads choices from
# YAML); a unit test holds those lists to this one.
POLICY_VAR = "ds4_old_weights"
POLICIES = ("keep", "remove", "auto")


class DiskPlanError(Exception):
    """The wanted files do not fit; carries the shortfall, the directory and the plan as far as it got."""

    def __init__(self, message, *, shortfall_bytes, directory, plan):
        super().__init__(message)
        self.shortfall_bytes = shortfall_bytes
        self.shortfall_gib = round(shortfall_bytes / GIB, 2)
        self.directory = directory
        self.plan = plan


def check_policy(policy):
    """ValueError unless `policy` is one of the ds4_old_weights choices."""
    if policy not in POLICIES:
        raise ValueError(f"{POLICY_VAR}={policy!r} is not one of: {', '.join(POLICIES)}")


def placement(size, have=None, part=0, found=None, same_fs=True):
    """How a wanted file of `size` bytes gets into the weights' directory: (how, resume_from).

    have     size of the complete file there, None when absent
    part     size of its `<name>.part` there
    found    size of a copy in a shell installer's ~/gguf (adoptable only while `have` is None)
    same_fs  whether that copy's filesystem is the directory's (a partial copy is moved only then)
    how is "present" (nothing to do), "adopt" (a finished copy), "adopt_partial" (a shorter copy that
    curl -C - left under the final name, moved in as the part) or "fetch"; a fetch writes
    size - resume_from bytes.
    """
    if have == size:
        return "present", size
    # A part longer than the file is not a prefix of it: the fetch discards it.
    resume_from = part if part <= size else 0
    if found is not None and have is None:
        if found == size:
            return "adopt", size
        if resume_from < found < size and same_fs:
            return "adopt_partial", found
    return "fetch", resume_from


def other_on_disk(other, present, partial, elsewhere=()):
    """{name: bytes} of the other generation's files in the directory (complete or partial).

    A file whose bytes another filesystem holds (`elsewhere`: a link, a mount) frees nothing here.
    """
    return {
        name: (0 if name in elsewhere else present.get(name, 0)) + partial.get(name, 0)
        for name in other
        if name in present or name in partial
    }


def plan(
    gguf_dir,
    wanted,
    free_bytes,
    policy="auto",
    present=None,
    partial=None,
    other=(),
    in_use=(),
    adoptable=(),
    elsewhere=(),
):
    """Decide how the wanted files get into `gguf_dir`.

    gguf_dir   the directory the service reads, and the only one files are ever removed from
    wanted     [{"name": str, "size": int, ...}] in launcher order; extra keys are carried into "files"
    free_bytes bytes free to an unprivileged writer on gguf_dir's filesystem
    policy     ds4_old_weights: keep, remove or auto
    present    {name: size} of complete files in gguf_dir
    partial    {name: size} of `<name>.part` files in gguf_dir
    other      names of the other generation's files (the catalog's); only those present count
    in_use     absolute paths the running service has open; never removed
    adoptable  [{"name", "path", "size", "same_fs"}]: wanted files found in a shell installer's ~/gguf
    elsewhere  names present in gguf_dir whose bytes another filesystem holds (a link, a mount):
               removing them frees nothing here
    """
    check_policy(policy)
    present = present or {}
    partial = partial or {}
    directory = posixpath.normpath(gguf_dir)
    result = {
        "gguf_dir": directory,
        "policy": policy,
        "files": [],
        "fetch": [],
        "adopt": [],
        "remove_before": [],
        "remove_after_smoke": [],
        "keep": [],
        "free_bytes": free_bytes,
    }
    copies = _place_wanted(result, wanted, present, partial, {a["name"]: a for a in adoptable})
    need = sum(f["bytes"] for f in result["fetch"])
    others = _others(directory, other_on_disk(other, present, partial, elsewhere))
    removable_bytes, freed = _apply_policy(result, others, set(in_use), need)
    need += _place_copies(result, copies, free_bytes + freed - need)
    result.update(
        need_bytes=need,
        removable_bytes=removable_bytes,
        free_after_bytes=free_bytes + freed - need,
        fits=True,
    )
    result["message"] = _summary(result)
    return result


def _place_wanted(result, wanted, present, partial, adopt_from):
    """Sort each wanted file into keep, adopt or fetch; return the copies across filesystems, for later."""
    directory = result["gguf_dir"]
    copies = []
    for want in wanted:
        name, size = want["name"], want["size"]
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"wanted file {name!r} has no known size ({size!r}): ask the hub first")
        dest = posixpath.join(directory, name)
        entry = dict(want, dir=directory, path=dest)
        result["files"].append(entry)
        have, source = present.get(name), adopt_from.get(name)
        how, resume_from = placement(
            size,
            have,
            partial.get(name, 0),
            source["size"] if source else None,
            bool(source and source["same_fs"]),
        )
        if how == "present":
            result["keep"].append(
                {"name": name, "path": dest, "bytes": size, "reason": "wanted, already present"}
            )
            continue
        if how == "adopt":
            if source["same_fs"]:
                result["adopt"].append(_adopt(source, dest, "move", 0, False))
            else:
                copies.append((source, entry))
            continue
        if how == "adopt_partial":
            result["adopt"].append(
                _adopt(source, posixpath.join(directory, part_name(name)), "move", 0, True)
            )
        result["fetch"].append(
            {
                "name": name,
                "size": size,
                "resume_from": resume_from,
                "bytes": size - resume_from,
                "replaces": have is not None,
            }
        )
    return copies


def _others(directory, on_disk):
    """The other generation's files as removal candidates, each with every companion file's path."""
    return [
        {
            "name": name,
            "path": posixpath.join(directory, name),
            "bytes": size,
            "paths": [posixpath.join(directory, p) for p in companion_names(name)],
        }
        for name, size in on_disk.items()
    ]


def _apply_policy(result, others, in_use, need):
    """Decide by ds4_old_weights what happens to the other generation; refuse when nothing makes room.

    Returns (bytes removable, bytes freed before the fetch)."""
    busy = [o for o in others if in_use.intersection(o["paths"])]
    removable = [o for o in others if o not in busy]
    removable_bytes = sum(o["bytes"] for o in removable)
    for o in busy:
        result["keep"].append(dict(o, reason="in use by the running service"))
    short = need - result["free_bytes"]
    policy = result["policy"]
    if policy == "keep":
        for o in removable:
            result["keep"].append(dict(o, reason=f"{POLICY_VAR}=keep"))
        if short > 0:
            tail = f"; {POLICY_VAR}=keep forbids removing the other generation ({gib(removable_bytes)})"
            _refuse(result, need, short, tail if removable else "")
        return removable_bytes, 0
    if short > 0:
        if short > removable_bytes:
            tail = f" even after removing the other generation ({gib(removable_bytes)})" if removable else ""
            if busy:
                tail += f"; {gib(sum(o['bytes'] for o in busy))} more are in use by the running service"
            _refuse(result, need, short - removable_bytes, tail)
        result["remove_before"] = removable
        return removable_bytes, removable_bytes
    if policy == "remove":
        result["remove_after_smoke"] = removable
    else:
        for o in removable:
            reason = f"fits beside the new files; {POLICY_VAR}=remove reclaims it after the smoke test"
            result["keep"].append(dict(o, reason=reason))
    return removable_bytes, 0


def _place_copies(result, copies, room):
    """Copy what fits after the fetches, use the rest in place; return the bytes the copies take.

    Copying across filesystems is a convenience, never a reason to remove anything."""
    taken = 0
    for source, entry in copies:
        if source["size"] <= room - taken:
            result["adopt"].append(_adopt(source, entry["path"], "copy", source["size"], False))
            taken += source["size"]
        else:
            result["adopt"].append(_adopt(source, source["path"], "in_place", 0, False))
            entry["dir"], entry["path"] = posixpath.dirname(source["path"]), source["path"]
    return taken


def _adopt(source, dest, action, nbytes, is_partial):
    return {
        "name": source["name"],
        "src": source["path"],
        "dest": dest,
        "action": action,
        "bytes": nbytes,
        "partial": is_partial,
        # What the survey found there (_spark.no_follow.move_planned moves only that file).
        "dev": source.get("dev"),
        "ino": source.get("ino"),
    }


def _refuse(result, need, shortfall, tail):
    directory = result["gguf_dir"]
    result.update(need_bytes=need, fits=False, shortfall_bytes=shortfall)
    message = (
        f"not enough space in {directory}: the weights need {describe_bytes(need)}, "
        f"{describe_bytes(result['free_bytes'])} are free, short by {describe_bytes(shortfall)}{tail}"
    )
    result["message"] = message
    raise DiskPlanError(message, shortfall_bytes=shortfall, directory=directory, plan=result)


def _summary(result):
    parts = []
    if result["fetch"]:
        total = sum(f["bytes"] for f in result["fetch"])
        parts.append(f"fetch {len(result['fetch'])} file(s), {gib(total)}")
    else:
        parts.append("nothing to fetch")
    for a in result["adopt"]:
        parts.append(
            f"{a['action'].replace('_', ' ')} {a['src']}" + (" as a partial download" if a["partial"] else "")
        )
    if result["remove_before"]:
        freed = sum(o["bytes"] for o in result["remove_before"])
        parts.append(f"remove the other generation first ({gib(freed)}): the new files do not fit beside it")
    if result["remove_after_smoke"]:
        freed = sum(o["bytes"] for o in result["remove_after_smoke"])
        parts.append(f"remove the other generation ({gib(freed)}) after the smoke test")
    kept = {}
    for k in result["keep"]:
        if k["reason"] != "wanted, already present":
            kept.setdefault(k["reason"], []).append(k["name"])
    for reason, kept_names in kept.items():
        parts.append(f"keep {', '.join(kept_names)} ({reason})")
    return (
        f"{'; '.join(parts)}. {result['gguf_dir']}: {gib(result['free_bytes'])} free, "
        f"{gib(result['free_after_bytes'])} after"
    )
