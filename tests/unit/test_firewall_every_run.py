"""Issue 40: an engine beyond loopback only behind its firewall, whatever plays or tags run. site.yml's first
play (gateway.yml) applies the engine firewall in an untagged task, which any --tags leaves out, and
provision.yml may run alone: provision.yml applies it then itself, before the roles, whatever --tags picks."""

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def plays(name):
    return yaml.safe_load((REPO / "playbooks" / name).read_text())


def firewall_includes(tasks):
    return [
        task
        for task in tasks
        if task.get("ansible.builtin.include_role", {}).get("tasks_from") == "firewall"
        and task["ansible.builtin.include_role"].get("name") == "ds4_gateway"
    ]


def test_provision_applies_the_firewall_before_its_roles_whatever_the_tags():
    (play,) = plays("provision.yml")
    (include,) = firewall_includes(play["pre_tasks"])
    assert firewall_includes(play.get("tasks", []) + play.get("post_tasks", [])) == []
    assert include["tags"] == ["always"]
    assert include["ansible.builtin.include_role"]["apply"] == {"tags": ["always"]}
    # Only where this run has not: site.yml's first play says so when it applied it.
    assert include["when"] == "not (_ds4_firewall_applied | default(false))"
    names = [task["name"] for task in play["pre_tasks"]]
    # After the settings check and the run lock, before the run may end early.
    assert names.index(include["name"]) > names.index(
        "Hold this Spark for this run, waiting for another run on it to end"
    )
    assert names.index(include["name"]) < names.index("Find out whether anything is to change on this Spark")


def test_the_firewall_play_of_site_says_it_applied_the_firewall_only_after_it_did():
    firewall_play = plays("gateway.yml")[0]
    tasks = firewall_play["tasks"]
    (include,) = firewall_includes(tasks)
    said = [task for task in tasks if "_ds4_firewall_applied" in task.get("ansible.builtin.set_fact", {})]
    assert len(said) == 1 and tasks.index(said[0]) > tasks.index(include)
    # Untagged as the include is: left out by the same --tags.
    assert "tags" not in include and "tags" not in said[0]
    assert [p["ansible.builtin.import_playbook"] for p in plays("site.yml")] == [
        "gateway.yml",
        "provision.yml",
    ]
