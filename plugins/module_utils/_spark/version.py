"""Ordering of ds4 engine release tags (`v0.6.5`, `v0.5.6.1`).

Self-contained on purpose: besides serving the modules and filters, this file is installed on each
host beside the `ds4-update-check` script, which imports it with nothing else of the collection
present. Standard library only, and syntax that the hosts' python3 (3.10 and later) runs.

A tag is an optional lowercase `v` and three or more dot-separated decimal numbers. Three is the
floor because every engine release has at least three parts and a feed that answers `404` or `2`
must not read as a release. Leading zeros are refused (`v0.05.6`) so that one version has one spelling
apart from the optional `v`.

Order: part by part, numerically; when one tag is a prefix of the other, the longer one is newer.
So v0.5.6.1 > v0.5.6, v0.5.6.0 > v0.5.6 as well, and v0.10.0 > v0.9.9. (The engine's own check reads
only three numbers and never sees v0.5.6.1 as newer than v0.5.6; this ordering fixes that.)
"""

from __future__ import annotations

import re

# The one tag grammar of the collection. ASCII digits only: `\d` would also accept other scripts' digits,
# which int() then quietly converts.
_NUMBERS = r"(?:0|[1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*)){2,}"
_RELEASE_RE = re.compile(rf"v?({_NUMBERS})")
# A release as the collection names it (ds4_release, a release directory): the `v` is required, because
# the tag is also a directory name and one release must have one directory.
RELEASE_TAG_RE = re.compile(rf"v{_NUMBERS}")


def is_release_tag(name):
    """True for a release tag with its `v` (v0.6.5, v0.6.5.1), as ds4_release and release directories are."""
    return isinstance(name, str) and RELEASE_TAG_RE.fullmatch(name) is not None


def parse_release(tag):
    """Return the numeric parts of a release tag as a tuple of ints; ValueError for anything else."""
    if not isinstance(tag, str):
        raise ValueError(f"not a release tag (expected a string like v0.6.5): {tag!r}")
    match = _RELEASE_RE.fullmatch(tag)
    if match is None:
        raise ValueError(
            f"not a release tag (expected v followed by three or more numbers, like v0.6.5): {tag!r}"
        )
    return tuple(int(part) for part in match.group(1).split("."))


def compare_releases(a, b):
    """-1, 0 or 1 as release `a` is older than, the same as, or newer than release `b`."""
    pa, pb = parse_release(a), parse_release(b)
    # Tuple order is exactly the rule above: numeric part by part, a strict prefix sorts first.
    return (pa > pb) - (pa < pb)


def _tag_list(value, name):
    # Jinja's map() hands over a generator, so any iterable will do; a bare string or a mapping would be
    # walked character by character or key by key, which is never what the caller meant.
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise ValueError(f"{name} must be a list of release tags: {value!r}")
    return list(value)


def sort_releases(tags):
    """The tags oldest first; equal versions (`v0.6.5`, `0.6.5`) keep their given order."""
    return sorted(_tag_list(tags, "tags"), key=parse_release)


def is_newer(candidate, running):
    """True when release `candidate` is strictly newer than release `running`."""
    return compare_releases(candidate, running) > 0


def _count(value, name):
    # Numbers from `-e` on the command line arrive as strings; bools are ints in Python but never counts.
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a whole number of 0 or more, not a boolean: {value!r}")
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    if isinstance(value, int) and value >= 0:
        return value
    raise ValueError(f"{name} must be a whole number of 0 or more: {value!r}")


def releases_to_prune(present, keep, protect=()):
    """The releases in `present` that may be removed, oldest first.

    Kept: the newest `keep` releases by version order, and every release equal in version to one in
    `protect` (the running release and the rollback one) whatever its age, so at most
    `keep + len(protect)` remain. Empty entries in `protect` (no previous release yet) are ignored.
    Every entry of `present` must be a release tag: a stray directory name is an error, not a
    silent keep or a silent removal.
    """
    keep = _count(keep, "keep")
    protected = {parse_release(tag) for tag in _tag_list(protect, "protect") if tag not in (None, "")}
    ordered = sort_releases(_tag_list(present, "present"))
    kept = {parse_release(tag) for tag in ordered[max(len(ordered) - keep, 0) :]} | protected
    return [tag for tag in ordered if parse_release(tag) not in kept]
