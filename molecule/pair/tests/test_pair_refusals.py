"""Every pair that cannot serve is refused before anything changes on either member (docs/pair.md, "What
each refusal means"): site.yml run again on the serving pair with a bad declaration or bad member settings
fails, naming what is wrong, and leaves both Sparks as they were: the same engines running, the same
launch files, units, firewall, links and weights."""

import json
import os

import pytest
import yaml
from members import COORDINATOR, WORKER, answers, site_run
from spark import sandbox_host


def declared(**pairs):
    return ["-e", json.dumps({"ds4_pairs": pairs})]


def member(host, address):
    return {"host": host, "address": address}


GOOD = {"coordinator": member(COORDINATOR, "10.77.0.1"), "worker": member(WORKER, "10.77.0.2")}

# (extra arguments, variables of the worker given by a second inventory, limit, what the refusal says)
CASES = {
    "shape": (
        declared(
            pair01={
                "coordinator": member(COORDINATOR, "10.77.0.1"),
                "worker": member(COORDINATOR, "10.77.0.2"),
            },
            pair02={"coordinator": member(WORKER, "10.77.0.2")},
            pair03={"coordinator": member(WORKER, "10.77.0.2"), "worker": member("spark06", "10.77.0.6")},
        ),
        {},
        "pair01",
        [
            "names spark04 as both coordinator and worker: a pair of one Spark",
            "a pair is two Sparks, a coordinator and a worker",
            "ds4_pairs puts spark05 in two pairs",
        ],
    ),
    "address": (
        declared(pair01={**GOOD, "coordinator": member(COORDINATOR, "10.77.0.9")}),
        {},
        "pair01",
        ["ds4_pairs['pair01'].coordinator.address 10.77.0.9 is not an address of spark04"],
    ),
    "one-member": ([], {}, COORDINATOR, ["ds4_pairs['pair01']: this run takes spark04 without spark05"]),
    "members-differ": (
        [],
        {
            "ds4_release": "v0.6.3",
            "ds4_release_commit": "0" * 40,
            "ds4_model_generation": "legacy",
            "ds4_quantization": "q2",
            "ds4_ctx": 65536,
        },
        "pair01",
        [
            "the members differ in release",
            "the members differ in commit",
            "the members differ in model generation",
            "the members differ in quantization",
            "the worker spark05 has ds4_ctx 65536, below the coordinator spark04's allocation",
        ],
    ),
    "layers-not-from-0": (
        declared(pair01={**GOOD, "layers": "1:20"}),
        {},
        "pair01",
        ["the coordinator's slice must start at layer 0"],
    ),
    "layers-all": (
        declared(pair01={**GOOD, "layers": "0:42"}),
        {},
        "pair01",
        ["leaves the worker no layer"],
    ),
    "layers-beyond": (
        declared(pair01={**GOOD, "layers": "0:99"}),
        {},
        "pair01",
        ["is not within the model's 43 layers"],
    ),
    "q4-alone": (
        ["-e", '{"ds4_pairs": {}}'],
        {},
        COORDINATOR,
        ["one Spark cannot hold it; declare spark04 in a pair (ds4_pairs)"],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_pair_that_cannot_serve_is_refused_with_nothing_changed(tmp_path, case):
    args, worker_vars, limit, refusals = CASES[case]
    # The worker's own variables, beside the scenario's inventory: what a host_vars file would give it.
    worker_inventory = tmp_path / "worker.yml"
    worker_inventory.write_text(yaml.safe_dump({"all": {"hosts": {WORKER: worker_vars}}}))
    run, before, after = site_run(
        *args, limit=limit, inventory=[os.environ["MOLECULE_INVENTORY_FILE"], str(worker_inventory)]
    )
    assert run.rc != 0, run
    for refusal in refusals:
        assert run.said(refusal), f"not said: {refusal!r}\n{run}"
    for name in limit.replace("pair01", f"{COORDINATOR},{WORKER}").split(","):
        assert run.changed(name) == 0, run
    assert after == before
    assert answers(sandbox_host(COORDINATOR))


def test_a_pair_whose_members_do_not_reach_each_other_is_refused_with_nothing_changed(tmp_path):
    """The worker's link address does not answer the coordinator (here its SSH port, where the check
    knocks, is dropped on the link): refused before anything changes."""
    run, before, after = site_run(drop="tcp dport 22 ip saddr 10.77.0.1 drop")
    assert run.rc != 0, run
    assert run.said("spark04 does not reach its worker spark05 at its link address 10.77.0.2"), run
    assert run.changed(COORDINATOR) == 0 and run.changed(WORKER) == 0, run
    assert after == before
    assert answers(sandbox_host(COORDINATOR))
