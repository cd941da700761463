"""Run one of the collection's playbooks on two hosts that play the members of a pair (ds4_pairs) and read
what each task did, for the tests that a pair is refused before the first change."""

import json
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAIRS = {
    "pair01": {
        "coordinator": {"host": "spark04", "address": "10.77.0.1"},
        "worker": {"host": "spark05", "address": "10.77.0.2"},
    }
}
# The first task that changes a host: in ds4_fleet's stage and remove...
FIRST_CHANGE = "Hold this Spark for this run, waiting for another run on it to end"
# ...and in provision.yml and site.yml, which compare the Spark with its last run in it (a whole run).
FIRST_CHANGE_COMPARED = "Hold this Spark for this run, unless it is as the last finished run left it"


def run_playbook(tmp_path, playbook, limit, host, *extra):
    """ansible-playbook PLAYBOOK -l LIMIT on spark04 and spark05, each with the connection variables HOST;
    returns its exit status and, by task name without its role's, each host's result (every play's)."""
    hosts = {"spark04": host, "spark05": host}
    inventory = {"all": {"vars": {"ds4_pairs": PAIRS}, "children": {"pairhosts": {"hosts": hosts}}}}
    (tmp_path / "inventory.json").write_text(json.dumps(inventory))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    command = ["ansible-playbook", "-i", str(tmp_path / "inventory.json"), "-e", "ds4_target_hosts=pairhosts",
               "-l", limit, *extra, str(ROOT / "playbooks" / playbook)]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    tasks = {
        task["task"]["name"].rsplit(" : ", 1)[-1]: task["hosts"]
        for play in json.loads(done.stdout)["plays"]
        for task in play["tasks"]
    }
    return done.returncode, tasks
