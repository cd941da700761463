"""Every inclusion of a role goes through a declared entry point, and no role reads another's results.

ansible-core validates an include_role's variables against the argument spec of the entry point named by
tasks_from, and skips the check when the role declares no entry point of that name: an inclusion of a
private task file is not validated at all. A registered result (`__ds4_*`) is private to the role that
registers it; a value one role hands another is declared in the giving entry point's argument spec.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "roles"
INCLUDES = ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role")


def tasks_of(node):
    """Every task in a task list or play, blocks and a play's sections included."""
    if isinstance(node, list):
        for item in node:
            yield from tasks_of(item)
    elif isinstance(node, dict):
        if any(key in node for key in ("block", "rescue", "always")):
            for key in ("block", "rescue", "always"):
                yield from tasks_of(node.get(key) or [])
        elif "hosts" in node:
            for key in ("pre_tasks", "roles", "tasks", "post_tasks", "handlers"):
                yield from tasks_of(node.get(key) or [])
            for role in node.get("roles") or []:
                yield {"include_role": {"name": role["role"] if isinstance(role, dict) else role}}
        else:
            yield node


def inclusions():
    """(file, role, entry point) of every include_role and import_role in the roles and playbooks."""
    files = sorted(ROLES.glob("*/tasks/*.yml")) + sorted((REPO / "playbooks").glob("*.yml"))
    found = []
    for path in files:
        for task in tasks_of(yaml.safe_load(path.read_text()) or []):
            for key in INCLUDES:
                if isinstance(task.get(key), dict):
                    args = task[key]
                    found.append((path.relative_to(REPO), args["name"], args.get("tasks_from", "main")))
    return found


def entry_points(role: str) -> dict:
    return yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def test_the_scan_finds_the_cross_role_inclusions():
    found = {(role, entry) for _, role, entry in inclusions()}
    assert ("ds4_engine", "build") in found and ("ds4_service", "launch") in found, found


@pytest.mark.parametrize("where,role,entry", inclusions(), ids=lambda v: str(v))
def test_each_inclusion_names_a_declared_entry_point(where, role, entry):
    assert entry in entry_points(role), f"{where} includes {role} tasks_from {entry}: no argument spec"


@pytest.mark.parametrize("role", sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir()))
def test_each_entry_point_has_its_task_file(role):
    for entry in entry_points(role):
        assert (ROLES / role / "tasks" / f"{entry}.yml").is_file(), f"{role}: {entry} has no task file"


def registered(role: Path) -> set[str]:
    names = set()
    for path in (role / "tasks").glob("*.yml"):
        names |= set(re.findall(r"^\s*register:\s*(__ds4_\w+)\s*$", path.read_text(), re.M))
    return names


def test_no_role_reads_a_result_another_role_registers():
    roles = [p for p in ROLES.iterdir() if (p / "tasks").is_dir()]
    owner = {name: role.name for role in roles for name in registered(role)}
    crossing = []
    for role in ROLES.iterdir():
        for path in [*role.glob("tasks/*.yml"), *role.glob("vars/*.yml"), *role.glob("templates/*")]:
            for name in set(re.findall(r"\b__ds4_\w+", path.read_text())):
                if name in owner and owner[name] != role.name:
                    crossing.append(f"{path.relative_to(REPO)} reads {name}, registered by {owner[name]}")
    assert not crossing, crossing


def test_no_role_reaches_outside_its_folder():
    """A role's files are its own: the collection's other files come through its plugins (a filter, a
    module), never a role_path that climbs out, which an installed or moved role would not find."""
    climbing = []
    for path in ROLES.glob("*/**/*"):
        if path.is_file() and path.suffix in (".yml", ".yaml", ".j2"):
            for line in path.read_text().splitlines():
                if re.search(r"role_path\s*(\}\}\s*)?(/\.\.|\|\s*dirname)", line):
                    climbing.append(f"{path.relative_to(REPO)}: {line.strip()}")
    assert not climbing, climbing
