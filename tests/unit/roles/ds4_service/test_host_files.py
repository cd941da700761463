"""What ds4_service installs in /usr/local/lib/ds4 is declared once, in its vars/main.yml: its scripts, and
the collection's module_utils files they import (ds4.fleet.module_utils_path finds them)."""

import ast
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[4]
ROLE = REPO / "roles" / "ds4_service"
# The package whose modules are copied onto each Spark, where the scripts import them by their bare names.
SPARK = REPO / "plugins" / "module_utils" / "_spark"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())


def bare_imports(path: Path) -> set[str]:
    """The collection's modules a file imports by their bare name, as it does on a Spark (fallbacks too)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return {name for name in names if (SPARK / f"{name}.py").is_file()}


def test_every_script_of_the_role_is_installed():
    assert sorted(VARS["_ds4_host_scripts"]) == sorted(p.name for p in (ROLE / "files").iterdir())


def test_the_modules_installed_are_those_the_scripts_import_and_no_more():
    wanted, todo = set(), [ROLE / "files" / name for name in VARS["_ds4_host_scripts"]]
    while todo:
        for name in bare_imports(todo.pop()) - wanted:
            wanted.add(name)
            todo.append(SPARK / f"{name}.py")
    assert wanted
    assert sorted(VARS["_ds4_host_modules"]) == sorted(f"{name}.py" for name in wanted)
