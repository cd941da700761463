"""A pair's mode (ds4_pairs' mode and transport): what each mode serves, each refusal before any change."""

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.ds4.fleet.plugins.module_utils._pair.declaration import (
    PairError,
    member_problems,
    pairs_of,
    quantization_fit_problem,
    tensor_member,
)
from ansible_collections.ds4.fleet.plugins.module_utils._pair.mode import mode_of, transport_of

DEFAULTS = Path(__file__).resolve().parents[5] / "roles" / "ds4_common" / "defaults" / "main.yml"
CATALOG = yaml.safe_load(DEFAULTS.read_text())["ds4_model_catalog"]
SPARK = 128501256192
FLOOR = 4 * 1024**3


def pairs(**keys):
    pair = {
        "coordinator": {"host": "spark04", "address": "10.77.0.1"},
        "worker": {"host": "spark05", "address": "10.77.0.2"},
    }
    pair.update(keys)
    return {"pair01": pair}


def members(quantization="q2", generation="0731", **more):
    member = {
        "ds4_release": "g0123456789ab",
        "ds4_release_commit": "0123456789ab" + "0" * 28,
        "ds4_model_generation": generation,
        "ds4_quantization": quantization,
        "ds4_ctx": 65536,
    }
    return {
        "spark04": dict(member, addresses=["10.77.0.1"], **more.get("spark04", {})),
        "spark05": dict(member, addresses=["10.77.0.2"], **more.get("spark05", {})),
    }


def refusals(declared):
    with pytest.raises(PairError) as caught:
        pairs_of(declared)
    return caught.value.errors


def test_a_pair_without_a_mode_keeps_the_pipeline_and_a_tensor_pair_asks_for_rdma():
    assert mode_of(pairs()["pair01"]) == "pipeline" and transport_of(pairs()["pair01"]) is None
    tensor = pairs(mode="tensor")["pair01"]
    assert pairs_of(pairs(mode="tensor")) and mode_of(tensor) == "tensor"
    assert transport_of(tensor) == "rdma"
    assert transport_of(pairs(mode="tensor", transport="tcp")["pair01"]) == "tcp"


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"mode": "tp"}, "ds4_pairs['pair01'].mode must be pipeline or tensor, got 'tp'"),
        (
            {"mode": "tensor", "transport": "ib"},
            "ds4_pairs['pair01'].transport must be rdma or tcp, got 'ib'",
        ),
        (
            {"transport": "rdma"},
            "ds4_pairs['pair01'].transport is the tensor mode's (rdma or tcp); a pipeline pair talks plain "
            "TCP: leave it out or set ds4_pairs['pair01'].mode to tensor",
        ),
        (
            {"mode": "tensor", "layers": "0:20"},
            "ds4_pairs['pair01'].layers is the pipeline's split; in tensor mode the engine splits every "
            "layer across both Sparks: leave it out",
        ),
    ],
)
def test_a_mode_declared_wrongly_is_refused_naming_the_key(keys, message):
    assert refusals(pairs(**keys)) == [message]


@pytest.mark.parametrize("quantization", ["q2", "mxfp4"])
def test_the_tensor_mode_serves_what_the_catalog_lists(quantization):
    declared = pairs(mode="tensor")
    assert member_problems("pair01", declared["pair01"], members(quantization), CATALOG) == []


def test_a_model_the_tensor_mode_does_not_serve_is_refused_naming_the_variable():
    declared = pairs(mode="tensor")
    assert member_problems("pair01", declared["pair01"], members("q4"), CATALOG) == [
        "ds4_pairs['pair01'].mode tensor: the engine's tensor-parallel mode does not serve "
        "ds4_model_generation '0731' with ds4_quantization 'q4' (of this generation it serves: q2, mxfp4; "
        "ds4_model_catalog['0731'].tensor_parallel); declare the pair's mode pipeline, or pick a "
        "quantization it serves"
    ]
    # A generation whose catalog entry lists nothing (GLM, a vision or streamed model) is served by none.
    legacy = member_problems("pair01", declared["pair01"], members("q2", "legacy"), CATALOG)
    assert legacy == [
        "ds4_pairs['pair01'].mode tensor: the engine's tensor-parallel mode does not serve "
        "ds4_model_generation 'legacy' with ds4_quantization 'q2' (of this generation it serves: none; "
        "ds4_model_catalog['legacy'].tensor_parallel); declare the pair's mode pipeline, or pick a "
        "quantization it serves"
    ]
    # The pipeline pair of the same model is no refusal of the mode's.
    assert member_problems("pair01", pairs()["pair01"], members("q4"), CATALOG) == []


def test_a_catalog_list_that_is_no_list_of_keys_is_refused_naming_it():
    catalog = copy.deepcopy(CATALOG)
    catalog["0731"]["tensor_parallel"] = "q2"
    assert member_problems("pair01", pairs(mode="tensor")["pair01"], members(), catalog) == [
        "ds4_pairs['pair01'].mode tensor: ds4_model_catalog['0731'].tensor_parallel must be a list of its "
        "quantization keys, got 'q2'"
    ]


def test_members_on_different_commits_are_refused_in_tensor_mode_too():
    other = {"spark05": {"ds4_release_commit": "f" * 40}}
    problems = member_problems("pair01", pairs(mode="tensor")["pair01"], members(**other), CATALOG)
    assert len(problems) == 1 and "the members differ in commit" in problems[0]


def test_a_member_without_rdma_is_refused_where_rdma_is_asked_and_tcp_asks_for_none():
    found = {"device": "rocep1s0f1", "port": 1, "gid_index": 3}
    seen = members(spark04={"rdma": found}, spark05={"rdma": None})
    assert member_problems("pair01", pairs(mode="tensor")["pair01"], seen, CATALOG) == [
        "ds4_pairs['pair01'].transport rdma: worker spark05 has no RDMA device serving its link address "
        "10.77.0.2 (no RoCE v2 GID of /sys/class/infiniband holds it): cable the ConnectX-7 port and load "
        "its driver, or set ds4_pairs['pair01'].transport to tcp"
    ]
    assert member_problems("pair01", pairs(mode="tensor", transport="tcp")["pair01"], seen, CATALOG) == []
    # Where the run did not look (no "rdma" read), nothing is refused: the start's discovery decides.
    assert member_problems("pair01", pairs(mode="tensor")["pair01"], members(), CATALOG) == []


def test_in_tensor_mode_each_member_maps_half_of_every_layer_of_the_whole_file():
    catalog = copy.deepcopy(CATALOG)
    # MXFP4 (~156 GB) cannot sit on one Spark; its half of every layer fits each member.
    mxfp4 = {"name": "DeepSeek-V4-Flash-MXFP4-0731.gguf", "repo": "a/b", "revision": "main"}
    extra = {"0731": {"mxfp4": dict(mxfp4, size=156000000000, sha256="a" * 64)}}
    alone = quantization_fit_problem(catalog, "0731", "plain", "mxfp4", extra, {}, "spark04", SPARK, FLOOR)
    assert "one Spark cannot hold it" in alone
    for host in ("spark04", "spark05"):
        assert (
            quantization_fit_problem(
                catalog, "0731", "plain", "mxfp4", extra, pairs(mode="tensor"), host, SPARK, FLOOR
            )
            is None
        )
    small = SPARK // 2
    assert quantization_fit_problem(
        catalog, "0731", "plain", "mxfp4", extra, pairs(mode="tensor"), "spark05", small, FLOOR
    ) == (
        "ds4_quantization 'mxfp4' needs 78,000,000,000 bytes (72.64 GiB) on the worker spark05 in tensor "
        "mode (half of every layer) and it has 59,955,660,800 bytes (55.84 GiB): pick a smaller "
        "quantization, or declare the pair's mode pipeline (ds4_pairs[...].mode)"
    )


def test_v4_1_q2_is_served_in_tensor_mode_held_in_memory_half_of_every_layer_on_each_member():
    """The contract: V4.1 Q2 in the tensor mode, which does not stream (no --ssd-streaming): each member
    holds half of every layer of the whole file in memory, where one Spark streams its experts from disk.
    The catalog's 341 GiB file makes that 170 GiB a member, more than a 128 GB Spark has."""
    declared = pairs(mode="tensor")
    assert member_problems("pair01", declared["pair01"], members("q2", "v4.1"), CATALOG) == []
    # One Spark alone streams it: the fit of its resident part is _host.model_fit's, not this one's.
    assert quantization_fit_problem(CATALOG, "v4.1", "plain", "q2", {}, {}, "spark04", SPARK, FLOOR) is None
    assert quantization_fit_problem(
        CATALOG, "v4.1", "plain", "q2", {}, declared, "spark05", SPARK, FLOOR
    ) == (
        "ds4_quantization 'q2' needs 182,856,843,264 bytes (170.30 GiB) on the worker spark05 in tensor mode "
        "(half of every layer) and it has 124,206,288,896 bytes (115.68 GiB): pick a smaller quantization, "
        "or declare the pair's mode pipeline (ds4_pairs[...].mode)"
    )
    big = 2 * SPARK
    assert (
        quantization_fit_problem(CATALOG, "v4.1", "plain", "q2", {}, declared, "spark05", big, FLOOR) is None
    )


def test_only_a_tensor_pair_s_member_holds_a_streamed_family_in_memory():
    assert tensor_member(pairs(mode="tensor"), "spark05") and tensor_member(pairs(mode="tensor"), "spark04")
    assert not tensor_member(pairs(), "spark05")
    assert not tensor_member(pairs(mode="tensor"), "spark01") and not tensor_member({}, "spark04")
