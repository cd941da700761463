"""ds4_service's pair_check.yml judges the pair before it writes anything: every refusal it can make from
the declaration, the members' settings and facts comes before the link's netplan file is written (only the
checks that need the link addressed follow it)."""

from pathlib import Path

import yaml

TASKS = Path(__file__).resolve().parents[4] / "roles" / "ds4_service" / "tasks"


def test_every_refusal_of_the_pair_comes_before_the_link_netplan_file_is_written():
    tasks = yaml.safe_load((TASKS / "pair_check.yml").read_text())
    names = [task["name"] for task in tasks]
    writes = [
        i for i, task in enumerate(tasks) if task.get("ansible.builtin.import_tasks") == "pair_link.yml"
    ]
    # The one refusal after it passes on the link checks' verdict to the other member of the pair.
    partner = "Refuse a member whose partner in the pair was refused, before anything changes"
    refusals = [
        i for i, task in enumerate(tasks) if "ansible.builtin.fail" in task and task["name"] != partner
    ]
    assert partner in names[writes[0] :] if writes else False, names
    assert len(writes) == 1 and refusals, names
    assert max(refusals) < writes[0], names
    # What the link module itself refuses (a setting, a Spark without netplan) it refuses before it writes.
    link = yaml.safe_load((TASKS / "pair_link.yml").read_text())
    assert [task["ds4.fleet.ds4_pair_link"].get("netplan") for task in link] == [True]
