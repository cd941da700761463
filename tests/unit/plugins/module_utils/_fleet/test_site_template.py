"""Where a site's own template is found, and an environment file as systemd reads it
(module_utils/_fleet/site_template.py, with the filters of plugins/filter/ds4_site.py)."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_site import site_template
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.site_template import (
    VARIABLES,
    SiteTemplateError,
    env_file_problems,
    resolve,
    resolve_all,
    site_digest,
    site_dirs,
)

REPO = Path(__file__).resolve().parents[5]


def test_a_playbook_in_playbooks_looks_beside_it_then_beside_its_folder():
    # site.yml at the top imports its plays from playbooks/: Ansible's playbook_dir is playbooks/ then.
    assert site_dirs("/p/playbooks") == ["/p/playbooks/templates", "/p/templates"]
    assert site_dirs("/p/playbooks/") == ["/p/playbooks/templates", "/p/templates"]


def test_a_playbook_elsewhere_looks_beside_it_alone():
    assert site_dirs("/site") == ["/site/templates"]
    assert site_dirs("/site/plays") == ["/site/plays/templates"]


def test_the_configured_directory_is_the_only_one():
    assert site_dirs("/p/playbooks", "/etc/ds4-site/templates/") == ["/etc/ds4-site/templates"]


def make(root, *names):
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    return root


def test_the_sites_template_comes_before_the_roles_own(tmp_path):
    make(tmp_path, "playbooks/templates/a.j2", "templates/a.j2", "templates/b.j2", "role/templates/a.j2")
    make(tmp_path, "role/templates/c.j2")
    dirs = site_dirs(str(tmp_path / "playbooks"))
    role = str(tmp_path / "role/templates")
    assert resolve("v", "a.j2", dirs, role) == str(tmp_path / "playbooks/templates/a.j2")
    assert resolve("v", "b.j2", dirs, role) == str(tmp_path / "templates/b.j2")
    assert resolve("v", "c.j2", dirs, role) == str(tmp_path / "role/templates/c.j2")


def test_an_absolute_path_is_taken_as_it_is(tmp_path):
    make(tmp_path, "elsewhere/x.j2", "templates/x.j2")
    found = resolve("v", str(tmp_path / "elsewhere/x.j2"), [str(tmp_path / "templates")], "/role/templates")
    assert found == str(tmp_path / "elsewhere/x.j2")


def test_a_missing_template_names_the_variable_and_every_path_looked_in(tmp_path):
    with pytest.raises(SiteTemplateError) as refused:
        resolve("ds4_logrotate_template", "mine.j2", ["/a/templates", "/b/templates"], "/role/templates")
    assert str(refused.value) == (
        "ds4_logrotate_template names mine.j2, which is none of: "
        "/a/templates/mine.j2, /b/templates/mine.j2, /role/templates/mine.j2"
    )
    with pytest.raises(
        SiteTemplateError, match="ds4_logrotate_template names /x/mine.j2, which is none of: /x/mine.j2$"
    ):
        resolve("ds4_logrotate_template", "/x/mine.j2", ["/a/templates"], "/role/templates")
    with pytest.raises(SiteTemplateError, match="ds4_logrotate_template must name a template file"):
        resolve("ds4_logrotate_template", "", ["/a/templates"], "/role/templates")


def test_each_variable_names_a_template_of_its_role_by_default():
    """Every template variable's default is a template its role has: nothing a site does not bring fails."""
    import yaml

    for variable, role in VARIABLES.items():
        default = yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text())[variable]
        assert (REPO / "roles" / role / "templates" / default).is_file(), variable


def test_resolve_all_judges_the_variables_it_is_given(tmp_path):
    make(tmp_path, "roles/ds4_gateway/templates/g.j2", "playbooks/templates/site.j2")
    values = {"ds4_gateway_config_template": "g.j2", "ds4_logrotate_template": "site.j2", "ds4_port": 8000}
    found, refused = resolve_all(values, str(tmp_path / "playbooks"), str(tmp_path / "roles"))
    assert found == {
        "ds4_gateway_config_template": str(tmp_path / "roles/ds4_gateway/templates/g.j2"),
        "ds4_logrotate_template": str(tmp_path / "playbooks/templates/site.j2"),
    }
    assert refused == []
    values["ds4_launch_env_template"] = "gone.j2"
    values["ds4_site_templates_dir"] = str(tmp_path / "site")
    found, refused = resolve_all(values, str(tmp_path / "playbooks"), str(tmp_path / "roles"))
    assert "ds4_logrotate_template" not in found
    # The configured directory replaces the playbook's: the playbook's templates/ is not looked in.
    assert refused == [
        f"ds4_launch_env_template names gone.j2, which is none of: {tmp_path}/site/gone.j2, "
        f"{tmp_path}/roles/ds4_service/templates/gone.j2",
        f"ds4_logrotate_template names site.j2, which is none of: {tmp_path}/site/site.j2, "
        f"{tmp_path}/roles/ds4_service/templates/site.j2",
    ]


def test_the_digest_follows_the_sites_templates_and_not_the_roles(tmp_path):
    make(tmp_path, "roles/r/templates/own.j2", "site/a.j2")
    roles = str(tmp_path / "roles")
    paths = {"x": str(tmp_path / "roles/r/templates/own.j2"), "y": str(tmp_path / "site/a.j2")}
    before = site_digest(paths, roles)
    (tmp_path / "roles/r/templates/own.j2").write_text("changed")
    assert site_digest(paths, roles) == before
    (tmp_path / "site/a.j2").write_text("changed")
    changed = site_digest(paths, roles)
    assert changed != before
    # A file beside it, which it may include, is an input too.
    (tmp_path / "site/snippet.j2").write_text("included")
    assert site_digest(paths, roles) != changed
    assert site_digest({"x": paths["x"]}, roles) == site_digest({}, roles)


def test_the_filter_fails_with_the_same_message(tmp_path):
    with pytest.raises(AnsibleFilterError, match="^ds4_logrotate_template names mine.j2, which is none of: "):
        site_template(
            "mine.j2", "ds4_logrotate_template", str(tmp_path / "role"), str(tmp_path / "playbooks")
        )
    make(tmp_path, "role/templates/logrotate.j2")
    path = site_template("logrotate.j2", "ds4_logrotate_template", str(tmp_path / "role"), str(tmp_path))
    assert path == str(tmp_path / "role/templates/logrotate.j2")


def test_an_environment_file_systemd_reads_whole_has_no_problem():
    text = (
        '# a comment\n; another\n\nDS4_A=1\n  DS4_B = two words\nDS4_C="quoted # not a comment"\n'
        'DS4_D=\'single "inner"\'\nDS4_E="escaped \\" quote"\nDS4_F=one \\\ntwo\nDS4_G=\n'
    )
    assert env_file_problems(text) == []


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("DS4_SITE sandbox", "line 2: not NAME=VALUE"),
        ("export DS4_SITE=sandbox", "line 2: 'export DS4_SITE' is not a variable name"),
        ("1DS4=x", "line 2: '1DS4' is not a variable name"),
        ("=x", "line 2: '' is not a variable name"),
        ('DS4_SECRET="hunter2', "line 2: the value of DS4_SECRET leaves a quote open"),
        ("DS4_SECRET='hunter2", "line 2: the value of DS4_SECRET leaves a quote open"),
    ],
)
def test_a_line_systemd_would_skip_is_named_without_its_value(line, problem):
    problems = env_file_problems(f"DS4_OK=1\n{line}\nDS4_AFTER=2\n")
    assert problems == [problem]
    assert "hunter2" not in " ".join(problems)
