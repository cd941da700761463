"""playbooks/provision.yml refuses a pair that cannot serve before its run lock, the first change: run for
real on two hosts of this machine (local connection) that play a pair's members, whose declared link
addresses are not theirs."""

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
REFUSAL_TASK = "Refuse a pair declared wrongly, before anything changes"
FIRST_CHANGE = "Hold this Spark for this run, waiting for another run on it to end"


def provision(tmp_path, limit):
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {"spark04": local, "spark05": local}
    inventory = {"all": {"vars": {"ds4_pairs": PAIRS}, "children": {"pairhosts": {"hosts": hosts}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    command = ["ansible-playbook", "-i", str(tmp_path / "inventory.json"), "-e", "ds4_target_hosts=pairhosts",
               "-l", limit, str(ROOT / "playbooks" / "provision.yml")]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    # By name without the role's: the refusal is ds4_service's entry point pair_check, included.
    tasks = {
        task["task"]["name"].rsplit(" : ", 1)[-1]: task["hosts"]
        for task in json.loads(done.stdout)["plays"][0]["tasks"]
    }
    return done.returncode, tasks


@pytest.mark.skipif(os.geteuid() != 0, reason="provision.yml becomes root")
@pytest.mark.parametrize(
    ("limit", "refusal"),
    [
        ("spark04,spark05", "ds4_pairs['pair01'].coordinator.address 10.77.0.1 is not an address of spark04"),
        ("spark04", "ds4_pairs['pair01']: this run takes spark04 without spark05"),
    ],
)
def test_a_pair_that_cannot_serve_is_refused_before_the_first_change(tmp_path, limit, refusal):
    rc, tasks = provision(tmp_path, limit)
    assert rc == 2
    for host in limit.split(","):
        assert tasks[REFUSAL_TASK][host]["failed"] is True
        assert refusal in tasks[REFUSAL_TASK][host]["msg"]
    assert FIRST_CHANGE not in tasks
