"""Which of the gateway's Sparks serve a vision model: they alone take a request body as large as images
need (the engine's HTTP limit, 16 images and 64 MiB a request); the others take no more than a text
request's (ds4_gateway_max_body_mb)."""

from __future__ import annotations

from typing import Any

from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import (
    CatalogError,
    family_generation,
    serving,
)


def vision_sparks(sparks: Any, settings_of: Any, catalog: dict, family: str) -> list:
    """The Sparks of `sparks` whose model has a vision encoder. `settings_of` maps a Spark to its variables
    (hostvars): its ds4_model_catalog, ds4_model_family and ds4_model_generation where it sets them, else
    `catalog`, `family` and the family's first generation. Refuses (CatalogError) a Spark whose family or
    generation the catalog lacks, naming it."""
    found = []
    for spark in sparks:
        own = settings_of.get(spark) or {}
        its_catalog = own.get("ds4_model_catalog") or catalog
        its_family = own.get("ds4_model_family") or family
        try:
            generation = own.get("ds4_model_generation") or family_generation(its_catalog, its_family)
            if serving(its_catalog, generation)["vision"]:
                found.append(spark)
        except CatalogError as exc:
            raise CatalogError(f"{spark}: {exc}") from exc
    return found
