"""docs/sandbox.md's table of the values the sandbox sets in place of a real Spark's: every variable the
sandbox's group_vars set has a row, and every test a row names as the test of the shipped default's path
exists (a file and a test function in it). A row without such a test says "not yet" and why."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "sandbox.md"
GROUP_VARS = ROOT / "inventory" / "sandbox" / "group_vars"
HEADER = "| variable | sandbox value (file) | why | the test of the production path |"
TEST_REF = re.compile(r"`((?:tests|molecule)/[\w/.-]+\.py)::(\w+)`")


def table_rows(text):
    """{variable: its last cell}, from the table under HEADER."""
    lines = text.splitlines()
    start = lines.index(HEADER) + 2
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[-1]
    return rows


def sandbox_variables():
    """Every variable the sandbox inventory's group_vars set, but for the connection's."""
    names = set()
    for path in GROUP_VARS.glob("*.yml"):
        names |= set(yaml.safe_load(path.read_text()) or {})
    return {name for name in names if not name.startswith("ansible_")}


def problems(text, variables):
    rows = table_rows(text)
    found = [f"{name}: no row in docs/sandbox.md" for name in sorted(variables - set(rows))]
    for name, cell in rows.items():
        refs = TEST_REF.findall(cell)
        if not refs and not cell.startswith("not yet: "):
            found.append(f"{name}: names no test and does not say 'not yet: <why>'")
        for path, test in refs:
            source = ROOT / path
            if not source.is_file() or not re.search(rf"^def {test}\(", source.read_text(), re.MULTILINE):
                found.append(f"{name}: {path}::{test} does not exist")
    return found


def test_every_sandbox_override_has_a_row_naming_the_test_of_its_production_path():
    assert problems(DOC.read_text(), sandbox_variables()) == []


def test_the_check_finds_a_missing_row_a_missing_test_and_a_row_without_either():
    text = DOC.read_text()
    assert problems(text, sandbox_variables() | {"ds4_new_override"}) == [
        "ds4_new_override: no row in docs/sandbox.md"
    ]
    renamed = text.replace("::test_weights_need`", "::test_weights_needed`")
    assert problems(renamed, sandbox_variables()) == [
        "ds4_weights_space_bytes: tests/unit/plugins/module_utils/_host/test_preflight.py"
        "::test_weights_needed does not exist"
    ]
    bare = text.replace("| not yet: `infinity` needs", "| `infinity` needs")
    assert problems(bare, sandbox_variables()) == [
        "ds4_limit_memlock: names no test and does not say 'not yet: <why>'"
    ]
