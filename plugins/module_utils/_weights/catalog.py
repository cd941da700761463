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

and the quantizations the engine publishes for it (its download targets), besides the one `files.base` is:

    "base_quantization": "q2",          # what files.base is; the default of ds4_quantization
    "layers": 43,                       # the model's transformer layers (a pair's split is checked on it)
    "quantizations": {"q4": QUANT, ...}
    QUANT = FILE (name null where the engine publishes no file name yet) + {"approx_bytes": int,
            "description": str, "pair_layers": "0:K" (the published coordinator slice, optional)}

and the figures published for two Sparks serving a quantization in the engine's tensor mode (issue 54; the
pipeline's are the quantization's `pair_reference`), by quantization key, the base's among them:

    "tensor_reference": {"q2": {"source": str, "stamp": str, "figures": {FIGURE: tok/s, ...}}}

An operator adds a quantization, or the file of one published without a name, in ds4_extra_quantizations
({generation: {key: FILE}}), with its size and sha256: nothing else vouches for the bytes.

Families (issue 53): each generation belongs to a model family, and says how the engine serves it; every key
is optional, and a generation without them is DeepSeek V4 Flash served as before:

    "family": "glm-5.3-flash",          # the family (default deepseek-v4-flash); ds4_model_family picks one,
                                        # which serves its first generation unless ds4_model_generation says
    "model_id": "deepseek-v4-flash",    # the id the engine's API serves it as
    "context": {"default": 16384, "max": 16384},    # the family's context, and the most it allows
    "streamed": {"cache_experts_gb": 64, "resident_bytes": int},   # served only by streaming its experts
                                        # from local disk (--ssd-streaming), with a pinned expert cache
    "power": 100,                       # --power N, where the family requires it
    "builtin_mtp": true,                # speculation mtp is the model's own block (--mtp, no file)

A file may carry `approx_bytes` (the published size, for the fits) where its exact size is not published;
files.vision is the vision encoder (--vision FILE), loaded whatever the speculation. The values the engine
does not publish are named in the generation's `guessed`, each with why:

    "guessed": {"files.base.repo": "the download target's repository, as for ds4f-q2"}
"""

from __future__ import annotations

import re

from ansible_collections.ds4.fleet.plugins.module_utils._spark.version import (
    is_commit_release,
    is_release_tag,
    parse_release,
)

CATALOG_VAR = "ds4_model_catalog"
FAMILY_VAR = "ds4_model_family"
GENERATION_VAR = "ds4_model_generation"
# A generation that names no family: the one family the catalog knew before families.
DEFAULT_FAMILY = "deepseek-v4-flash"
DEFAULT_MODEL_ID = "deepseek-v4-flash"
# The context a family that sets none runs at: the engine's own default since v0.6.
DEFAULT_CONTEXT = 524288
SPECULATION_VAR = "ds4_speculation"
QUANTIZATION_VAR = "ds4_quantization"
# What files.base is where a generation does not say: the engine's base download target, ds4f-q2.
BASE_QUANTIZATION = "q2"
EXTRA_QUANT_VAR = "ds4_extra_quantizations"

# dspark_support: upstream's DSpark support GGUF (`--dspark --mtp-model FILE`), where the fork loads its
# drafter (dspark); module_utils/_engine/lineage.py says which lineage takes which.
ROLES = ("base", "dspark", "mtp", "dspark_support", "vision")
# The files each speculation mode loads, in the order the launcher passes them (the fork's; upstream's
# in model_files).
SPECULATION_ROLES = {"dspark": ("base", "dspark"), "mtp": ("base", "mtp"), "plain": ("base",)}
LINEAGE_VAR = "ds4_engine_lineage"
# The installer's own rule: a name containing "-0731" is of the 0731 generation.
GEN_0731 = "0731"
_0731_MARK = "-0731"

# Matched whole (fullmatch): a `$` would let a trailing newline through.
_SHA256 = re.compile(r"[0-9a-f]{64}")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
# A file name the roles join to ds4_gguf_dir: no directory part, no control characters, no leading dot.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*\.gguf")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_QUANT_KEY = re.compile(r"[a-z0-9][a-z0-9._-]*")
_FAMILY = re.compile(r"[a-z0-9][a-z0-9._-]*")
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]*")
# A coordinator's slice as the engine's --layers takes it: it owns layer 0 (the forward topology).
_COORD_LAYERS = re.compile(r"0:([0-9]+)")


# The published figures, tokens a second: prefill of a 2k and a 12k prompt, plain decode (--no-spec) after a
# 2k prompt, DSpark decode, and the aggregate of 12 concurrent requests.
FIGURES = ("prefill_2k", "prefill_12k", "decode_2k", "dspark_decode", "aggregate_12")


class CatalogError(ValueError):
    """The catalog, or a generation/speculation asked of it, is not usable; the message names the value."""


def _known_generation(catalog, generation):
    """Refuse a generation the catalog does not have, naming the ones it has."""
    if generation not in catalog:
        raise CatalogError(
            f"{GENERATION_VAR} {generation!r} is not a generation of {CATALOG_VAR} "
            f"(known: {', '.join(catalog)})"
        )


def _where(generation, role=None, key=None):
    where = f"{CATALOG_VAR}[{generation!r}]"
    if role is not None:
        where += f".{role}" if role.startswith("quantizations") else f".files.{role}"
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
    approx = entry.get("approx_bytes")
    if approx is not None and not _positive(approx):
        raise CatalogError(
            f"{_where(generation, role, 'approx_bytes')} must be a positive byte count or absent, "
            f"got {approx!r}"
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


def _positive(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _check_family_fields(generation, spec):
    """The keys that say which family a generation is of and how the engine serves it."""
    where = _where(generation)
    family = spec.get("family", DEFAULT_FAMILY)
    if not isinstance(family, str) or not _FAMILY.fullmatch(family):
        raise CatalogError(
            f"{where}.family must be a short lowercase name like glm-5.3-flash, got {family!r}"
        )
    model_id = spec.get("model_id", DEFAULT_MODEL_ID)
    if not isinstance(model_id, str) or not _MODEL_ID.fullmatch(model_id):
        raise CatalogError(
            f"{where}.model_id must be the API's model id, like deepseek-v4-flash, got {model_id!r}"
        )
    context = spec.get("context", {})
    if not isinstance(context, dict) or set(context) - {"default", "max"}:
        raise CatalogError(f"{where}.context must be a mapping of default and max tokens, got {context!r}")
    for key in ("default", "max"):
        if context.get(key) is not None and not _positive(context[key]):
            raise CatalogError(
                f"{where}.context.{key} must be a positive number of tokens, got {context[key]!r}"
            )
    if context.get("default") and context.get("max") and context["default"] > context["max"]:
        raise CatalogError(
            f"{where}.context: the default {context['default']} exceeds the max {context['max']}"
        )
    streamed = spec.get("streamed")
    if streamed is not None:
        if not isinstance(streamed, dict):
            raise CatalogError(f"{where}.streamed must be a mapping, got {streamed!r}")
        for key, what in (
            ("cache_experts_gb", "a positive number of GB"),
            ("resident_bytes", "a byte count"),
        ):
            if not _positive(streamed.get(key)):
                raise CatalogError(f"{where}.streamed.{key} must be {what}, got {streamed.get(key)!r}")
    power = spec.get("power")
    if power is not None and (not _positive(power) or power > 100):
        raise CatalogError(
            f"{where}.power must be the --power percentage, 1 to 100, or absent, got {power!r}"
        )
    if not isinstance(spec.get("builtin_mtp", False), bool):
        raise CatalogError(f"{where}.builtin_mtp must be true or false, got {spec['builtin_mtp']!r}")


def _check_guessed(generation, spec):
    """`guessed`: {dotted path of a value of the generation: why it was guessed}, the values the engine does
    not publish (docs/models.md names each)."""
    where = f"{_where(generation)}.guessed"
    guessed = spec.get("guessed", {})
    if not isinstance(guessed, dict):
        raise CatalogError(
            f"{where} must be a mapping of a value's path to why it was guessed, got {guessed!r}"
        )
    for path, why in guessed.items():
        if not isinstance(why, str) or not why.strip():
            raise CatalogError(
                f"{where}: the guess of {path!r} must say why the value was guessed, got {why!r}"
            )
        node = spec
        for part in str(path).split("."):
            if not isinstance(node, dict) or part not in node:
                raise CatalogError(f"{where} names {path!r}, which the generation does not have")
            node = node[part]


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
        _check_figures(at, entry)
        figures = entry["figures"]
        stamps = entry.get("stamps", {})
        if not isinstance(stamps, dict) or any(
            figure not in figures or not is_release_tag(stamp) for figure, stamp in stamps.items()
        ):
            raise CatalogError(
                f"{at}.stamps must map figures of {at}.figures to release tags like v0.4.1, got {stamps!r}"
            )


def _check_figures(at, entry):
    """A set of published figures: its source and stamp in words, and tok/s by figure."""
    if not isinstance(entry, dict):
        raise CatalogError(f"{at} must be a mapping with source, stamp and figures, got {entry!r}")
    for key in ("source", "stamp"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise CatalogError(f"{at}.{key} must be a non-empty text, got {entry.get(key)!r}")
    figures = entry.get("figures")
    if not isinstance(figures, dict) or not figures:
        raise CatalogError(f"{at}.figures must be a non-empty mapping of figure to tok/s, got {figures!r}")
    unknown = sorted(set(figures) - set(FIGURES))
    if unknown:
        raise CatalogError(f"{at}.figures has unknown figures {unknown}; figures are {list(FIGURES)}")
    for figure, value in figures.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise CatalogError(f"{at}.figures.{figure} must be a positive tok/s, got {value!r}")


def _check_tensor_reference(generation, spec):
    """A tensor pair's published figures, by quantization key of the generation (the base's too)."""
    at = f"{_where(generation)}.tensor_reference"
    published = spec["tensor_reference"]
    if not isinstance(published, dict):
        raise CatalogError(
            f"{at} must be a mapping of quantization to its published figures, got {published!r}"
        )
    # Keyed as tensor_parallel is: a quantization may be the operator's (ds4_extra_quantizations).
    for key, entry in published.items():
        if not isinstance(key, str) or not _QUANT_KEY.fullmatch(key):
            raise CatalogError(f"{at} has {key!r}, not a quantization key like q2")
        _check_figures(f"{at}[{key!r}]", entry)


def _check_quantizations(generation, spec):
    where = f"{_where(generation)}.quantizations"
    base_key = spec.get("base_quantization", BASE_QUANTIZATION)
    if not isinstance(base_key, str) or not _QUANT_KEY.fullmatch(base_key):
        raise CatalogError(
            f"{_where(generation)}.base_quantization must be a short lowercase name like q2, got {base_key!r}"
        )
    layers = spec.get("layers")
    if layers is not None and (isinstance(layers, bool) or not isinstance(layers, int) or layers < 2):
        raise CatalogError(f"{_where(generation)}.layers must be a layer count from 2 up, got {layers!r}")
    quants = spec.get("quantizations", {})
    if not isinstance(quants, dict):
        raise CatalogError(f"{where} must be a mapping of quantization to its base file, got {quants!r}")
    for key, entry in quants.items():
        at = f"{where}[{key!r}]"
        if not isinstance(key, str) or not _QUANT_KEY.fullmatch(key) or key == base_key:
            raise CatalogError(
                f"{where} has key {key!r}: a short lowercase name like q4, other than base_quantization"
            )
        if not isinstance(entry, dict):
            raise CatalogError(f"{at}: a quantization entry must be a mapping, got {entry!r}")
        approx = entry.get("approx_bytes")
        if isinstance(approx, bool) or not isinstance(approx, int) or approx <= 0:
            raise CatalogError(f"{at}.approx_bytes must be a positive byte count, got {approx!r}")
        split = entry.get("pair_layers")
        if split is not None and not (isinstance(split, str) and _COORD_LAYERS.fullmatch(split)):
            raise CatalogError(f"{at}.pair_layers must be the coordinator's slice 0:K, got {split!r}")
        if entry.get("pair_reference") is not None:
            _check_figures(f"{at}.pair_reference", entry["pair_reference"])
        if entry.get("name") is not None:
            _check_file(generation, f"quantizations[{key!r}]", entry)


def validate_extra_quantizations(catalog, extra):
    """Raise CatalogError naming the first bad entry of ds4_extra_quantizations; return it when sound.

    Each entry is a whole file with its size and sha256 (the operator vouches for the bytes), for a
    generation of the catalog; it may give the file of a quantization the catalog knows without a name,
    never replace one the catalog names."""
    if extra in (None, {}):
        return {}
    if not isinstance(extra, dict):
        raise CatalogError(
            f"{EXTRA_QUANT_VAR} must be a mapping of generation to quantizations, got {extra!r}"
        )
    for generation, quants in extra.items():
        if generation not in catalog:
            raise CatalogError(
                f"{EXTRA_QUANT_VAR} has generation {generation!r} that {CATALOG_VAR} lacks "
                f"(known: {', '.join(catalog)})"
            )
        if not isinstance(quants, dict):
            raise CatalogError(f"{EXTRA_QUANT_VAR}[{generation!r}] must be a mapping, got {quants!r}")
        spec = catalog[generation]
        for key, entry in quants.items():
            at = f"{EXTRA_QUANT_VAR}[{generation!r}][{key!r}]"
            if (
                not isinstance(key, str)
                or not _QUANT_KEY.fullmatch(key)
                or key == spec.get("base_quantization", BASE_QUANTIZATION)
            ):
                raise CatalogError(f"{at}: the key must be a short lowercase name other than the base's")
            if not isinstance(entry, dict):
                raise CatalogError(f"{at} must be a mapping with name, repo, revision, size and sha256")
            for needed in ("size", "sha256"):
                if entry.get(needed) is None:
                    raise CatalogError(
                        f"{at}.{needed} is required: an operator's quantization is fetched only against the "
                        "size and sha256 its entry gives"
                    )
            _check_file(generation, f"quantizations[{key!r}]", entry)
            known = spec.get("quantizations", {}).get(key)
            if known is not None and known.get("name") is not None:
                raise CatalogError(
                    f"{at}: {CATALOG_VAR}[{generation!r}] already names the file of {key!r} "
                    f"({known['name']}); add a quantization under another key"
                )
    return extra


def quantizations_of(catalog, generation, extra=None):
    """{key: entry} of every quantization of `generation`, the base one first, with the operator's added;
    each entry carries `bytes` (its exact size, else the approximate one) and `named` (a file to fetch)."""
    spec = catalog[generation]
    base = spec["files"]["base"]
    approx = base.get("size") or base.get("approx_bytes")
    out = {
        spec.get("base_quantization", BASE_QUANTIZATION): dict(
            base, approx_bytes=approx, bytes=approx, named=True
        )
    }
    added = (extra or {}).get(generation, {})
    for key in [
        *spec.get("quantizations", {}),
        *(k for k in added if k not in spec.get("quantizations", {})),
    ]:
        entry = dict(spec.get("quantizations", {}).get(key, {}))
        if key in added:
            entry.update(added[key])
        size = entry.get("size") or entry.get("approx_bytes")
        out[key] = dict(entry, bytes=size, named=entry.get("name") is not None)
    return out


def quantization_entry(catalog, generation, quantization=None, extra=None):
    """(key, entry) of the quantization `quantization` (None: the base one) of `generation`."""
    quants = quantizations_of(catalog, generation, extra)
    key = quantization or next(iter(quants))
    if key not in quants:
        raise CatalogError(
            f"{QUANTIZATION_VAR} {key!r} is not a quantization of {CATALOG_VAR}[{generation!r}] "
            f"(known: {', '.join(quants)}); add one in {EXTRA_QUANT_VAR} with its size and sha256"
        )
    entry = quants[key]
    if not entry["named"]:
        raise CatalogError(
            f"{QUANTIZATION_VAR} {key!r} of {generation!r} has no published file name in {CATALOG_VAR}: "
            f"give its file (name, repo, revision, size, sha256) in "
            f"{EXTRA_QUANT_VAR}[{generation!r}][{key!r}]"
        )
    return key, entry


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
        _check_family_fields(generation, spec)
        _check_quantizations(generation, spec)
        if "tensor_reference" in spec:
            _check_tensor_reference(generation, spec)
        _check_guessed(generation, spec)
        for role, entry in files.items():
            _check_file(generation, role, entry)
            name = entry["name"]
            if name in seen:
                raise CatalogError(f"{_where(generation, role, 'name')} {name!r} is also {seen[name]}")
            seen[name] = _where(generation, role)
        for key, entry in spec.get("quantizations", {}).items():
            name = entry.get("name")
            if name is not None:
                if name in seen:
                    raise CatalogError(
                        f"{_where(generation)}.quantizations[{key!r}].name {name!r} is also {seen[name]}"
                    )
                seen[name] = f"{_where(generation)}.quantizations[{key!r}]"
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


def _roles(speculation, lineage, builtin_mtp=False):
    if speculation == "mtp" and builtin_mtp:
        # The model's own MTP block (GLM 5.3's --mtp): no file to load beside the base.
        return ("base",)
    # Upstream speculates by drafter with its support GGUF, not the fork's drafter; the legacy MTP head is
    # the fork's launcher's (upstream's --mtp-model is the support file's flag): not offered there.
    if lineage == "upstream" and speculation == "mtp":
        raise CatalogError(
            f"{SPECULATION_VAR} 'mtp' (the legacy MTP head) is the fork's: {LINEAGE_VAR} upstream speculates "
            "with dspark (its DSpark support file) or none (plain)"
        )
    if lineage == "upstream" and speculation == "dspark":
        return ("base", "dspark_support")
    return SPECULATION_ROLES[speculation]


def model_files(catalog, generation, speculation, quantization=None, extra=None, lineage="fork"):
    """The files `generation` run with `speculation` needs, base first, each a copy with role and generation;
    the base is that of `quantization` (None: the catalog's base, files.base), from the catalog or the
    operator's `extra` (ds4_extra_quantizations), and carries its `quantization` key. `lineage` (fork,
    upstream) picks the speculation file: the fork's drafter (dspark) or upstream's support GGUF
    (dspark_support).

    Refuses (CatalogError) an unknown generation, mode or quantization, a quantization published without a
    file name nobody gave, and a mode the generation has no file for (mtp on 0731, which has no MTP head).
    """
    validate_catalog(catalog)
    validate_extra_quantizations(catalog, extra)
    _known_generation(catalog, generation)
    if speculation not in SPECULATION_ROLES:
        raise CatalogError(
            f"{SPECULATION_VAR} {speculation!r} is not a speculation mode "
            f"(known: {', '.join(SPECULATION_ROLES)})"
        )
    files = catalog[generation]["files"]
    chosen = []
    for role in _roles(speculation, lineage, catalog[generation].get("builtin_mtp", False)):
        if role not in files:
            whose = f" on {LINEAGE_VAR} {lineage}" if role == "dspark_support" else ""
            raise CatalogError(
                f"{SPECULATION_VAR} {speculation!r}{whose} needs a {role} file, and {GENERATION_VAR} "
                f"{generation!r} has none in {CATALOG_VAR}; choose one of: "
                f"{', '.join(speculations_of(catalog, generation))}, or leave {SPECULATION_VAR} unset for "
                f"the family's own ({family_speculation(catalog, generation)})"
            )
        chosen.append(dict(files[role], role=role, generation=generation))
    key, entry = quantization_entry(catalog, generation, quantization, extra)
    fields = ("name", "repo", "revision", "size", "sha256")
    chosen[0] = dict({f: entry.get(f) for f in fields}, role="base", generation=generation, quantization=key)
    if "vision" in files:
        # The vision encoder serves images whatever the speculation.
        chosen.append(dict(files["vision"], role="vision", generation=generation))
    return chosen


def speculations_of(catalog, generation):
    """The speculation modes `generation` has files for."""
    spec = catalog[generation]
    files = spec["files"]
    return [
        mode
        for mode, roles in SPECULATION_ROLES.items()
        if all(role in files for role in _roles(mode, "fork", spec.get("builtin_mtp", False)))
    ]


def family_speculation(catalog, generation):
    """The speculation `generation` is served with unless ds4_speculation says otherwise: its drafter where it
    has one (V4 Flash, Vision-Exp), else its MTP (GLM 5.3's own block), else none (V4.1, Qwen3.8)."""
    validate_catalog(catalog)
    _known_generation(catalog, generation)
    # SPECULATION_ROLES is in that order, and plain needs the base alone, which every generation has.
    return speculations_of(catalog, generation)[0]


def family_of(catalog, generation):
    """The family `generation` belongs to."""
    return catalog[generation].get("family", DEFAULT_FAMILY)


def families_of(catalog):
    """{family: [its generations, in the catalog's order]}."""
    validate_catalog(catalog)
    families = {}
    for generation in catalog:
        families.setdefault(family_of(catalog, generation), []).append(generation)
    return families


def family_generation(catalog, family):
    """The generation `family` serves unless ds4_model_generation says otherwise: its first in the catalog."""
    families = families_of(catalog)
    if family not in families:
        raise CatalogError(
            f"{FAMILY_VAR} {family!r} is not a family of {CATALOG_VAR} (known: {', '.join(families)})"
        )
    return families[family][0]


def check_family(catalog, family, generation):
    """Refuse a generation of another family than `family`, naming the setting that would serve it."""
    family_generation(catalog, family)
    if generation not in catalog:
        return
    own = family_of(catalog, generation)
    if own != family:
        raise CatalogError(
            f"{GENERATION_VAR} {generation!r} is of {FAMILY_VAR} {own!r}, not {family!r}: set "
            f"{FAMILY_VAR}: {own} to serve it, or leave {GENERATION_VAR} unset to serve {family}'s "
            f"{family_generation(catalog, family)!r}"
        )


def serving(catalog, generation):
    """How the engine serves `generation`: its family, API model id, context (default and max, None where
    the family sets none), whether it is only streamed (with its pinned expert cache and resident bytes),
    the --power it requires, whether its MTP is built in, and whether it has a vision encoder."""
    validate_catalog(catalog)
    _known_generation(catalog, generation)
    spec = catalog[generation]
    context = spec.get("context", {})
    streamed = spec.get("streamed") or {}
    return {
        "family": family_of(catalog, generation),
        "generation": generation,
        "model_id": spec.get("model_id", DEFAULT_MODEL_ID),
        "context_default": context.get("default"),
        "context_max": context.get("max"),
        "streamed": bool(streamed),
        "cache_experts_gb": streamed.get("cache_experts_gb"),
        "resident_bytes": streamed.get("resident_bytes"),
        "power": spec.get("power"),
        "builtin_mtp": spec.get("builtin_mtp", False),
        "vision": "vision" in spec["files"],
    }


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
    _known_generation(catalog, generation)
    if is_commit_release(release):
        # Figures are published by release tag: a commit has no place among them, so none is inherited.
        return None
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


def tensor_reference_figures(catalog, generation, quantization):
    """The published figures of two Sparks serving `quantization` of `generation` in the engine's tensor mode
    (the generation's `tensor_reference`), in pair_reference_figures' shape; None when none are published."""
    validate_catalog(catalog)
    _known_generation(catalog, generation)
    published = (catalog[generation].get("tensor_reference") or {}).get(quantization)
    return _two_sparks(published, quantization, "in tensor mode")


PAIR_MODES = ("pipeline", "tensor")


def pair_figures(catalog, generation, quantization, mode):
    """The figures a pair serving `quantization` is held to: those published for its `mode` (ds4_pairs),
    the tensor mode's or the pipeline's; None when none are published."""
    if mode not in PAIR_MODES:
        raise CatalogError(f"a pair's mode is pipeline or tensor, got {mode!r}")
    if mode == "tensor":
        return tensor_reference_figures(catalog, generation, quantization)
    return pair_reference_figures(catalog, generation, quantization)


def pair_reference_figures(catalog, generation, quantization):
    """The published figures of two Sparks serving `quantization` of `generation` as a pair (its catalog
    entry's `pair_reference`), in reference_figures' shape with "pair": True and no release (the engine
    published them at a commit, for no release in particular); None when none are published.

    Only the figures published are there (the contract: prefill and generation at 2k for 0731 q4)."""
    validate_catalog(catalog)
    _known_generation(catalog, generation)
    entry = (catalog[generation].get("quantizations") or {}).get(quantization) or {}
    return _two_sparks(entry.get("pair_reference"), quantization, "as a pair")


def _two_sparks(published, quantization, how):
    """Figures published for two Sparks (a pair_reference or tensor_reference entry) in reference_figures'
    shape; None when none are published."""
    if not published:
        return None
    return {
        "release": None,
        "inherited": False,
        "pair": True,
        "quantization": quantization,
        "source": published["source"],
        "stamp": published["stamp"],
        "figures": dict(published["figures"]),
        "stamps": {},
        "note": f"two Sparks serving {quantization} {how}",
    }
