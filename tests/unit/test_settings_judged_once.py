"""Each role's settings are judged once per run: by the playbook before any change (site.yml's firewall
play in playbooks/gateway.yml, or provision.yml when it runs alone; upgrade.yml through ds4_fleet's check),
which names the roles it judged in _ds4_settings_judged; a role's own preflight judges them only when no
playbook has, as when it is used alone."""

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

REPO = Path(__file__).resolve().parents[2]
# The roles whose preflight judges their own settings unless the run already has. (ds4_gateway's judges
# what only a gateway knows, its keys and the Sparks behind it; ds4_monitoring's runs on the controller
# alone, with no playbook check before it.)
GUARDED = ["ds4_firewall", "ds4_preflight", "ds4_engine", "ds4_weights", "ds4_service", "ds4_activate"]
CHECK = "ds4.fleet.ds4_settings_check"


def task_lists(path):
    """Every list of tasks in a task file or playbook: plays' sections, blocks' parts."""
    loaded = yaml.safe_load(path.read_text()) or []
    todo = [loaded]
    while todo:
        tasks = todo.pop()
        yield tasks
        for item in tasks:
            for key in ("pre_tasks", "tasks", "post_tasks", "block", "rescue", "always"):
                if isinstance(item.get(key), list):
                    todo.append(item[key])


def checks_in(path):
    return [task for tasks in task_lists(path) for task in tasks if CHECK in task]


def test_each_roles_own_check_is_skipped_once_the_run_judged_the_role():
    for role in GUARDED:
        found = [
            (path.name, task)
            for path in (REPO / "roles" / role / "tasks").glob("*.yml")
            for task in checks_in(path)
        ]
        assert len(found) == 1, f"{role} judges its settings in one task: {found}"
        _, task = found[0]
        assert task[CHECK]["roles"] == [role]
        assert task["when"] == f"'{role}' not in _ds4_settings_judged | default([])"


def test_a_run_says_it_judged_only_the_roles_its_check_judged():
    """Each set_fact of _ds4_settings_judged comes right after the check of those very roles, which fails
    the host on any refused setting, under the same condition: the record never claims a judgment that did
    not happen, and the fingerprint it keeps is that check's."""
    records = 0
    for path in [*REPO.glob("playbooks/*.yml"), *REPO.glob("roles/*/tasks/*.yml")]:
        for tasks in task_lists(path):
            for before, task in zip([None, *tasks], tasks, strict=False):
                facts = task.get("ansible.builtin.set_fact") or {}
                if "_ds4_settings_judged" not in facts:
                    continue
                records += 1
                assert before and CHECK in before, f"{path.name}: {task['name']} follows no settings check"
                assert facts["_ds4_settings_judged"] == before[CHECK]["roles"], path.name
                assert before.get("when") == task.get("when"), path.name
                assert "ignore_errors" not in before, path.name
                if "_ds4_settings_fingerprint" in facts:
                    assert facts["_ds4_settings_fingerprint"] == f"{{{{ {before['register']}.fingerprint }}}}"
    # ds4_guard, which site.yml's first play, gateway.yml's firewall play and provision.yml include, and
    # ds4_fleet's check for upgrade.yml
    assert records == 2


SPARK_PLAYS = "{{ ds4_target_hosts | default('sparks') | ds4.fleet.target_hosts }}"
# The plays of site.yml after its first, which leave out the Sparks it found with nothing to change.
CHANGING_PLAYS = "{{ ds4_target_hosts | default('sparks') | ds4.fleet.target_hosts(groups) }}"
# Every role a Spark runs in site.yml: the firewall and the provisioning.
SPARK_ROLES = GUARDED


def plays_of(path):
    """The plays a playbook runs, in order, with those of the playbooks it imports."""
    for play in yaml.safe_load(path.read_text()):
        imported = play.get("ansible.builtin.import_playbook")
        if imported:
            yield from plays_of(path.parent / imported)
        else:
            yield play


def load_yaml(path):
    return yaml.safe_load(path.read_text())


def own_check(role):
    """The task with which ROLE's preflight judges its own settings."""
    (task,) = [task for path in (REPO / "roles" / role / "tasks").glob("*.yml") for task in checks_in(path)]
    return task


def replay(path):
    """The judgements of a Spark's settings in one run of the playbook PATH, its conditions evaluated as
    Ansible does, one task after the other: the times each role was judged, and the fingerprint each task
    that compares or records the Spark (ds4_service's applied_check and applied_record) is given."""
    # A whole run, not in check mode: every comparison and record that may happen.
    variables, judged, given = {"ansible_check_mode": False, "_ds4_whole_run": True}, Counter(), []

    def holds(condition):
        templar = Templar(loader=DataLoader(), variables=variables)
        return condition is None or templar.evaluate_conditional(trust_as_template(condition))

    def run(tasks):
        for task in tasks:
            included = task.get("ansible.builtin.include_role") or {}
            if included.get("name") == "ds4_guard":
                # The run's guard, included whole: its tasks with the include's vars and its own.
                if holds(task.get("when")):
                    variables.update(load_yaml(REPO / "roles/ds4_guard/vars/main.yml"))
                    variables.update(task.get("vars", {}))
                    run(load_yaml(REPO / "roles/ds4_guard/tasks/main.yml"))
                    for name in task.get("vars", {}):
                        variables.pop(name)
                continue
            step(task)

    def step(task):
        facts = task.get("ansible.builtin.set_fact") or {}
        if CHECK in task:
            ran = holds(task.get("when"))
            if ran:
                templar = Templar(loader=DataLoader(), variables=variables)
                judged.update(templar.template(trust_as_template(task[CHECK]["roles"])))
            if "register" in task:
                # A skipped task's register holds the skip, with no fingerprint.
                variables[task["register"]] = {"fingerprint": "the check's"} if ran else {"skipped": True}
        if "_ds4_settings_judged" in facts and holds(task.get("when")):
            templar = Templar(loader=DataLoader(), variables=variables)
            trusted = {n: trust_as_template(v) if isinstance(v, str) else v for n, v in facts.items()}
            variables.update({name: templar.template(value) for name, value in trusted.items()})
        if "_ds4_applied_fingerprint" in task.get("vars", {}) and holds(task.get("when")):
            templar = Templar(loader=DataLoader(), variables=variables)
            given.append(templar.template(trust_as_template(task["vars"]["_ds4_applied_fingerprint"])))
        # A role included whole (provision.yml's): its own check, in its preflight.
        included = task.get("ansible.builtin.include_role") or {}
        if included.get("name") in GUARDED and "tasks_from" not in included:
            judged[included["name"]] += holds(own_check(included["name"])["when"])

    for play in plays_of(path):
        if play["hosts"] in (SPARK_PLAYS, CHANGING_PLAYS):
            run([*play.get("pre_tasks", []), *play.get("tasks", []), *play.get("post_tasks", [])])
    return judged, given


@pytest.mark.parametrize(
    "playbook", ["site.yml", "playbooks/site.yml", "playbooks/gateway.yml", "playbooks/provision.yml"]
)
def test_one_run_judges_each_of_a_sparks_roles_once(playbook):
    """site.yml (its first play, the firewall play, then provision.yml) judges a Spark's settings once, in its
    first play, before anything changes; gateway.yml and provision.yml alone each judge them too. The Spark
    is compared with its last run and recorded by the fingerprint of that one judgement."""
    judged, given = replay(REPO / playbook)
    assert judged == dict.fromkeys(SPARK_ROLES, 1)
    # Compared (site.yml's first play, provision.yml's where that play did not) and recorded.
    compared_and_recorded = {"playbooks/gateway.yml": 0, "playbooks/provision.yml": 2}.get(playbook, 3)
    assert given == ["the check's"] * compared_and_recorded


def run_check(tmp_path, judged):
    """ds4_activate's check entry point, as a playbook of one's own includes it, with a bad setting."""
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Say what the run judged",
                    "ansible.builtin.set_fact": {"_ds4_settings_judged": judged},
                },
                {
                    "name": "Check the activation's settings",
                    "ansible.builtin.include_role": {"name": "ds4_activate", "tasks_from": "check"},
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    command = [
        "ansible-playbook",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        "ds4_smoke_expect=[Pp]aris(",
        "play.yml",
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    tasks = json.loads(done.stdout)["plays"][0]["tasks"]
    (result,) = [
        t["hosts"]["localhost"]
        for t in tasks
        if t["task"]["name"].endswith(": Refuse smoke and speed settings the activation could not use")
    ]
    return done.returncode, result


def test_a_role_used_alone_judges_its_settings_and_a_judged_run_does_not_again(tmp_path):
    rc, result = run_check(tmp_path, [])
    assert rc != 0 and result.get("failed") and "ds4_smoke_expect" in result["msg"], result
    rc, result = run_check(tmp_path, ["ds4_activate"])
    assert rc == 0 and result.get("skipped"), result
