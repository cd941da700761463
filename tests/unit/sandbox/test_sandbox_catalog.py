"""The sandbox's catalog (inventory/sandbox/group_vars/all.yml) stands in for the shipped one with the
stand-in hub's bytes only: the published figures it carries are the shipped catalog's, so that verify.yml
holds a sandbox Spark, and the sandbox's pair, to the same figures as a real one (scaled by
ds4_verify_reference_scale), with no extra variables."""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]


def catalog(path):
    return yaml.safe_load((ROOT / path).read_text())["ds4_model_catalog"]


SANDBOX = catalog("inventory/sandbox/group_vars/all.yml")
SHIPPED = catalog("roles/ds4_common/defaults/main.yml")


def test_the_sandbox_holds_one_spark_to_the_shipped_figures():
    assert SANDBOX["0731"]["reference"] == SHIPPED["0731"]["reference"]


@pytest.mark.parametrize(
    "quantization",
    [q for q, entry in SHIPPED["0731"]["quantizations"].items() if entry.get("pair_reference")],
)
def test_the_sandbox_holds_a_pair_to_the_shipped_two_spark_figures(quantization):
    shipped = SHIPPED["0731"]["quantizations"][quantization]["pair_reference"]
    assert SANDBOX["0731"]["quantizations"][quantization].get("pair_reference") == shipped


@pytest.mark.parametrize("generation", sorted(SANDBOX))
def test_the_sandbox_offers_every_file_the_shipped_generation_has(generation):
    """Each speculation file a shipped generation offers (the fork's drafter, upstream's support file, the
    legacy MTP head) is in the sandbox under its real name and repo, so a scenario can serve every mode that
    a Spark can rather than fall back to plain."""
    shipped = {role: (f["name"], f["repo"]) for role, f in SHIPPED[generation]["files"].items()}
    sandbox = {role: (f["name"], f["repo"]) for role, f in SANDBOX[generation]["files"].items()}
    assert sandbox == shipped
