"""The disk plan for the weights, computed before any byte moves.

Pure: it is given what the host has (sizes, free bytes, files in use) and decides what to fetch, what to
adopt from a shell installer's ~/gguf, and which files of the other generation may go and when. It
refuses (DiskPlanError) with the shortfall when even the allowed removals would not make room.
"""

from __future__ import annotations

import posixpath

GIB = 1 << 30
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


def gib(n):
    return f"{n / GIB:.1f} GiB"


def describe_bytes(n):
    return f"{n:,} bytes ({gib(n)})"


# What lies beside a weight file in its directory; removal takes these with the file.
def part_name(name):
    return f"{name}.part"


def ranges_name(name):
    """The list of the byte ranges of `<name>.part` that are on disk (ds4_hub_records.PartState)."""
    return f".{name}.part.json"


def sidecar_name(name):
    return f".{name}.verified.json"


def progress_name(name):
    return f".{name}.progress.json"


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
    if policy not in POLICIES:
        raise ValueError(f"{POLICY_VAR}={policy!r} is not one of: {', '.join(POLICIES)}")
    present = present or {}
    partial = partial or {}
    in_use = set(in_use)
    directory = posixpath.normpath(gguf_dir)
    adopt_from = {a["name"]: a for a in adoptable}

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
    need = 0
    copies = []
    for want in wanted:
        name, size = want["name"], want["size"]
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"wanted file {name!r} has no known size ({size!r}): ask the hub first")
        dest = posixpath.join(directory, name)
        entry = dict(want, dir=directory, path=dest)
        result["files"].append(entry)
        have = present.get(name)
        if have == size:
            result["keep"].append(
                {"name": name, "path": dest, "bytes": size, "reason": "wanted, already present"}
            )
            continue
        # A part longer than the file is not a prefix of it: the fetch discards it.
        resume_from = partial.get(name, 0) if partial.get(name, 0) <= size else 0
        source = adopt_from.get(name)
        if source is not None and have is None:
            if source["size"] == size:
                if source["same_fs"]:
                    result["adopt"].append(_adopt(source, dest, "move", 0, False))
                else:
                    copies.append((source, entry))
                continue
            # curl -C - leaves an interrupted download under the final name: resume it rather than start over.
            if resume_from < source["size"] < size and source["same_fs"]:
                result["adopt"].append(
                    _adopt(source, posixpath.join(directory, part_name(name)), "move", 0, True)
                )
                resume_from = source["size"]
        result["fetch"].append(
            {
                "name": name,
                "size": size,
                "resume_from": resume_from,
                "bytes": size - resume_from,
                "replaces": have is not None,
            }
        )
        need += size - resume_from

    others = []
    for name in other:
        on_disk = (0 if name in elsewhere else present.get(name, 0)) + partial.get(name, 0)
        if name in present or name in partial:
            paths = [name, part_name(name), ranges_name(name), sidecar_name(name), progress_name(name)]
            others.append(
                {
                    "name": name,
                    "path": posixpath.join(directory, name),
                    "bytes": on_disk,
                    "paths": [posixpath.join(directory, p) for p in paths],
                }
            )
    busy = [o for o in others if in_use.intersection(o["paths"])]
    removable = [o for o in others if o not in busy]
    removable_bytes = sum(o["bytes"] for o in removable)
    for o in busy:
        result["keep"].append(dict(o, reason="in use by the running service"))

    short = need - free_bytes
    freed = 0
    if policy == "keep":
        for o in removable:
            result["keep"].append(dict(o, reason=f"{POLICY_VAR}=keep"))
        if short > 0:
            tail = f"; {POLICY_VAR}=keep forbids removing the other generation ({gib(removable_bytes)})"
            _refuse(result, need, short, tail if removable else "")
    elif short > 0:
        if short > removable_bytes:
            tail = f" even after removing the other generation ({gib(removable_bytes)})" if removable else ""
            if busy:
                tail += f"; {gib(sum(o['bytes'] for o in busy))} more are in use by the running service"
            _refuse(result, need, short - removable_bytes, tail)
        result["remove_before"] = removable
        freed = removable_bytes
    elif policy == "remove":
        result["remove_after_smoke"] = removable
    else:
        for o in removable:
            reason = f"fits beside the new files; {POLICY_VAR}=remove reclaims it after the smoke test"
            result["keep"].append(dict(o, reason=reason))

    # Copying across filesystems is a convenience, never a reason to remove anything: copy what fits
    # after the fetches, use the rest in place.
    room = free_bytes + freed - need
    for source, entry in copies:
        if source["size"] <= room:
            result["adopt"].append(_adopt(source, entry["path"], "copy", source["size"], False))
            room -= source["size"]
            need += source["size"]
        else:
            result["adopt"].append(_adopt(source, source["path"], "in_place", 0, False))
            entry["dir"], entry["path"] = posixpath.dirname(source["path"]), source["path"]

    result.update(
        need_bytes=need,
        removable_bytes=removable_bytes,
        free_after_bytes=free_bytes + freed - need,
        fits=True,
    )
    result["message"] = _summary(result)
    return result


def _adopt(source, dest, action, nbytes, is_partial):
    return {
        "name": source["name"],
        "src": source["path"],
        "dest": dest,
        "action": action,
        "bytes": nbytes,
        "partial": is_partial,
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
