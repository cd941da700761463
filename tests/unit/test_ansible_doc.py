"""`ansible-doc` shows every module, filter and role of the collection, as a user would look them up."""

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def filters() -> set[str]:
    names = set()
    for path in (REPO / "plugins" / "filter").glob("*.py"):
        module = importlib.import_module(f"ansible_collections.ds4.fleet.plugins.filter.{path.stem}")
        names |= set(module.FilterModule().filters())
    return names


PLUGINS = {
    "module": {p.stem for p in (REPO / "plugins" / "modules").glob("*.py")},
    "filter": filters(),
    "role": {p.name for p in (REPO / "roles").iterdir() if p.is_dir()},
}


def ansible_doc(*args):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    program = shutil.which("ansible-doc", path=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    result = subprocess.run([program, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    # A plugin whose documentation cannot be read is still listed, with a warning on stderr.
    assert "WARNING" not in result.stderr, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("kind", sorted(PLUGINS))
def test_every_plugin_and_role_is_documented(kind):
    names = sorted(f"ds4.fleet.{name}" for name in PLUGINS[kind])
    assert len(names) >= 5
    assert set(ansible_doc("-t", kind, "-l", "ds4.fleet", "--json")) >= set(names)
    docs = ansible_doc("-t", kind, "--json", *names)
    assert set(docs) == set(names)
    for name, doc in docs.items():
        if kind == "role":
            assert doc["entry_points"]["main"]["short_description"], name
        else:
            assert doc["doc"]["short_description"] and doc["doc"]["description"], name
            assert doc["examples"], name
