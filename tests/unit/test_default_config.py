"""The roles work under Ansible's default configuration, as in a user's own project, AWX or ansible-navigator.

With the default `inject_facts_as_vars = True`, every fact a module returns and every registered or set_fact
result is also a plain variable, above inventory and role defaults: one that shares a public variable's name
replaces the user's value. The static test keeps the names apart; the run proves it where it once broke (the
host facts replaced the listen address ds4_host).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"


def public_variables() -> set[str]:
    names = set()
    for role in ROLES.iterdir():
        names |= set(yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {})
        specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())
        for entry in specs["argument_specs"].values():
            names |= set(entry.get("options") or {})
    return {name for name in names if name.startswith("ds4_")}


def module_fact_names() -> set[str]:
    """The keys of ansible_facts in each module's RETURN documentation."""
    names = set()
    for path in (REPO / "plugins" / "modules").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["RETURN"]:
                doc = yaml.safe_load(node.value.value) or {}
                names |= set((doc.get("ansible_facts") or {}).get("contains") or {})
    return names


def task_files() -> list[Path]:
    return [
        *ROLES.glob("*/tasks/*.yml"),
        *ROLES.glob("*/handlers/*.yml"),
        *(REPO / "playbooks").glob("*.yml"),
        REPO / "site.yml",
    ]


def registered_and_set_names() -> set[str]:
    names = set()

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("register"), str):
                names.add(node["register"])
            for key in ("ansible.builtin.set_fact", "set_fact"):
                if isinstance(node.get(key), dict):
                    names.update(set(node[key]) - {"cacheable"})
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in task_files():
        walk(yaml.safe_load(path.read_text()))
    return names


def test_the_names_are_read_from_the_code():
    # Guards the test itself: an empty set would make the next test pass whatever the code holds.
    assert "ds4_host" in public_variables() and "ds4_port" in public_variables()
    assert "ds4_build_target" in module_fact_names()
    assert "__ds4_launch" in registered_and_set_names() and "_ds4_fleet_plan" in registered_and_set_names()


def test_no_fact_or_result_shares_a_public_variable_name():
    public = public_variables()
    assert module_fact_names() & public == set()
    assert registered_and_set_names() & public == set()


PLAY = """
- name: Read the host as the preflight does, then use the public variables
  hosts: localhost
  connection: local
  gather_facts: false
  roles:
    - role: ds4.fleet.ds4_common
  tasks:
    - name: Read the host facts
      ds4.fleet.ds4_host_facts:
        gguf_dir: "{{ ds4_gguf_dir }}"
        install_root: "{{ ds4_root }}"
        port: "{{ ds4_port }}"
    - name: Show the listen address and where the roles reach the engine
      ansible.builtin.debug:
        msg: "{{ {'host': ds4_host, 'url': _ds4_api_url} | to_json }}"
"""


def test_converges_with_the_default_configuration(tmp_path):
    """A project of the user's own: no ansible.cfg of ours, every setting at Ansible's default."""
    (tmp_path / "play.yml").write_text(PLAY)
    # In the inventory, where users set it: facts rank above inventory variables, extra vars above facts.
    localhost = {"ds4_host": "192.0.2.7", "ansible_python_interpreter": sys.executable}
    inventory = {"all": {"hosts": {"localhost": localhost}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_LOCALHOST_WARNING="false",
    )
    ansible = shutil.which("ansible-playbook", path=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}")
    result = subprocess.run(
        [
            ansible,
            "-i",
            "hosts.yml",
            "play.yml",
            "-e",
            json.dumps({"ds4_gguf_dir": str(tmp_path), "ds4_root": str(tmp_path)}),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    shown = re.search(r'"msg": "(\{.*\})"', result.stdout)
    assert shown, result.stdout
    assert json.loads(shown.group(1).replace('\\"', '"')) == {
        "host": "192.0.2.7",
        "url": "http://192.0.2.7:8000",
    }


def test_the_playbooks_hosts_variable_is_documented():
    """A play's hosts are chosen before any role runs, so their variable has no role defaults to live in."""
    used = set()
    for path in (REPO / "playbooks").glob("*.yml"):
        for play in yaml.safe_load(path.read_text()):
            # Variables, not the group names quoted in the same expressions.
            used |= set(re.findall(r"(?<![\w'])ds4_\w+", str(play.get("hosts", ""))))
    doc = (REPO / "docs" / "variables.md").read_text().split("\n## Playbooks\n", 1)[1]
    documented = set(re.findall(r"^\| `(ds4_\w+)` \| `sparks` \|", doc, re.M))
    assert used == documented == {"ds4_target_hosts"}
