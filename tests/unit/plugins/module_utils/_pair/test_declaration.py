"""A pair's declaration (ds4_pairs), judged before anything changes: each refusal, and the layer split."""

import copy

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._pair.declaration import (
    PairError,
    member_problems,
    pair_of,
    pair_split,
    pairs_of,
    parse_slice,
    split,
)

PAIRS = {
    "pair01": {
        "coordinator": {"host": "spark04", "address": "10.77.0.1"},
        "worker": {"host": "spark05", "address": "10.77.0.2"},
    }
}
MEMBER = {
    "ds4_release": "v0.6.5",
    "ds4_release_commit": "",
    "ds4_model_generation": "0731",
    "ds4_quantization": "q4",
    "ds4_ctx": 65536,
}
MEMBERS = {
    "spark04": dict(MEMBER, addresses=["10.88.0.4", "10.77.0.1"]),
    "spark05": dict(MEMBER, addresses=["10.88.0.5", "10.77.0.2"]),
}
GENERATION = {"layers": 43}


def refusals(pairs):
    with pytest.raises(PairError) as caught:
        pairs_of(pairs)
    return caught.value.errors


def test_a_sound_pair_is_accepted_and_each_member_knows_its_role():
    assert pairs_of(PAIRS) == PAIRS
    assert pairs_of({}) == {} and pairs_of(None) == {}
    assert member_problems("pair01", PAIRS["pair01"], MEMBERS) == []
    assert pair_of(PAIRS, "spark05") == ("pair01", "worker", PAIRS["pair01"])
    assert pair_of(PAIRS, "spark01") is None


def test_a_pair_of_one_is_refused():
    assert refusals({"pair01": {"coordinator": PAIRS["pair01"]["coordinator"]}}) == [
        "ds4_pairs['pair01'].worker is missing: a pair is two Sparks, a coordinator and a worker, each "
        "{host: NAME, address: ITS LINK ADDRESS}"
    ]
    one = copy.deepcopy(PAIRS)
    one["pair01"]["worker"]["host"] = "spark04"
    assert refusals(one) == [
        "ds4_pairs['pair01'] names spark04 as both coordinator and worker: a pair of one Spark"
    ]


def test_a_spark_in_two_pairs_is_refused():
    two = copy.deepcopy(PAIRS)
    two["pair02"] = {
        "coordinator": {"host": "spark06", "address": "10.78.0.1"},
        "worker": {"host": "spark05", "address": "10.78.0.2"},
    }
    assert refusals(two) == [
        "ds4_pairs puts spark05 in two pairs, 'pair01' and 'pair02': a Spark serves one pair"
    ]


@pytest.mark.parametrize(
    ("address", "why"),
    [("link", "an IP address"), ("127.0.0.1", "not loopback"), ("0.0.0.0", "not loopback, a wildcard")],
)
def test_an_address_that_is_no_spark_address_is_refused(address, why):
    bad = copy.deepcopy(PAIRS)
    bad["pair01"]["worker"]["address"] = address
    (refusal,) = refusals(bad)
    assert refusal.startswith("ds4_pairs['pair01'].worker.address must be") and why in refusal


def test_other_shapes_are_refused():
    assert refusals("pair01")[0].startswith("ds4_pairs must be a mapping")
    assert refusals({"pair 1": PAIRS["pair01"]})[0].startswith("ds4_pairs has pair name 'pair 1'")
    assert refusals({"pair01": dict(PAIRS["pair01"], port=0)}) == [
        "ds4_pairs['pair01'].port must be a port number from 1 to 65535, got 0"
    ]
    assert refusals({"pair01": dict(PAIRS["pair01"], link="x")})[0].startswith(
        "ds4_pairs['pair01'] has unknown keys ['link']"
    )
    same = copy.deepcopy(PAIRS)
    same["pair01"]["worker"]["address"] = "10.77.0.1"
    assert refusals(same) == ["ds4_pairs['pair01']: coordinator and worker both give the address 10.77.0.1"]


def test_an_address_that_is_not_the_sparks_own_is_refused():
    members = copy.deepcopy(MEMBERS)
    members["spark05"]["addresses"] = ["10.88.0.5"]
    assert member_problems("pair01", PAIRS["pair01"], members) == [
        "ds4_pairs['pair01'].worker.address 10.77.0.2 is not an address of spark05 (its own: 10.88.0.5): "
        "cable and address the link first, or correct the declaration"
    ]


def test_a_member_whose_link_the_run_addresses_need_not_hold_its_address_yet():
    """ds4_pair_link_manage: the netplan file gives the address after the pair is judged, so the interface
    is judged instead: it must be the Spark's and no other of its interfaces may hold the address."""
    members = copy.deepcopy(MEMBERS)
    members["spark05"]["addresses"] = ["10.88.0.5"]
    link = {"eth0": ["10.88.0.5"], "enP2p1s0f1np1": []}
    members["spark05"]["link"] = {"interface": "enP2p1s0f1np1", "interfaces": link}
    assert member_problems("pair01", PAIRS["pair01"], members) == []
    members["spark05"]["link"]["interface"] = "enP2p1s0f0np0"
    assert member_problems("pair01", PAIRS["pair01"], members) == [
        "ds4_pair_link_interface enP2p1s0f0np0 is not an interface of spark05 (its own: enP2p1s0f1np1, "
        "eth0): name the port the pair's cable is in (host_vars where the members differ)"
    ]
    link = {"eth0": ["10.88.0.5", "10.77.0.2"], "enP2p1s0f1np1": []}
    members["spark05"]["link"] = {"interface": "enP2p1s0f1np1", "interfaces": link}
    assert member_problems("pair01", PAIRS["pair01"], members) == [
        "ds4_pairs['pair01'].worker.address 10.77.0.2 is already held by eth0 on spark05, not by its link "
        "interface enP2p1s0f1np1 (ds4_pair_link_interface): take it off eth0, or correct the declaration or "
        "ds4_pair_link_interface"
    ]


def test_a_member_outside_the_inventory_is_refused():
    members = {"spark04": MEMBERS["spark04"]}
    assert member_problems("pair01", PAIRS["pair01"], members) == [
        "ds4_pairs['pair01'].worker.host spark05 is not a host of this inventory's Sparks"
    ]


@pytest.mark.parametrize(
    ("variable", "value", "what"),
    [
        ("ds4_release", "v0.6.3", "release"),
        ("ds4_release_commit", "a" * 40, "commit"),
        ("ds4_model_generation", "legacy", "model generation"),
        ("ds4_quantization", "mxfp4", "quantization"),
    ],
)
def test_members_on_different_builds_or_models_are_refused(variable, value, what):
    members = copy.deepcopy(MEMBERS)
    members["spark05"][variable] = value
    assert member_problems("pair01", PAIRS["pair01"], members) == [
        f"ds4_pairs['pair01']: the members differ in {what} ({variable}: spark04 "
        f"{MEMBER[variable]!r}, spark05 {value!r}); both must run the same build of the same model"
    ]


def test_a_worker_context_below_the_coordinators_is_refused():
    members = copy.deepcopy(MEMBERS)
    members["spark05"]["ds4_ctx"] = 32768
    assert member_problems("pair01", PAIRS["pair01"], members) == [
        "ds4_pairs['pair01']: the worker spark05 has ds4_ctx 32768, below the coordinator spark04's "
        "allocation 65536; the engine rejects it at registration"
    ]
    members["spark05"]["ds4_ctx"] = 131072
    assert member_problems("pair01", PAIRS["pair01"], members) == []


def test_the_split_is_the_published_one_or_the_setting_in_the_forward_topology():
    assert pair_split(GENERATION, {"pair_layers": "0:20"}) == {
        "coordinator": "0:20",
        "worker": "21:output",
        "coordinator_layers": 21,
        "worker_layers": 22,
        "layer_count": 43,
    }
    assert pair_split(GENERATION, {"pair_layers": "0:20"}, "0:30")["worker"] == "31:output"
    assert pair_split(GENERATION, {})["coordinator"] == "0:20"


@pytest.mark.parametrize(
    ("layers", "message"),
    [
        ("5:20", "the coordinator's slice must start at layer 0 (the forward topology), got '5:20'"),
        ("0:42", "the coordinator's slice '0:42' leaves the worker no layer of the model's 43"),
        ("0:60", "layer slice '0:60' is not within the model's 43 layers (0 to 42)"),
        ("0-20", "a layer slice is A:B (B a layer number or output), got '0-20'"),
    ],
)
def test_a_split_the_model_cannot_take_is_refused_naming_the_setting(layers, message):
    with pytest.raises(PairError) as caught:
        pair_split(GENERATION, {}, layers, "ds4_pairs['pair01'].layers")
    assert str(caught.value) == f"ds4_pairs['pair01'].layers: {message}"


def test_a_generation_without_a_layer_count_has_no_split():
    with pytest.raises(PairError, match="gives no layer count"):
        pair_split({}, {"pair_layers": "0:20"})


def test_slices():
    assert parse_slice("21:output", 43) == (21, 42)
    assert split("0:0", 2)["worker"] == "1:output"
