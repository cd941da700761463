"""What the collection declares holds: its license, one minimum ansible-core, a version that moves."""

import re
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.compat.version import LooseVersion

REPO = Path(__file__).resolve().parents[2]
GALAXY = yaml.safe_load((REPO / "galaxy.yml").read_text())


def test_the_license_file_is_the_declared_one():
    assert GALAXY["license"] == ["MIT"]
    assert (REPO / "LICENSE").read_text().startswith("MIT License\n")


def test_one_minimum_ansible_core_that_the_pinned_one_meets():
    """Stated once, in meta/runtime.yml (molecule/collection runs that version); the rest refers to it."""
    required = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    minimum = re.fullmatch(r">=(\d+\.\d+\.\d+)", required)
    assert minimum, f"requires_ansible {required!r} is not one minimum such as >=2.17.0"
    (pinned,) = re.findall(r"^ansible-core==(\S+)$", (REPO / "requirements.txt").read_text(), re.M)
    assert LooseVersion(pinned) >= LooseVersion(minimum[1])
    assert "meta/runtime.yml" in (REPO / "README.md").read_text()


def test_every_role_asks_for_the_minimum_of_meta_runtime():
    """A role used alone says the same lowest ansible-core as the collection (meta/runtime.yml)."""
    required = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]
    asked = {
        meta.parent.parent.name: yaml.safe_load(meta.read_text())["galaxy_info"]["min_ansible_version"]
        for meta in (REPO / "roles").glob("*/meta/main.yml")
    }
    assert asked and asked == dict.fromkeys(asked, required.removeprefix(">="))


def test_each_plugin_says_when_it_was_added_and_no_version_yet_to_come():
    """version_added is the version of galaxy.yml when the module, filter or option came: never later
    than galaxy.yml's (ansible-test sanity checks only its form)."""
    docs = [*(REPO / "plugins" / "modules").glob("*.py"), *(REPO / "plugins" / "filter").glob("*.yml")]
    found = {path.name: re.findall(r"version_added:\s*['\"]?([0-9.]+)", path.read_text()) for path in docs}
    assert [name for name, versions in found.items() if not versions] == []
    earlier = {name: v for name, versions in found.items() for v in versions if v != GALAXY["version"]}
    assert all(LooseVersion(v) <= LooseVersion(GALAXY["version"]) for v in earlier.values()), earlier


def test_an_operator_installs_what_running_needs_and_the_image_the_same():
    """requirements.txt (README's install, ansible-builder's python file) holds only what running the
    collection needs; the test and lint tools are in requirements-dev.txt, which `make setup` installs."""
    runtime = re.findall(r"^([A-Za-z0-9_.\-\[\]]+)==", (REPO / "requirements.txt").read_text(), re.M)
    assert sorted(runtime) == ["ansible-core", "jinja2", "pyyaml"]
    dev = (REPO / "requirements-dev.txt").read_text()
    assert re.search(r"^-r requirements\.txt$", dev, re.M)
    assert "requirements-dev.txt" in (REPO / "Makefile").read_text()
    ee = yaml.safe_load((REPO / "execution-environment.yml").read_text())["dependencies"]
    assert ee["python"] == "requirements.txt"
    (pinned,) = re.findall(r"^(ansible-core==\S+)$", (REPO / "requirements.txt").read_text(), re.M)
    assert ee["ansible_core"]["package_pip"] == pinned


def test_the_version_moves_with_releases():
    """Unreleased fragments belong to the next version, which galaxy.yml names and no release holds yet."""
    released = yaml.safe_load((REPO / "changelogs" / "changelog.yaml").read_text())["releases"] or {}
    fragments = [p for p in (REPO / "changelogs" / "fragments").iterdir() if p.suffix in (".yml", ".yaml")]
    if fragments:
        assert GALAXY["version"] not in released, f"{GALAXY['version']} is released: set the next version"
    assert all(LooseVersion(GALAXY["version"]) >= LooseVersion(v) for v in released)


# Galaxy's rule for a tag (galaxy-importer): lower-case letters, digits and "_", at most 20 of them.
GALAXY_TAG = re.compile(r"[a-z0-9_]{1,64}")
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "main.yml").exists())


def documented_variables():
    """Every public variable of every role, by its argument specs."""
    names = set()
    for specs in (REPO / "roles").glob("*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(specs.read_text())["argument_specs"].values():
            names.update(entry.get("options") or {})
    return names


@pytest.mark.parametrize("role", ROLES)
def test_every_role_has_a_readme_with_its_entry_points_and_an_example(role):
    """Galaxy's importer refuses a collection with a role without a README; ours says what the role does,
    names each entry point of its argument specs, and shows it used by its full name with real variables."""
    readme = REPO / "roles" / role / "README.md"
    assert readme.exists(), f"roles/{role} has no README.md"
    text = readme.read_text()
    assert text.startswith(f"# ds4.fleet.{role}\n\n"), "the title is the role's full name"
    entry_points = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    section = text.partition("\n## Entry points\n")[2].partition("\n## ")[0]
    table = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert table == list(entry_points["argument_specs"]), "the entry points table lists the argument specs'"
    examples = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert examples, "an example in a yaml block"
    example = "\n".join(examples)
    yaml.safe_load(example)
    assert f"ds4.fleet.{role}" in example or role == "ds4_common"
    unknown = set(re.findall(r"\b(ds4_[a-z0-9_]+):", example)) - documented_variables()
    assert unknown == set(), f"variables no role documents: {sorted(unknown)}"


def test_galaxy_yml_names_the_project_s_addresses_and_galaxy_s_tags():
    """The landing page's links: real https addresses of one repository, which the README's install from
    git names too; tags in Galaxy's form."""
    repository = GALAXY["repository"]
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", repository), repository
    for key in ("documentation", "homepage", "issues"):
        assert GALAXY[key].startswith(repository), f"{key}: {GALAXY[key]} is not under {repository}"
    assert f"- name: {repository}.git" in (REPO / "README.md").read_text()
    assert all(re.fullmatch(r"[^()]+ \(@[\w-]+\)", author) for author in GALAXY["authors"]), GALAXY["authors"]
    tags = GALAXY["tags"]
    assert 0 < len(tags) <= 20 and all(GALAXY_TAG.fullmatch(tag) for tag in tags), tags
