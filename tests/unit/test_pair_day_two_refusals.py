"""playbooks/upgrade.yml and playbooks/remove.yml take a pair (ds4_pairs) as one: a run on one member alone
is refused, naming the other, before the first change (the run lock). Run on two hosts that play a pair's
members at an address nothing answers (TEST-NET-1), in check mode: the refusals are judged on the
controller, and should one ever be missing, the next task finds the host unreachable, and nothing changes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAIRS = {
    "pair01": {
        "coordinator": {"host": "spark04", "address": "10.77.0.1"},
        "worker": {"host": "spark05", "address": "10.77.0.2"},
    }
}
REMOVAL_REFUSAL = "Refuse to remove one member of a pair without the other, unless the operator says so"
FIRST_CHANGE = "Hold this Spark for this run, waiting for another run on it to end"


def run(tmp_path, playbook, limit, *extra):
    nowhere = {"ansible_connection": "ssh", "ansible_host": "192.0.2.1", "ansible_python_interpreter":
               sys.executable, "ansible_ssh_common_args": "-o ConnectTimeout=2"}  # fmt: skip
    hosts = {"spark04": nowhere, "spark05": nowhere}
    inventory = {"all": {"vars": {"ds4_pairs": PAIRS}, "children": {"pairhosts": {"hosts": hosts}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    command = ["ansible-playbook", "-i", str(tmp_path / "inventory.json"), "-e", "ds4_target_hosts=pairhosts",
               "-l", limit, "--check", *extra, str(ROOT / "playbooks" / playbook)]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    tasks = {task["task"]["name"]: task["hosts"] for task in json.loads(done.stdout)["plays"][0]["tasks"]}
    return done.returncode, tasks


@pytest.mark.parametrize(
    ("playbook", "task", "refusal"),
    [
        ("upgrade.yml", "ds4_fleet : Refuse a run that takes one member of a pair without the other",
         "ds4_pairs['pair01']: this run takes spark05 without spark04; a pair is upgraded as one"),
        ("remove.yml", f"ds4_fleet : {REMOVAL_REFUSAL}",
         "spark05 is the worker of the pair pair01 and its other member spark04 is not in this run"),
    ],
)  # fmt: skip
def test_one_member_of_a_pair_alone_is_refused_before_the_first_change(tmp_path, playbook, task, refusal):
    rc, tasks = run(tmp_path, playbook, "spark05")
    assert rc == 2, tasks
    assert tasks[task]["spark05"]["failed"] is True
    assert refusal in tasks[task]["spark05"]["msg"]
    assert FIRST_CHANGE not in tasks


def test_the_operator_may_remove_one_member_alone_when_saying_so(tmp_path):
    # The refusal's task passes; the next one, the first to reach for the host, finds it unreachable.
    rc, tasks = run(tmp_path, "remove.yml", "spark05", "-e", "ds4_remove_pair_member_alone=true")
    refusal = tasks[f"ds4_fleet : {REMOVAL_REFUSAL}"]
    assert rc == 4 and refusal["spark05"].get("failed") is not True
