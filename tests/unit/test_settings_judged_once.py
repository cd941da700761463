"""Each role's settings are judged once per run: by the playbook before any change (site.yml's
provision.yml, upgrade.yml through ds4_fleet's check), which names the roles it judged in
_ds4_settings_judged; a role's own preflight judges them only when no playbook has, as when it is used
alone."""

import json
import os
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
# The roles whose preflight judges their own settings unless the run already has. (ds4_gateway's judges
# what only a gateway knows, its keys and the Sparks behind it; ds4_monitoring's runs on the controller
# alone, with no playbook check before it.)
GUARDED = ["ds4_preflight", "ds4_engine", "ds4_weights", "ds4_service", "ds4_activate"]
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
    the host on any refused setting: the record never claims a judgment that did not happen."""
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
                assert "when" not in before and "ignore_errors" not in before, path.name
    assert records == 2  # provision.yml, and ds4_fleet's check for upgrade.yml


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
