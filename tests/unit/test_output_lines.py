"""Every table and summary reads well under Ansible's default callback and result format (json) and in AWX.

That callback prints a result as JSON: a string's line breaks come out as `\\n` on one long line, while a
list prints an item a line. So each filter that makes text for people (`*_table`, `*_lines`) returns a list
of lines without a line break in any, and no task shows a message of several lines as one string. (The
scenario `collection` runs `ds4.fleet.status` with every Ansible setting at its default and reads the
same from its output.)
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.ds4.fleet.plugins.filter.ds4_fleet import FilterModule as FleetFilters
from test_entry_points import tasks_of

REPO = Path(__file__).resolve().parents[2]
DEBUG = ("ansible.builtin.debug", "debug")
# A template's expressions, whose line breaks are Jinja's whitespace, not the message's.
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)

PLAN = {
    "message": "fetch 1 file(s), 1.0 GiB.\n/var/lib/ds4/gguf: 9.0 GiB free",
    "fetch": [{"name": "new.gguf", "bytes": 1234567}],
    "remove_after_smoke": [{"path": "/g/old.gguf", "bytes": 70}],
    "keep": [{"name": "mtp.gguf", "reason": "in use by the running service"}],
}
OUTCOME = {"path": "/g/new.gguf", "action": "verified", "sha256": "a" * 64, "commit": "b" * 40}
GATEWAYS = {
    "gw01": {
        "servers": [
            {"name": "spark01", "status": "UP", "admin": "ready", "sessions": 0, "check": "L7OK", "up": True}
        ]
    },
    "gw02": {"servers": None, "error": "HAProxy's runtime API did not answer"},
}


def fleet_records():
    return FleetFilters().filters()["fleet_status"](
        [{"host": "spark01", "reading": None, "error": "unreachable:\nssh refused"}], ["spark01", "spark02"]
    )


# Each text-making filter with an input that has several entries (and a line break inside a value).
SAMPLES = {
    "fleet_status_table": lambda f: f(fleet_records(), "ds4 fleet"),
    "gateway_table": lambda f: f(GATEWAYS),
    "weights_plan_lines": lambda f: f(PLAN, True),
    "weights_outcome_lines": lambda f: f([OUTCOME, OUTCOME]),
    "weights_cleanup_lines": lambda f: f(PLAN),
}


def text_filters():
    """Every filter of the collection whose name says it makes text for people."""
    found = {}
    for path in sorted((REPO / "plugins" / "filter").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.ds4.fleet.plugins.filter.{path.stem}")
        for name, function in module.FilterModule().filters().items():
            if name.endswith(("_table", "_lines")):
                found[name] = function
    return found


def test_every_text_filter_has_a_sample_here():
    assert sorted(text_filters()) == sorted(SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_text_filter_returns_lines_without_line_breaks(name):
    lines = SAMPLES[name](text_filters()[name])
    assert isinstance(lines, list) and len(lines) > 1, lines
    assert all(isinstance(line, str) and "\n" not in line for line in lines), lines


def task_files():
    for folder in ("roles", "playbooks"):
        yield from sorted((REPO / folder).rglob("*.yml"))
    yield REPO / "site.yml"


def test_no_task_shows_several_lines_as_one_string():
    several = []
    for path in task_files():
        if "tasks" not in path.parts and path.parent.name not in ("playbooks", REPO.name):
            continue
        for task in tasks_of(yaml.safe_load(path.read_text()) or []):
            msg = next((task[key].get("msg") for key in DEBUG if isinstance(task.get(key), dict)), None)
            if isinstance(msg, str) and (
                "\n" in JINJA.sub("", msg.strip()) or re.search(r"join\(['\"](\\n|\n)['\"]\)", msg)
            ):
                several.append(f"{path.relative_to(REPO)}: {task.get('name')}")
    assert several == []
