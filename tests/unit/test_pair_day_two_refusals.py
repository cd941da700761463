"""playbooks/upgrade.yml and playbooks/remove.yml take a pair (ds4_pairs) as one: a run on one member alone
is refused, naming the other, before the first change (the run lock). Run on two hosts that play a pair's
members at an address nothing answers (TEST-NET-1), in check mode: the refusals are judged on the
controller, and should one ever be missing, the next task finds the host unreachable, and nothing changes."""

import sys

import pytest
from pair_playbooks import FIRST_CHANGE, run_playbook

REMOVAL_REFUSAL = "Refuse to remove one member of a pair without the other, unless the operator says so"
# At an address nothing answers: the first task that reaches for the host finds it unreachable.
NOWHERE = {
    "ansible_connection": "ssh",
    "ansible_host": "192.0.2.1",
    "ansible_python_interpreter": sys.executable,
    "ansible_ssh_common_args": "-o ConnectTimeout=2",
}


def run(tmp_path, playbook, limit, *extra):
    return run_playbook(tmp_path, playbook, limit, NOWHERE, "--check", *extra)


@pytest.mark.parametrize(
    ("playbook", "task", "refusal"),
    [
        ("upgrade.yml", "Refuse a run that takes one member of a pair without the other",
         "ds4_pairs['pair01']: this run takes spark05 without spark04; a pair is upgraded as one"),
        ("remove.yml", REMOVAL_REFUSAL,
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
    refusal = tasks[REMOVAL_REFUSAL]
    assert rc == 4 and refusal["spark05"].get("failed") is not True
    assert tasks[FIRST_CHANGE]["spark05"]["unreachable"] is True
