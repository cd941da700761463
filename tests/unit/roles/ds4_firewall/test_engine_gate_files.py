"""What the engine firewall installs for the engine gate is declared once, in ds4_firewall's vars/main.yml:
the script and the collection's module_utils files it imports, and no more."""

import ast
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[4]
ROLE = REPO / "roles" / "ds4_firewall"
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())


def test_the_gates_modules_are_those_its_script_imports():
    script = ROLE / "files" / Path(VARS["_ds4_gate_script"]).name
    names = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    spark = REPO / "plugins" / "module_utils" / "_spark"
    imported = {f"{name}.py" for name in names if (spark / f"{name}.py").is_file()}
    assert imported and sorted(VARS["_ds4_gate_modules"]) == sorted(imported)
    # The module imports nothing of the collection: on a Spark it lies beside the script, in no package.
    gate = (spark / "engine_gate.py").read_text()
    assert "ansible_collections" not in gate and "import listener" not in gate
