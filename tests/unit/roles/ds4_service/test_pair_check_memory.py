"""pair_check.yml's fit of the model in the Spark's memory, run as the role has it with the shipped default
(`ds4_spark_memory_bytes: null`, "read it from the Spark"): the two tasks that read /proc/meminfo and refuse a
model the Spark cannot hold, taken from the role and run on this machine by ansible-playbook, with their
/proc/meminfo replaced by a file of the test's. The sandbox sets the memory in some of its inventories, so
this is the production path that its scenarios do not all run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]
TASKS = ROOT / "roles" / "ds4_service" / "tasks" / "pair_check.yml"
FIXTURES = ROOT / "tests" / "unit" / "fixtures"
READ = "Read the Spark's memory, for the fit of its model"
REFUSE = "Refuse a model this Spark cannot hold, alone or as its slice of a pair, before anything changes"
# The roles whose defaults the two tasks read, as site.yml's first play has them.
ROLES = ("ds4_common", "ds4_service")


def fit_tasks(meminfo):
    """The role's two tasks, verbatim but for the file the first reads."""
    tasks = {task["name"]: task for task in yaml.safe_load(TASKS.read_text())}
    read = dict(tasks[READ])
    assert read["ansible.builtin.slurp"]["src"] == "/proc/meminfo"
    read["ansible.builtin.slurp"] = {**read["ansible.builtin.slurp"], "src": str(meminfo)}
    return [read, tasks[REFUSE]]


def run_fit(tmp_path, meminfo_text, **variables):
    """Runs the two tasks with the roles' defaults and `variables`; returns the exit status and each task's
    result by name."""
    meminfo = tmp_path / "meminfo"
    if meminfo_text is not None:
        meminfo.write_text(meminfo_text)
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(ROOT / "roles" / role / "defaults" / "main.yml") for role in ROLES],
            "tasks": fit_tasks(meminfo),
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="json")
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    # As extra variables: a play's vars_files (the defaults) would take precedence over its vars.
    extra = json.dumps({"ds4_pairs": {}, "ansible_python_interpreter": sys.executable, **variables})
    command = ["ansible-playbook", "-i", "localhost,", "-c", "local", "-e", extra, str(tmp_path / "play.yml")]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    results = {
        task["task"]["name"]: task["hosts"]["localhost"]
        for play in json.loads(done.stdout)["plays"]
        for task in play["tasks"]
    }
    return done.returncode, results


def test_a_spark_s_real_meminfo_is_read_and_its_model_fits(tmp_path):
    gb10 = (FIXTURES / "gb10" / "meminfo_head.stdout").read_text()
    rc, results = run_fit(tmp_path, gb10)
    assert rc == 0, results
    assert results[REFUSE].get("skipped") is True, results


def test_the_memory_read_from_meminfo_judges_the_fit(tmp_path):
    # 8 GiB, less the engine's 4 GiB floor, cannot hold the q2 model of ~81 GiB.
    rc, results = run_fit(tmp_path, "MemTotal:        8388608 kB\nMemFree:         1000 kB\n")
    assert rc != 0
    assert "one Spark cannot hold it" in results[REFUSE]["msg"], results
    assert "has 4,294,967,296 bytes (4.00 GiB) for it (8,589,934,592 bytes" in results[REFUSE]["msg"], results


@pytest.mark.parametrize(
    "meminfo_text",
    [None, "", "MemFree:         7789944 kB\n", "MemTotal:       lots kB\n"],
    ids=["unreadable", "empty", "no-memtotal", "odd-memtotal"],
)
def test_a_meminfo_that_gives_no_memory_is_refused_naming_the_variable(tmp_path, meminfo_text):
    rc, results = run_fit(tmp_path, meminfo_text)
    assert rc != 0
    message = results[REFUSE].get("msg", "")
    assert "ds4_spark_memory_bytes" in message and "/proc/meminfo" in message, results
    assert "Traceback" not in message and "NoneType" not in message, results


def test_a_set_memory_is_used_without_reading_meminfo(tmp_path):
    rc, results = run_fit(tmp_path, None, ds4_spark_memory_bytes=8 * 1024**3)
    assert rc != 0
    assert results[READ].get("skipped") is True, results
    assert "(8,589,934,592 bytes (8.00 GiB) less the engine's floor)" in results[REFUSE]["msg"], results
