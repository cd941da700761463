"""upgrade.yml rolling a family swap (issue 53): its summary's judgement of a Spark, the task "Judge what the
upgrade did to the Spark" taken verbatim from roles/ds4_fleet/tasks/summary.yml and run on this machine by
ansible-playbook with the roles' defaults and variables, and the readings a Spark gives before and after its
switch. A swap keeps the release, so the release alone cannot tell a Spark that swapped from one that still
serves the family before: the model the engine names in its /v1/stats does."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]
SUMMARY = ROOT / "roles" / "ds4_fleet" / "tasks" / "summary.yml"
JUDGE = "Judge what the upgrade did to the Spark"
GGUF = "/var/lib/ds4/gguf"
CATALOG = yaml.safe_load((ROOT / "roles" / "ds4_common" / "defaults" / "main.yml").read_text())[
    "ds4_model_catalog"
]
OLD = CATALOG["0731"]["files"]["base"]["name"]
NEW = CATALOG["vision-exp"]["files"]["base"]["name"]


def reading(model, started):
    """A Spark's ds4_host_status reading on v0.6.5, its engine naming MODEL, started at STARTED."""
    return {
        "current": {"release": "v0.6.5"},
        "engine": {"answering": True, "model": f"{GGUF}/{model}"},
        "service": {"main_pid": 4000 + started, "started_monotonic_us": started * 10**6},
    }


def judge(tmp_path, after_model):
    """The summary's judgement of a Spark that served 0731 on v0.6.5 and was to swap to Vision-Exp on it,
    its switch reported a success, its engine naming AFTER_MODEL at the end."""
    task = next(task for task in yaml.safe_load(SUMMARY.read_text()) if task.get("name") == JUDGE)
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [
                str(ROOT / "roles" / "ds4_common" / "defaults" / "main.yml"),
                str(ROOT / "roles" / "ds4_common" / "vars" / "main.yml"),
                str(ROOT / "roles" / "ds4_fleet" / "vars" / "main.yml"),
            ],
            "tasks": [task, {"name": "Show", "ansible.builtin.debug": {"var": "_ds4_fleet_outcome"}}],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    variables = {
        "ansible_python_interpreter": sys.executable,
        "ds4_pairs": {},
        "ds4_release": "v0.6.5",
        "ds4_model_family": "deepseek-v4-flash-vision",
        "_ds4_fleet_before": reading(OLD, 100),
        "__ds4_fleet_status": {"status": reading(after_model, 300)},
        "_ds4_fleet_stage": {"staged": True, "message": ""},
        "_ds4_fleet_switch": {"ok": True},
        "_ds4_fleet_stopped": "",
    }
    command = ["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", json.dumps(variables)]
    done = subprocess.run(
        [*command, str(tmp_path / "play.yml")], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tasks = [task for play in json.loads(done.stdout)["plays"] for task in play["tasks"]]
    return tasks[-1]["hosts"]["localhost"]["_ds4_fleet_outcome"]


@pytest.mark.parametrize(
    ("after_model", "outcome", "detail"),
    [
        (NEW, "switched", f"v0.6.5 -> v0.6.5, {OLD} -> {NEW}; serving v0.6.5"),
        (OLD, "failed", f"the switch to v0.6.5 reported success, yet the engine serves {OLD}, not {NEW}"),
    ],
)
def test_a_family_swap_is_judged_by_the_model_the_engine_serves(tmp_path, after_model, outcome, detail):
    out = judge(tmp_path, after_model)
    assert (out["outcome"], out["detail"]) == (outcome, detail)
