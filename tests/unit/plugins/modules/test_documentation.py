"""Every module's DOCUMENTATION, EXAMPLES and RETURN are YAML: ansible-doc and ansible-lint refuse a whole
page over one unquoted `key: value` inside a description, while the module itself still runs."""

import ast
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[4] / "plugins" / "modules").glob("*.py"))


def doc_strings(path: Path) -> dict:
    """The module's documentation strings, read without importing it."""
    return {
        node.targets[0].id: node.value.value
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN")
    }


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_documentation_is_yaml(path):
    docs = doc_strings(path)
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, f"{path.name} lacks {docs.keys()}"
    documentation = yaml.safe_load(docs["DOCUMENTATION"])
    assert documentation["module"] == path.stem
    assert isinstance(yaml.safe_load(docs["EXAMPLES"]), list)
    assert isinstance(yaml.safe_load(docs["RETURN"]), dict)
