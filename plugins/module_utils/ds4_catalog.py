"""The model generations: which files make a generation, and which files a speculation mode needs.

The catalog itself is data (`ds4_model_catalog` in roles/ds4_common/defaults/main.yml); this file only
validates it and answers questions about it:

    {"0731": {"description": "...", "files": {"base": FILE, "dspark": FILE}},
     "legacy": {"files": {"base": FILE, "dspark": FILE, "mtp": FILE}}}
    FILE = {"name": str, "repo": "owner/name", "revision": str, "size": int | None, "sha256": hex | None}

A generation may carry `reference`: the speed figures the engine's authors published for it, by the engine
release that published them (`reference_figures` answers for any release):

    "reference": {"v0.5.0": {"source": str, "stamp": str, "figures": {FIGURE: tok/s, ...},
                             "stamps": {FIGURE: "v0.4.1"}}}       # stamps: optional, where older
"""

from __future__ import annotations

import re

from ansible_collections.ds4.fleet.plugins.module_utils.ds4_version import is_release_tag, parse_release

CATALOG_VAR = "ds4_model_catalog"
GENERATION_VAR = "ds4_model_generation"
SPECULATION_VAR = "ds4_speculation"

ROLES = ("base", "dspark", "mtp")
# The files each speculation mode loads, in the order the launcher passes them.
SPECULATION_ROLES = {"dspark": ("base", "dspark"), "mtp": ("base", "mtp"), "plain": ("base",)}
# The installer's own rule: a name containing "-0731" is of the 0731 generation.
GEN_0731 = "0731"
_0731_MARK = "-0731"

# Matched whole (fullmatch): a `$` would let a trailing newline through.
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
# A file name the roles join to ds4_gguf_dir: no directory part, no control characters, no leading dot.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.gguf")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


# The published figures, tokens a second: prefill of a 2k and a 12k prompt, plain decode (--no-spec) after a
# 2k prompt, DSpark decode, and the aggregate of 12 concurrent requests.
FIGURES = ("prefill_2k", "prefill_12k", "decode_2k", "dspark_decode", "aggregate_12")


class CatalogError(ValueError):
    """The catalog, or a generation/speculation asked of it, is not usable; the message names the value."""


def _where(generation, role=None, key=None):
    where = f"{CATALOG_VAR}[{generation!r}]"
    if role is not None:
        where += f".files.{role}"
    if key is not None:
        where += f".{key}"
    return where


def _check_file(generation, role, entry):
    if not isinstance(entry, dict):
        raise CatalogError(f"{_where(generation, role)} must be a mapping, got {entry!r}")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise CatalogError(
            f"{_where(generation, role, 'name')} must be a plain file name ending .gguf, got {name!r}"
        )
    repo = entry.get("repo")
    if not isinstance(repo, str) or not _REPO.fullmatch(repo):
        raise CatalogError(
            f"{_where(generation, role, 'repo')} must be a hub repo 'owner/name', got {repo!r}"
        )
    revision = entry.get("revision")
    if not isinstance(revision, str) or not _REVISION.fullmatch(revision):
        raise CatalogError(
            f"{_where(generation, role, 'revision')} must be a branch, tag or commit, got {revision!r}"
        )
    size = entry.get("size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
        raise CatalogError(
            f"{_where(generation, role, 'size')} must be a positive byte count or null, got {size!r}"
        )
    sha256 = entry.get("sha256")
    if sha256 is not None and (not isinstance(sha256, str) or not _SHA256.fullmatch(sha256)):
        raise CatalogError(
            f"{_where(generation, role, 'sha256')} must be 64 lowercase hex digits or null, got {sha256!r}"
        )
    # A drafter (or any file) only pairs with the base of its own generation, and the name says which.
    named_0731 = _0731_MARK in name
    if named_0731 != (generation == GEN_0731):
        owner = GEN_0731 if named_0731 else "a generation other than 0731"
        raise CatalogError(
            f"{_where(generation, role, 'name')} {name!r} belongs to {owner} by its name "
            f"('{_0731_MARK}' marks 0731 files): files never pair across generations"
        )


def _check_reference(generation, reference):
    where = f"{_where(generation)}.reference"
    if not isinstance(reference, dict):
        raise CatalogError(f"{where} must be a mapping of engine release to figures, got {reference!r}")
    for release, entry in reference.items():
        at = f"{where}[{release!r}]"
        if not is_release_tag(release):
            raise CatalogError(f"{where} has key {release!r} that is not a release tag like v0.5.0")
        if not isinstance(entry, dict):
            raise CatalogError(f"{at} must be a mapping with source, stamp and figures, got {entry!r}")
        for key in ("source", "stamp"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise CatalogError(f"{at}.{key} must be a non-empty text, got {entry.get(key)!r}")
        figures = entry.get("figures")
        if not isinstance(figures, dict) or not figures:
            raise CatalogError(
                f"{at}.figures must be a non-empty mapping of figure to tok/s, got {figures!r}"
            )
        unknown = sorted(set(figures) - set(FIGURES))
        if unknown:
            raise CatalogError(f"{at}.figures has unknown figures {unknown}; figures are {list(FIGURES)}")
        for figure, value in figures.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise CatalogError(f"{at}.figures.{figure} must be a positive tok/s, got {value!r}")
        stamps = entry.get("stamps", {})
        if not isinstance(stamps, dict) or any(
            figure not in figures or not is_release_tag(stamp) for figure, stamp in stamps.items()
        ):
            raise CatalogError(
                f"{at}.stamps must map figures of {at}.figures to release tags like v0.4.1, got {stamps!r}"
            )


def validate_catalog(catalog):
    """Raise CatalogError naming the first bad entry; return the catalog unchanged when it is sound."""
    if not isinstance(catalog, dict) or not catalog:
        raise CatalogError(
            f"{CATALOG_VAR} must be a non-empty mapping of generation to files, got {catalog!r}"
        )
    seen = {}
    for generation, spec in catalog.items():
        if not isinstance(generation, str):
            raise CatalogError(
                f"{CATALOG_VAR} has generation key {generation!r} that is not a string: quote it in YAML "
                f"(an unquoted 0731 reads as a number)"
            )
        if not isinstance(spec, dict) or not isinstance(spec.get("files"), dict):
            raise CatalogError(f"{_where(generation)} must be a mapping with a 'files' mapping, got {spec!r}")
        files = spec["files"]
        unknown = sorted(set(files) - set(ROLES))
        if unknown:
            raise CatalogError(
                f"{_where(generation)}.files has unknown roles {unknown}; roles are {list(ROLES)}"
            )
        if "base" not in files:
            raise CatalogError(f"{_where(generation)}.files has no 'base' file")
        if "reference" in spec:
            _check_reference(generation, spec["reference"])
        for role, entry in files.items():
            _check_file(generation, role, entry)
            name = entry["name"]
            if name in seen:
                raise CatalogError(f"{_where(generation, role, 'name')} {name!r} is also {seen[name]}")
            seen[name] = _where(generation, role)
    return catalog


def generation_of(filename, catalog=None):
    """The generation a GGUF belongs to, from its name; None when it cannot be told.

    A name listed in the catalog answers for itself; any other name containing "-0731" is a 0731 file,
    as the shell installer decides.
    """
    name = str(filename).rsplit("/", 1)[-1]
    if catalog is not None:
        validate_catalog(catalog)
        for generation, spec in catalog.items():
            if any(entry["name"] == name for entry in spec["files"].values()):
                return generation
    if _0731_MARK in name:
        return GEN_0731
    return None


def model_files(catalog, generation, speculation):
    """The files `generation` run with `speculation` needs, base first, each a copy with role and generation.

    Refuses (CatalogError) an unknown generation or mode, and a mode the generation has no file for
    (mtp on 0731, which has no MTP head).
    """
    validate_catalog(catalog)
    if generation not in catalog:
        raise CatalogError(
            f"{GENERATION_VAR} {generation!r} is not a generation of {CATALOG_VAR} "
            f"(known: {', '.join(catalog)})"
        )
    if speculation not in SPECULATION_ROLES:
        raise CatalogError(
            f"{SPECULATION_VAR} {speculation!r} is not a speculation mode "
            f"(known: {', '.join(SPECULATION_ROLES)})"
        )
    files = catalog[generation]["files"]
    chosen = []
    for role in SPECULATION_ROLES[speculation]:
        if role not in files:
            raise CatalogError(
                f"{SPECULATION_VAR} {speculation!r} needs a {role} file, and {GENERATION_VAR} {generation!r} "
                f"has none in {CATALOG_VAR}; choose one of: {', '.join(speculations_of(catalog, generation))}"
            )
        chosen.append(dict(files[role], role=role, generation=generation))
    return chosen


def speculations_of(catalog, generation):
    """The speculation modes `generation` has files for."""
    files = catalog[generation]["files"]
    return [mode for mode, roles in SPECULATION_ROLES.items() if all(role in files for role in roles)]


def other_generation_files(catalog, generation):
    """Every file of every generation but `generation`: what an upgrade may leave behind."""
    validate_catalog(catalog)
    return [
        dict(entry, role=role, generation=other)
        for other, spec in catalog.items()
        if other != generation
        for role, entry in spec["files"].items()
    ]


def reference_figures(catalog, generation, release):
    """The published figures that hold for `release` of `generation`: its own, or else those of the nearest
    earlier release that has some, saying so; None when no release up to it has any.

    {"release": the release the figures are of, "inherited": True when not `release`'s own, "source",
     "stamp", "figures": {FIGURE: tok/s}, "stamps": {FIGURE: the release each was measured at}, "note"}
    """
    validate_catalog(catalog)
    if generation not in catalog:
        raise CatalogError(
            f"{GENERATION_VAR} {generation!r} is not a generation of {CATALOG_VAR} "
            f"(known: {', '.join(catalog)})"
        )
    wanted = parse_release(release)
    published = catalog[generation].get("reference") or {}
    earlier = [tag for tag in published if parse_release(tag) <= wanted]
    if not earlier:
        return None
    tag = max(earlier, key=parse_release)
    entry = published[tag]
    inherited = tag != release
    note = (
        f"{release} has no published figures of its own; those of {tag} stand for it"
        if inherited
        else f"published with {tag}"
    )
    return {
        "release": tag,
        "inherited": inherited,
        "source": entry["source"],
        "stamp": entry["stamp"],
        "figures": dict(entry["figures"]),
        "stamps": {figure: entry.get("stamps", {}).get(figure, tag) for figure in entry["figures"]},
        "note": note,
    }
