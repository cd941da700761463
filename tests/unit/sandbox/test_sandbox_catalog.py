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


def test_the_sandbox_holds_a_tensor_pair_to_the_shipped_tensor_figures():
    assert SANDBOX["0731"]["tensor_reference"]["q2"] == SHIPPED["0731"]["tensor_reference"]["q2"]


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


# The stand-in hub's bytes: each file pinned by the repository and fake commit make_weights.py gives it,
# with its size and sha256 where the sandbox gives them, so that a change to the stand-in's bytes (a file
# added to a repository moves its commit) is caught here rather than by a scenario's refused fetch.
def pinned():
    """(where, entry) of each file the sandbox catalog names."""
    for generation, spec in SANDBOX.items():
        for role, entry in spec["files"].items():
            yield f"{generation}.files.{role}", entry
        for key, entry in (spec.get("quantizations") or {}).items():
            if entry.get("name"):
                yield f"{generation}.quantizations.{key}", entry


def test_each_file_of_the_sandbox_catalog_is_the_stand_in_hubs(hub_files):
    wrong = []
    for where, entry in pinned():
        served = hub_files.get(entry["name"])
        if served is None:
            wrong.append(f"{where}: {entry['name']} is not served by the stand-in hub")
            continue
        pin = (entry["repo"], entry["revision"])
        if pin != (served["repo"], served["commit"]):
            wrong.append(f"{where}: pinned at {pin}, served at {(served['repo'], served['commit'])}")
        for key in ("size", "sha256"):
            if entry.get(key) is not None and entry[key] != served[key]:
                wrong.append(f"{where}: {key} {entry[key]} where the hub serves {served[key]}")
    assert wrong == []


def test_the_sandbox_serves_every_family_of_the_shipped_catalog():
    families = {spec.get("family", "deepseek-v4-flash") for spec in SHIPPED.values()}
    assert {spec.get("family", "deepseek-v4-flash") for spec in SANDBOX.values()} == families
