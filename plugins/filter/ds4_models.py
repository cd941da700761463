"""Filters over the model catalog (ds4_model_catalog).

model_generation(filename, catalog=None)
    "0731" or "legacy" for a GGUF name or path; without a catalog, the collection's default catalog
    answers. Fails for a name it cannot place.
model_files(catalog, generation, speculation, quantization=None, extra=None, lineage="fork")
    The catalog entries (plus role and generation) that ds4_speculation needs on ds4_model_generation,
    base first, the base that of ds4_quantization (from the catalog or ds4_extra_quantizations), the
    speculation file that of the engine's lineage (upstream: dspark_support); fails for impossible pairs
    such as mtp on 0731 and for a quantization without a known file.
family_generation(catalog, family)
    The generation ds4_model_family serves unless ds4_model_generation says otherwise (ds4_model_generation's
    default); "" for a family the catalog lacks, which ds4_settings_check refuses naming ds4_model_family.
model_serving(catalog, generation)
    How the engine serves the generation (module_utils/_weights/catalog.py, serving): its family, API model
    id, context, streaming, --power, built-in MTP and vision; fails naming the generation.
family_speculation(catalog, generation)
    The speculation the generation's family is served with (ds4_speculation's default): dspark where it has
    a drafter, else mtp (GLM 5.3's own block), else plain; "dspark" for a generation the catalog lacks,
    which ds4_settings_check refuses naming ds4_model_generation.
family_context(catalog, generation)
    The context generation's family runs at (ds4_ctx's default): its catalog context.default, else 524288.
weight_file_path(name, directory, kind="file")
    The path of a weight file, or of a file beside it on its account (part, ranges, record, progress):
    the names are module_utils/_weights/file_names.py's.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import (
    DEFAULT_CONTEXT,
    CatalogError,
    family_generation,
    family_speculation,
    generation_of,
    model_files,
    serving,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.file_names import weight_file_path

# The catalog lives once, as role data; the filter reads the same file when no catalog is passed.
_DEFAULTS = Path(__file__).resolve().parents[2] / "roles" / "ds4_common" / "defaults" / "main.yml"


def _default_catalog():
    with open(_DEFAULTS, encoding="utf-8") as f:
        return yaml.safe_load(f)["ds4_model_catalog"]


def model_generation(filename, catalog=None):
    try:
        generation = generation_of(filename, _default_catalog() if catalog is None else catalog)
    except CatalogError as e:
        raise AnsibleFilterError(f"model_generation: {e}") from e
    if generation is None:
        raise AnsibleFilterError(
            f"model_generation: cannot tell the generation of {filename!r}: it is not a file of "
            "ds4_model_catalog and its name lacks '-0731'"
        )
    return generation


def model_files_filter(catalog, generation, speculation, quantization=None, extra=None, lineage="fork"):
    try:
        return model_files(catalog, generation, speculation, quantization, extra, lineage)
    except CatalogError as e:
        raise AnsibleFilterError(f"model_files: {e}") from e


def family_generation_filter(catalog, family):
    # The default of ds4_model_generation: a family the catalog lacks gives "", so that ds4_settings_check
    # can refuse it by name with every other bad setting, where a failing default would stop the check.
    try:
        return family_generation(catalog, family)
    except CatalogError:
        return ""


def model_serving(catalog, generation):
    try:
        return serving(catalog, generation)
    except CatalogError as e:
        raise AnsibleFilterError(f"model_serving: {e}") from e


def family_speculation_filter(catalog, generation):
    # ds4_speculation's default: a generation the catalog lacks gives the drafter, as before families, and
    # the settings check refuses the generation by name.
    try:
        return family_speculation(catalog, generation)
    except CatalogError:
        return "dspark"


def family_context(catalog, generation):
    # ds4_ctx's default: a generation the catalog lacks falls back to the engine's, and the settings check
    # refuses the generation by name.
    try:
        return serving(catalog, generation)["context_default"] or DEFAULT_CONTEXT
    except CatalogError:
        return DEFAULT_CONTEXT


def weight_file_path_filter(name, directory, kind="file"):
    try:
        return weight_file_path(name, directory, kind)
    except ValueError as e:
        raise AnsibleFilterError(f"weight_file_path: {e}") from e


class FilterModule:
    def filters(self):
        return {
            "model_generation": model_generation,
            "model_files": model_files_filter,
            "family_generation": family_generation_filter,
            "family_speculation": family_speculation_filter,
            "family_context": family_context,
            "model_serving": model_serving,
            "weight_file_path": weight_file_path_filter,
        }
