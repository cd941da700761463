"""No document in the tarball links to what the tarball lacks: Galaxy shows README.md as the collection's
landing page, and a user reads docs/ and the role READMEs from the installed collection, where the
repository's tests/, Makefile, molecule/ and the sandbox are absent. Each relative link of a shipped
Markdown file must name a file or folder the tarball holds, and its #anchor a heading of that file."""

import re
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
# [text](target), the target without spaces; images too.
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """The tarball's files and folders, path -> its text for Markdown files (None for the others)."""
    out = tmp_path_factory.mktemp("build")
    (out / "ansible.cfg").write_text("")
    subprocess.run(
        [REPO / ".venv" / "bin" / "ansible-galaxy", "collection", "build", "--output-path", out, REPO],
        check=True,
        capture_output=True,
        env={"ANSIBLE_CONFIG": str(out / "ansible.cfg"), "PATH": "/usr/bin:/bin", "HOME": str(out)},
    )
    (tarball,) = out.glob("*.tar.gz")
    files = {}
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            name = member.name.rstrip("/")
            is_md = member.isfile() and name.endswith(".md")
            files[name] = tar.extractfile(member).read().decode() if is_md else None
    return files


def anchors(markdown):
    """GitHub's anchors of a Markdown file's headings."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", markdown), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def broken_links(files):
    broken = []
    for name, text in files.items():
        if text is None:
            continue
        for target in LINK.findall(FENCE.sub("", text)):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto: and the like
            path, _hash, anchor = target.partition("#")
            resolved = str((Path("/") / Path(name).parent / path).resolve()).lstrip("/") if path else name
            if resolved not in files:
                broken.append(f"{name}: {target} (the tarball has no {resolved})")
            elif anchor and files[resolved] is not None and anchor not in anchors(files[resolved]):
                broken.append(f"{name}: {target} (no heading #{anchor} in {resolved})")
    return broken


def test_every_link_of_a_shipped_document_lands_in_the_tarball(shipped):
    assert "README.md" in shipped and "docs/index.md" in shipped
    assert broken_links(shipped) == []


def test_a_link_to_what_the_tarball_lacks_is_found():
    files = {
        "README.md": "[a](docs/a.md#one) [b](tests/x.py) [c](docs/a.md#two) [d](https://example.org/x)",
        "docs/a.md": "# One\n[up](../README.md) [self](#one) [lost](#three)\n",
    }
    assert broken_links(files) == [
        "README.md: tests/x.py (the tarball has no tests/x.py)",
        "README.md: docs/a.md#two (no heading #two in docs/a.md)",
        "docs/a.md: #three (no heading #three in docs/a.md)",
    ]


def test_a_link_to_the_repository_names_a_file_it_holds(shipped):
    """What the tarball leaves out, a shipped document links at the project's repository (galaxy.yml's)."""
    repository = yaml.safe_load((REPO / "galaxy.yml").read_text())["repository"]
    prefix = f"{repository}/blob/main/"
    targets = [
        target.partition("#")[0][len(prefix) :]
        for text in shipped.values()
        if text is not None
        for target in LINK.findall(text)
        if target.startswith(prefix)
    ]
    assert targets and [path for path in targets if not (REPO / path).exists()] == []
