"""The files a weight file keeps beside it in its directory: the one place that spells their names.

- `<name>.part`: the download in progress, written at the offsets its ranges come from (_weights.hub)
- `.<name>.part.json`: the byte ranges of the part that are on disk for certain (_weights.records.PartState)
- `.<name>.part.held.json`: the byte ranges written so far, synced or not, that a relay may serve while the
  part still fills (_weights.relay); rewritten several times a second, meaningless once the fetch has ended
- `.<name>.verified.json`: the verification record, keyed by size, mtime, inode and device (_weights.records)
- `.<name>.progress.json`: what a fetch is doing, for ds4_hub_wait to print

Removing a weight file takes all of them with it. Roles reach these names through the filter
ds4.fleet.weight_file_path. Standard library only.
"""

from __future__ import annotations

import posixpath

# Kind -> how the file's name is spelled from the weight file's name.
PATTERNS = {
    "file": "{}",
    "part": "{}.part",
    "ranges": ".{}.part.json",
    "held": ".{}.part.held.json",
    "record": ".{}.verified.json",
    "progress": ".{}.progress.json",
}


def part_name(name):
    return PATTERNS["part"].format(name)


def ranges_name(name):
    return PATTERNS["ranges"].format(name)


def held_name(name):
    return PATTERNS["held"].format(name)


def sidecar_name(name):
    """The verification record's name."""
    return PATTERNS["record"].format(name)


def progress_name(name):
    return PATTERNS["progress"].format(name)


def companion_names(name):
    """The weight file's own name, then every file that lies beside it on its account."""
    return [pattern.format(name) for pattern in PATTERNS.values()]


def weight_file_path(name, directory, kind="file"):
    """The path of the `kind` file (file, part, ranges, record, progress) of weight `name` in `directory`."""
    if kind not in PATTERNS:
        raise ValueError(f"no weight file kind {kind!r}; wanted one of {', '.join(PATTERNS)}")
    return posixpath.join(directory, PATTERNS[kind].format(name))
