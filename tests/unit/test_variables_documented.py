"""Each role's variables agree in defaults/main.yml, meta/argument_specs.yml and docs/variables.md.

For every role in roles/:

- each variable of defaults/main.yml is an option of the `main` entry point of meta/argument_specs.yml, and
  each option there is a variable of defaults/main.yml (or of ds4_common's, which every role depends on);
- each option's `default` equals the value in defaults/main.yml, compared as parsed YAML (a spec without a
  `default` means null);
- a variable that both ds4_common and a role define has the same value in both;
- each public variable (`ds4_*`) has a row in the role's section (`## <role>`) of docs/variables.md whose
  default cell shows its value, and every row there names a variable of that role.

A default cell shows the value as YAML in one code span (`[aarch64]`, `"0731"`); a Jinja expression in a
default may be shown as a `<placeholder>`. A value too large to show (over LARGE_DEFAULT characters as
JSON) may be described in words instead.

An argument spec may leave out the default of a variable too large to show (over LARGE_DEFAULT characters
as JSON, the model catalog), or computed by a Jinja expression where its type is not a string (a bool:
ansible-doc and antsibull-docs refuse a string there), when its description says that the default lives in
defaults/main.yml.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

PROJECT = Path(__file__).resolve().parents[2]
ROLES = PROJECT / "roles"
DOC = PROJECT / "docs" / "variables.md"
COMMON = "ds4_common"
PUBLIC = re.compile(r"^ds4_")
# Above this many characters of compact JSON a default may be described in words in docs/variables.md.
LARGE_DEFAULT = 200


def load(path: Path):
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def role_names() -> list[str]:
    return sorted(p.name for p in ROLES.iterdir() if p.is_dir() and not p.name.startswith("."))


def defaults_of(role: str) -> dict:
    return load(ROLES / role / "defaults" / "main.yml") or {}


def options_of(role: str) -> dict | None:
    """The options of the `main` entry point, or None when the role has no such entry point."""
    specs = load(ROLES / role / "meta" / "argument_specs.yml") or {}
    main = (specs.get("argument_specs") or {}).get("main")
    if main is None:
        return None
    return main.get("options") or {}


def same(a, b) -> bool:
    """Equal as YAML values: True is not 1, 2 is 2.0, and containers compare element by element."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def show(value, limit: int = 160) -> str:
    """The value as compact JSON, cut short when long (the catalog)."""
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def param(check: str, role: str, variable: str):
    return pytest.param(role, variable, id=f"{check}-{role}-{variable}")


# --- docs/variables.md ---------------------------------------------------------------------------------

HEADING = re.compile(r"^##\s+`?(ds4_\w+)`?")
ROW = re.compile(r"^\|\s*`(ds4_\w+)`\s*\|")
CELL_SPLIT = re.compile(r"(?<!\\)\|")
JINJA = re.compile(r"\{\{.*?\}\}")
PLACEHOLDER = re.compile(r"<[^<>]*>")


def doc_sections() -> dict[str, dict[str, str]]:
    """Role -> {variable: its default cell}, from the tables under each `## <role>` heading."""
    sections: dict[str, dict[str, str]] = {}
    rows = None
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            heading = HEADING.match(line)
            rows = sections.setdefault(heading.group(1), {}) if heading else None
        elif line.startswith("# "):
            rows = None
        elif rows is not None and ROW.match(line):
            cells = [cell.strip() for cell in CELL_SPLIT.split(line.strip().strip("|"))]
            rows[cells[0].strip("`")] = cells[1].replace("\\|", "|") if len(cells) > 1 else ""
    return sections


def placeheld(value):
    """The value with each Jinja expression or <placeholder> in its strings made one and the same mark."""
    if isinstance(value, str):
        return PLACEHOLDER.sub("<>", JINJA.sub("<>", value))
    if isinstance(value, list):
        return [placeheld(v) for v in value]
    if isinstance(value, dict):
        return {k: placeheld(v) for k, v in value.items()}
    return value


def shown_default_problem(cell: str, value) -> str | None:
    """Why the default cell does not show the value, or None when it does."""
    code = re.fullmatch(r"`([^`]*)`", cell)
    if code is None:
        if len(json.dumps(value, default=str)) > LARGE_DEFAULT and cell:
            return None  # too large for a table: described in words
        return f"the default cell {cell!r} is not the value in one code span (`...`)"
    try:
        shown = yaml.safe_load(code.group(1))
    except yaml.YAMLError as exc:
        return f"the default cell {cell!r} is not YAML ({str(exc).splitlines()[0]})"
    if same(shown, value) or same(placeheld(shown), placeheld(value)):
        return None
    return f"the default cell {cell!r} reads {show(shown)}"


# --- the cases -------------------------------------------------------------------------------------------

ALL_ROLES = role_names()
COMMON_DEFAULTS = defaults_of(COMMON)

DEFAULT_CASES = [param("is_option", r, v) for r in ALL_ROLES for v in defaults_of(r)]
OPTION_CASES = [param("is_variable", r, o) for r in ALL_ROLES for o in options_of(r) or {}]
SPEC_DEFAULT_CASES = [param("spec_default", r, o) for r in ALL_ROLES for o in options_of(r) or {}]
SHARED_CASES = [
    param("shared", r, v) for r in ALL_ROLES if r != COMMON for v in defaults_of(r) if v in COMMON_DEFAULTS
]
DOC_CASES = [param("documented", r, v) for r in ALL_ROLES for v in defaults_of(r) if PUBLIC.match(v)]


def value_of(role: str, variable: str):
    """Where the variable's default lives: the role's defaults/main.yml, else ds4_common's."""
    defaults = defaults_of(role)
    if variable in defaults:
        return f"roles/{role}/defaults/main.yml", defaults[variable]
    return f"roles/{COMMON}/defaults/main.yml", COMMON_DEFAULTS.get(variable)


@pytest.mark.parametrize("role", ALL_ROLES)
def test_role_has_a_main_argument_spec(role):
    assert options_of(role) is not None, f"{role}: meta/argument_specs.yml has no `main` entry point"


@pytest.mark.parametrize(("role", "variable"), DEFAULT_CASES)
def test_each_default_is_an_option_of_the_argument_spec(role, variable):
    assert variable in (options_of(role) or {}), (
        f"{role}: {variable} is in defaults/main.yml but not an option of meta/argument_specs.yml (main)"
    )


@pytest.mark.parametrize(("role", "variable"), OPTION_CASES)
def test_each_option_of_the_argument_spec_has_a_default(role, variable):
    holders = [f"roles/{role}/defaults/main.yml"] + (
        [f"roles/{COMMON}/defaults/main.yml"] if role != COMMON else []
    )
    held = variable in defaults_of(role) or (role != COMMON and variable in COMMON_DEFAULTS)
    assert held, (
        f"{role}: {variable} is an option of meta/argument_specs.yml (main) "
        f"but in none of {', '.join(holders)}"
    )


@pytest.mark.parametrize(("role", "variable"), SPEC_DEFAULT_CASES)
def test_each_option_default_equals_the_role_default(role, variable):
    if variable not in defaults_of(role) and (role == COMMON or variable not in COMMON_DEFAULTS):
        pytest.skip(f"{role}: {variable} has no default to compare with (see the test that it has one)")
    where, value = value_of(role, variable)
    option = options_of(role)[variable] or {}
    spec_default = option.get("default")
    computed = isinstance(value, str) and "{{" in value and option.get("type", "str") != "str"
    if "default" not in option and (computed or len(json.dumps(value, default=str)) > LARGE_DEFAULT):
        description = (
            " ".join(option.get("description") or [])
            if isinstance(option.get("description"), list)
            else str(option.get("description", ""))
        )
        assert "defaults/main.yml" in description, (
            f"{role}: {variable}'s default is too large for meta/argument_specs.yml, or a Jinja expression "
            f"where its type is not a string, so its description must say it lives in defaults/main.yml"
        )
        return
    assert same(spec_default, value), (
        f"{role}: {variable} has the default {show(spec_default)}"
        f"{'' if 'default' in option else ' (none given)'} in meta/argument_specs.yml "
        f"but {show(value)} in {where}"
    )


@pytest.mark.parametrize(("role", "variable"), SHARED_CASES)
def test_a_shared_variable_a_role_defines_again_has_the_same_value(role, variable):
    ours, common = defaults_of(role)[variable], COMMON_DEFAULTS[variable]
    assert same(ours, common), (
        f"{role}: {variable} is {show(ours)} in roles/{role}/defaults/main.yml but {show(common)} in "
        f"roles/{COMMON}/defaults/main.yml; which one applies depends on the order Ansible loads them"
    )


@pytest.fixture(scope="module")
def documented():
    return doc_sections()


@pytest.mark.parametrize(("role", "variable"), DOC_CASES)
def test_each_public_variable_is_documented_with_its_default(documented, role, variable):
    assert role in documented, f"{role}: docs/variables.md has no section `## {role}` (for {variable})"
    rows = documented[role]
    assert variable in rows, f"{role}: {variable} has no row in the `## {role}` section of docs/variables.md"
    problem = shown_default_problem(rows[variable], defaults_of(role)[variable])
    assert problem is None, (
        f"{role}: {variable} in docs/variables.md: {problem}, "
        f"but roles/{role}/defaults/main.yml has {show(defaults_of(role)[variable])}"
    )


@pytest.mark.parametrize("role", ALL_ROLES)
def test_each_documented_variable_belongs_to_its_section(documented, role):
    stale = sorted(set(documented.get(role, {})) - set(defaults_of(role)))
    assert not stale, (
        f"{role}: docs/variables.md lists {', '.join(stale)} under `## {role}`, "
        f"but roles/{role}/defaults/main.yml does not define them"
    )


def test_each_section_of_the_reference_is_a_role(documented):
    unknown = sorted(set(documented) - set(ALL_ROLES))
    assert not unknown, (
        f"docs/variables.md has sections for {', '.join(unknown)}, which are not roles in roles/"
    )
