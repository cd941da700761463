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
        if task.get("ansible.builtin.include_role", {}).get("name") == "ds4_firewall"
        and "tasks_from" not in task["ansible.builtin.include_role"]
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
    # After the settings check and the run lock, and after the run ended on a Spark with nothing to change,
    # whose firewall is in its last finished run's record (the next test).
    assert names.index(include["name"]) > names.index(
        "Judge this Spark's settings and pair, and hold it for this run, before anything changes"
    )
    assert names.index(include["name"]) > names.index(
        "End the run on this Spark, which has nothing to change"
    )
    assert names.index(include["name"]) < names.index(
        "Refuse a node_exporter port another program holds, before anything changes"
    )


def test_a_spark_with_nothing_to_change_has_its_firewall_as_its_last_run_left_it():
    """A run that ends early on a Spark (site.yml's first play, provision.yml's pre_tasks) does so before the
    firewall's tasks look: the record of its last finished run holds each of the firewall's files, its unit,
    and the gateways' addresses that its rules let in, so that any of them changed takes the whole run."""
    service = yaml.safe_load((REPO / "roles/ds4_service/vars/main.yml").read_text())
    common = yaml.safe_load((REPO / "roles/ds4_common/vars/main.yml").read_text())
    firewall = yaml.safe_load((REPO / "roles/ds4_firewall/vars/main.yml").read_text())
    paths = service["_ds4_applied_paths"]
    for name in ("_ds4_firewall_rules", "_ds4_firewall_binding", "_ds4_firewall_nftables_dropin",
                 "_ds4_gate_config"):  # fmt: skip
        assert name in common and f"{{{{ {name} }}}}" in paths, name
    # The unit file is one of the ds4* unit files, the gate script lies in the library directory, recorded
    # whole.
    assert common["_ds4_firewall_unit"].startswith("ds4") and "{{ _ds4_unit_dir }}/ds4*" in paths
    assert "{{ _ds4_lib_dir }}" in service["_ds4_applied_trees"]
    assert firewall["_ds4_gate_script"].startswith("/usr/local/lib/ds4/")
    assert "{{ _ds4_firewall_unit }}" in service["_ds4_applied_units"]
    assert "_ds4_applied_gateways" in service["_ds4_applied_inputs"]
    assert service["_ds4_applied_compared"]["fingerprint"] == "{{ _ds4_applied_inputs }}"


def test_the_firewall_play_of_site_says_it_applied_the_firewall_only_after_it_did():
    firewall_play = plays("gateway.yml")[0]
    tasks = firewall_play["tasks"]
    (include,) = firewall_includes(tasks)
    said = [task for task in tasks if "_ds4_firewall_applied" in task.get("ansible.builtin.set_fact", {})]
    assert len(said) == 1 and tasks.index(said[0]) > tasks.index(include)
    # Untagged as the include is: left out by the same --tags.
    assert "tags" not in include and "tags" not in said[0]
    site = plays("site.yml")
    assert [p.get("ansible.builtin.import_playbook") for p in site] == [None, "gateway.yml", "provision.yml"]
