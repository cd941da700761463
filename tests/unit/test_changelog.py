"""The changelog by convention: one fragment per change, one sentence each, named after the change; and
CHANGELOG.md as antsibull-changelog writes it from changelogs/changelog.yaml, never by hand."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FRAGMENTS = REPO / "changelogs" / "fragments"
# Fragments of the issues before this convention bundle many changes and stay as they are.
CONVENTION_FROM_ISSUE = 27


def sentences(text: str) -> int:
    """Sentences in an entry; what is in ``code`` (versions, file names) is not read."""
    prose = re.sub(r"``.*?``", "code", " ".join(text.split()))
    return len(re.findall(r"[.!?]\)?(?:\s+(?=[A-Z(])|$)", prose))


def fragments_under_the_convention():
    for path in sorted(FRAGMENTS.iterdir()):
        number = re.match(r"(\d+)-", path.name)
        if number and int(number[1]) >= CONVENTION_FROM_ISSUE:
            yield path


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("A change.", 1),
        ("The ``v0.6.5. Odd`` tag: its file; then (this) too.", 1),
        ("It changed. It also changed (twice).", 2),
        ("It changed. (And more.)", 2),
        ("No full stop", 0),
    ],
)
def test_sentences_are_counted_and_code_is_not_read(text, count):
    assert sentences(text) == count


@pytest.mark.parametrize("path", list(fragments_under_the_convention()), ids=lambda p: p.name)
def test_a_fragment_is_one_change_in_one_sentence(path):
    assert re.fullmatch(r"\d+-[a-z0-9]+(-[a-z0-9]+)*\.yml", path.name), "<issue>-<short-name>.yml"
    entries = [
        (section, entry)
        for section, items in (yaml.safe_load(path.read_text()) or {}).items()
        for entry in (items if isinstance(items, list) else [items])
    ]
    assert len(entries) == 1, f"{path.name}: one change, one entry; another change has its own fragment"
    section, entry = entries[0]
    assert sentences(entry) == 1, (
        f"{path.name} ({section}): one sentence that ends with a full stop: {entry!r}"
    )


def test_changelog_md_is_what_antsibull_changelog_writes(tmp_path):
    """With a release in changelog.yaml, `antsibull-changelog generate` writes CHANGELOG.md as it is; with
    none, it cannot, and CHANGELOG.md says so and names no version (the notes are the fragments)."""
    released = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())["releases"] or {}
    text = (REPO / "CHANGELOG.md").read_text()
    if not released:
        assert "No release yet" in text and not re.search(r"^#+ v?\d+\.\d+", text, re.M), text
        return
    shutil.copytree(REPO / "changelogs", tmp_path / "changelogs")
    shutil.copy(REPO / "galaxy.yml", tmp_path)
    tool = Path(sys.executable).parent / "antsibull-changelog"
    subprocess.run([str(tool), "generate"], cwd=tmp_path, check=True, capture_output=True)
    assert (tmp_path / "CHANGELOG.md").read_text() == text
