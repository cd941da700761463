"""The pair filters: this run's refusals from the members' variables and facts, and a member's part."""

import copy
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_pair import pair_hosts, pair_member, pair_problems

CATALOG = yaml.safe_load(
    (Path(__file__).resolve().parents[4] / "roles" / "ds4_common" / "defaults" / "main.yml").read_text()
)["ds4_model_catalog"]
PAIRS = {
    "pair01": {
        "coordinator": {"host": "spark04", "address": "10.77.0.1"},
        "worker": {"host": "spark05", "address": "10.77.0.2"},
    }
}


def host(address, **more):
    values = {"ds4_release": "v0.6.5", "ds4_release_commit": "", "ds4_model_generation": "0731",
              "ds4_quantization": "q4", "ds4_ctx": 65536,
              "ansible_facts": {"all_ipv4_addresses": ["10.88.0.9", address]}}  # fmt: skip
    values.update(more)
    return values


HOSTVARS = {"spark01": host("10.88.0.1"), "spark04": host("10.77.0.1"), "spark05": host("10.77.0.2")}


def test_a_sound_pair_in_the_run_has_no_refusal_and_a_single_spark_has_no_part():
    assert pair_problems(PAIRS, HOSTVARS, ["spark04", "spark05"]) == []
    assert pair_problems({}, HOSTVARS, ["spark01"]) == []
    assert pair_member(PAIRS, "spark01", CATALOG, "0731", "q4") == {}


def test_a_run_on_one_member_is_refused_and_a_run_beside_the_pair_is_not():
    assert pair_problems(PAIRS, HOSTVARS, ["spark04"]) == [
        "ds4_pairs['pair01']: this run takes spark04 without spark05; a pair is provisioned as one (limit "
        "the run to both members, -l spark04,spark05)"
    ]
    assert pair_problems(PAIRS, HOSTVARS, ["spark01"]) == []


def test_the_members_facts_and_variables_are_judged():
    hostvars = copy.deepcopy(HOSTVARS)
    hostvars["spark05"] = host("10.77.0.3", ds4_ctx=4096, ds4_release="v0.6.3")
    problems = pair_problems(PAIRS, hostvars, ["spark04", "spark05"])
    assert [p.split(" is not")[0].split(":")[0] for p in problems] == [
        "ds4_pairs['pair01'].worker.address 10.77.0.2",
        "ds4_pairs['pair01']",
        "ds4_pairs['pair01']",
    ]


def test_members_are_compared_by_what_they_remembered_with_their_defaults():
    """hostvars lacks the roles' defaults: a member that leaves ds4_release and ds4_ctx to them and one that
    gives the same values are the same build, and a context below the default one is still refused."""
    compared = {"ds4_release": "v0.6.5", "ds4_release_commit": "", "ds4_model_generation": "0731",
                "ds4_quantization": "q4", "ds4_ctx": "524288"}  # fmt: skip
    hostvars = copy.deepcopy(HOSTVARS)
    hostvars["spark04"] = {
        "ansible_facts": HOSTVARS["spark04"]["ansible_facts"],
        "_ds4_pair_compared": compared,
    }
    hostvars["spark05"] = host(
        "10.77.0.2", ds4_ctx=524288, _ds4_pair_compared={**compared, "ds4_ctx": 524288}
    )
    assert pair_problems(PAIRS, hostvars, ["spark04", "spark05"]) == []
    hostvars["spark05"]["_ds4_pair_compared"]["ds4_ctx"] = "65536"
    assert pair_problems(PAIRS, hostvars, ["spark04", "spark05"]) == [
        "ds4_pairs['pair01']: the worker spark05 has ds4_ctx 65536, below the coordinator spark04's "
        "allocation 524288; the engine rejects it at registration"
    ]


def test_a_member_knows_its_role_peer_port_and_slice():
    assert pair_member(PAIRS, "spark05", CATALOG, "0731", "q4", {}, 9400) == {
        "pair": "pair01", "role": "worker", "peer": "spark04", "address": "10.77.0.2",
        "peer_address": "10.77.0.1", "coordinator_address": "10.77.0.1", "worker_address": "10.77.0.2",
        "port": 9400, "mode": "pipeline", "transport": None, "layers": "21:output",
    }  # fmt: skip
    custom = copy.deepcopy(PAIRS)
    custom["pair01"].update(port=9555, layers="0:25")
    assert pair_member(custom, "spark04", CATALOG, "0731", "q4")["layers"] == "0:25"
    assert pair_member(custom, "spark04", CATALOG, "0731", "q4")["port"] == 9555


def test_a_tensor_member_knows_its_mode_and_transport_and_has_no_slice():
    tensor = copy.deepcopy(PAIRS)
    tensor["pair01"]["mode"] = "tensor"
    member = pair_member(tensor, "spark05", CATALOG, "0731", "q2", {}, 9400)
    assert (member["mode"], member["transport"], member["layers"]) == ("tensor", "rdma", None)
    tensor["pair01"]["transport"] = "tcp"
    assert pair_member(tensor, "spark04", CATALOG, "0731", "q2")["transport"] == "tcp"


def test_a_model_the_pairs_mode_does_not_serve_is_refused_with_the_catalog():
    tensor = copy.deepcopy(PAIRS)
    tensor["pair01"]["mode"] = "tensor"
    problems = pair_problems(tensor, HOSTVARS, ["spark04", "spark05"], CATALOG)
    assert problems == [
        "ds4_pairs['pair01'].mode tensor: the engine's tensor-parallel mode does not serve "
        "ds4_model_generation '0731' with ds4_quantization 'q4' (of this generation it serves: q2, mxfp4; "
        "ds4_model_catalog['0731'].tensor_parallel); declare the pair's mode pipeline, or pick a "
        "quantization it serves"
    ]


def test_a_member_without_the_rdma_its_tensor_pair_asks_for_is_refused_from_what_it_remembered():
    tensor = copy.deepcopy(PAIRS)
    tensor["pair01"]["mode"] = "tensor"
    found = {"device": "rocep1s0f1", "port": 1, "gid_index": 3, "ndev": "enP2p1s0f1np1", "active": True}
    hostvars = copy.deepcopy(HOSTVARS)
    for name, rdma in (("spark04", found), ("spark05", None)):
        compared = {key: hostvars[name][key] for key in ("ds4_release", "ds4_release_commit", "ds4_ctx",
                                                          "ds4_model_generation")}  # fmt: skip
        hostvars[name]["_ds4_pair_compared"] = dict(compared, ds4_quantization="q2", rdma=rdma)
    assert pair_problems(tensor, hostvars, ["spark04", "spark05"], CATALOG) == [
        "ds4_pairs['pair01'].transport rdma: worker spark05 has no RDMA device serving its link address "
        "10.77.0.2 (no RoCE v2 GID of /sys/class/infiniband holds it): cable the ConnectX-7 port and load "
        "its driver, or set ds4_pairs['pair01'].transport to tcp"
    ]
    hostvars["spark05"]["_ds4_pair_compared"]["rdma"] = found
    assert pair_problems(tensor, hostvars, ["spark04", "spark05"], CATALOG) == []


def test_a_split_beyond_the_model_fails_naming_the_setting():
    custom = copy.deepcopy(PAIRS)
    custom["pair01"]["layers"] = "0:50"
    with pytest.raises(AnsibleFilterError, match=r"ds4_pairs\['pair01'\].layers: layer slice '0:50'"):
        pair_member(custom, "spark04", CATALOG, "0731", "q4")


def test_the_members_are_listed_however_malformed_the_rest():
    assert pair_hosts(PAIRS) == ["spark04", "spark05"]
    assert pair_hosts({"a": {"coordinator": {"host": "x"}, "port": 5}, "b": "junk"}) == ["x"]
    assert pair_hosts("junk") == []


def test_a_member_that_addresses_its_link_is_judged_by_its_interfaces_from_its_facts():
    """ds4_pair_link_manage on (remembered with the defaults): the address is not the member's yet; its
    interface is read from its facts, by name (Ansible keeps a `-` in the fact's name as `_`)."""
    hostvars = copy.deepcopy(HOSTVARS)
    facts = {"all_ipv4_addresses": ["10.88.0.5"], "interfaces": ["lo", "eth0", "enP2p1s0f1np1", "br-lan"],
             "lo": {"ipv4": {"address": "127.0.0.1"}}, "eth0": {"ipv4": {"address": "10.88.0.5"}},
             "enP2p1s0f1np1": {}, "br_lan": {"ipv4": {"address": "10.88.1.5"},
                                            "ipv4_secondaries": [{"address": "10.77.0.2"}]}}  # fmt: skip
    compared = {"ds4_pair_link_manage": True, "ds4_pair_link_interface": "enP2p1s0f1np1"}
    hostvars["spark05"] = host("10.88.0.5", ansible_facts=facts, _ds4_pair_compared={
        **{k: v for k, v in HOSTVARS["spark05"].items() if k.startswith("ds4_")}, **compared})  # fmt: skip
    assert pair_problems(PAIRS, hostvars, ["spark04", "spark05"]) == [
        "ds4_pairs['pair01'].worker.address 10.77.0.2 is already held by br-lan on spark05, not by its link "
        "interface enP2p1s0f1np1 (ds4_pair_link_interface): take it off br-lan, or correct the declaration "
        "or ds4_pair_link_interface"
    ]
    facts["br_lan"].pop("ipv4_secondaries")
    assert pair_problems(PAIRS, hostvars, ["spark04", "spark05"]) == []
    hostvars["spark05"]["_ds4_pair_compared"]["ds4_pair_link_manage"] = False
    assert "is not an address of spark05" in pair_problems(PAIRS, hostvars, ["spark04", "spark05"])[0]
