"""ds4_target_hosts as the host pattern of every Spark play, through the filter ds4.fleet.target_hosts."""

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_fleet import FilterModule
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.targets import (
    UNCHANGED,
    TargetError,
    target_hosts,
)

REPO = Path(__file__).resolve().parents[5]
SPARK_PLAYS = "{{ ds4_target_hosts | default('sparks') | ds4.fleet.target_hosts }}"
CHANGING_PLAYS = "{{ ds4_target_hosts | default('sparks') | ds4.fleet.target_hosts(groups) }}"


@pytest.mark.parametrize(
    ("given", "pattern"),
    [
        ("sparks", "sparks"),
        (" gpu_nodes:!spark03 ", "gpu_nodes:!spark03"),
        ("spark01,spark02", "spark01,spark02"),
    ],
)
def test_a_pattern_is_given_as_it_is_without_blanks_around_it(given, pattern):
    assert target_hosts(given) == pattern
    assert FilterModule().filters()["target_hosts"](given) == pattern


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("", "ds4_target_hosts is empty"),
        ("  ", "ds4_target_hosts is empty"),
        (None, "ds4_target_hosts is a host, group or pattern: None"),
        (["spark01"], "ds4_target_hosts is a host, group or pattern: ['spark01']"),
    ],
)
def test_a_pattern_that_names_nothing_is_refused_in_its_words(given, said):
    with pytest.raises(TargetError, match="^" + said.replace("[", r"\[").replace("]", r"\]")):
        target_hosts(given)
    with pytest.raises(AnsibleFilterError, match="ds4_target_hosts"):
        FilterModule().filters()["target_hosts"](given)


def test_every_spark_play_takes_its_hosts_through_the_filter():
    """A play's `hosts:` is templated in ansible-playbook's main process: the filter there loads the
    collection's filters once, and the workers forked for each task inherit them (a no-op site.yml ran
    its tasks in about 4.3 s without it, 2.6 s with it). Every play on ds4_target_hosts goes through it;
    those that site.yml runs after its first leave out the Sparks it found with nothing to change."""
    plays = [
        (path.name, play["hosts"])
        for path in sorted((REPO / "playbooks").glob("*.yml"))
        for play in yaml.safe_load(path.read_text())
        if "ds4_target_hosts" in str(play.get("hosts", ""))
    ]
    assert len(plays) == 10, plays
    changing = [name for name, hosts in plays if hosts == CHANGING_PLAYS]
    assert changing == ["gateway.yml", "provision.yml"]
    assert [name for name, hosts in plays if hosts not in (SPARK_PLAYS, CHANGING_PLAYS)] == []


def test_the_sparks_with_nothing_to_change_are_left_out_only_where_the_run_found_some():
    assert target_hosts("sparks", {"all": [], "sparks": ["a"]}) == "sparks"
    assert target_hosts("sparks", {"sparks": ["a", "b"], UNCHANGED: ["a"]}) == f"sparks:!{UNCHANGED}"
    assert target_hosts(" a,b ", {UNCHANGED: ["a"]}) == f"a,b:!{UNCHANGED}"
    assert FilterModule().filters()["target_hosts"]("sparks", {UNCHANGED: []}) == f"sparks:!{UNCHANGED}"
    # The group applied_check puts them in.
    task_file = yaml.safe_load((REPO / "roles/ds4_service/tasks/applied_check.yml").read_text())
    (group_by,) = [task for task in task_file if "ansible.builtin.group_by" in task]
    assert group_by["ansible.builtin.group_by"]["key"] == UNCHANGED
