"""playbooks/provision.yml, and site.yml in its first play, refuse a pair that cannot serve before the run
lock, the first change: run for real on two hosts of this machine (local connection) that play a pair's
members, whose declared link addresses are not theirs."""

import os
import sys

import pytest
from pair_playbooks import FIRST_CHANGE, FIRST_CHANGE_COMPARED, run_playbook

# The refusal is ds4_service's entry point pair_check, included.
REFUSAL_TASK = "Refuse a pair declared wrongly, before anything changes"


def provision(tmp_path, playbook, limit):
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return run_playbook(tmp_path, playbook, limit, local)


@pytest.mark.skipif(os.geteuid() != 0, reason="provision.yml becomes root")
@pytest.mark.parametrize("playbook", ["provision.yml", "site.yml"])
@pytest.mark.parametrize(
    ("limit", "refusal"),
    [
        ("spark04,spark05", "ds4_pairs['pair01'].coordinator.address 10.77.0.1 is not an address of spark04"),
        ("spark04", "ds4_pairs['pair01']: this run takes spark04 without spark05"),
    ],
)
def test_a_pair_that_cannot_serve_is_refused_before_the_first_change(tmp_path, playbook, limit, refusal):
    rc, tasks = provision(tmp_path, playbook, limit)
    assert rc == 2
    for host in limit.split(","):
        assert tasks[REFUSAL_TASK][host]["failed"] is True
        assert refusal in tasks[REFUSAL_TASK][host]["msg"]
    assert FIRST_CHANGE not in tasks and FIRST_CHANGE_COMPARED not in tasks
