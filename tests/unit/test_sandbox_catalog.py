"""The sandbox's model catalog (inventory/sandbox/group_vars/all.yml) pins the stand-in hub's files: each
file by the repository and fake commit make_weights.py gives it, with its size and sha256 where the catalog
gives them, so that a change to the stand-in's bytes (a file added to a repository moves its commit) is
caught here rather than by a scenario's refused fetch."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CATALOG = yaml.safe_load((ROOT / "inventory" / "sandbox" / "group_vars" / "all.yml").read_text())[
    "ds4_model_catalog"
]


def pinned():
    """(where, entry) of each file the sandbox catalog names."""
    for generation, spec in CATALOG.items():
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
    shipped = yaml.safe_load((ROOT / "roles" / "ds4_common" / "defaults" / "main.yml").read_text())
    families = {spec.get("family", "deepseek-v4-flash") for spec in shipped["ds4_model_catalog"].values()}
    assert {spec.get("family", "deepseek-v4-flash") for spec in CATALOG.values()} == families
