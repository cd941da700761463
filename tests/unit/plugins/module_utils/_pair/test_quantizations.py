"""The catalog's quantizations: the one a setting picks, the operator's, and whether one fits a Spark."""

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.ds4.fleet.plugins.module_utils._pair.declaration import fit_problem, pair_split
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import (
    CatalogError,
    model_files,
    quantizations_of,
    validate_catalog,
)

DEFAULTS = Path(__file__).resolve().parents[5] / "roles" / "ds4_common" / "defaults" / "main.yml"
Q4 = (
    "DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-"
    "chat-v2-imatrix-0731.gguf"
)
# What a GB10's /proc/meminfo reports (tests/standins/gpu/personas.py), and the engine's default floor.
SPARK = 128501256192
FLOOR = 4 * 1024**3
SHA = "a" * 64
DRAFTER = "DSpark-drafter-Q2K-Q8-0731.gguf"


def extra(key, name, sha256=SHA, generation="0731"):
    entry = {"name": name, "repo": "a/b", "revision": "main", "size": 9}
    if sha256:
        entry["sha256"] = sha256
    return {generation: {key: entry}}


@pytest.fixture
def catalog():
    return copy.deepcopy(yaml.safe_load(DEFAULTS.read_text())["ds4_model_catalog"])


def sized(catalog, files):
    """model_files entries with the bytes the fit judges (exact size, else the published approximate)."""
    quants = quantizations_of(catalog, files[0]["generation"])
    return [dict(f, bytes=f["size"] or quants[f["quantization"]]["bytes"]) if f["role"] == "base" else f
            for f in files]  # fmt: skip


def test_the_shipped_catalog_publishes_the_engine_quantizations(catalog):
    quants = quantizations_of(validate_catalog(catalog), "0731")
    assert list(quants) == ["q2", "q2-q4", "q4", "mxfp4"]
    assert quants["q2"]["size"] == 86720111488
    assert quants["q4"]["name"] == Q4 and quants["q4"]["bytes"] == 153000000000
    assert quants["q4"]["pair_layers"] == "0:20"
    assert [quants[k]["named"] for k in quants] == [True, False, True, False]


def test_the_setting_picks_the_base_file_and_keeps_the_drafter(catalog):
    q2 = model_files(catalog, "0731", "dspark")
    q4 = model_files(catalog, "0731", "dspark", "q4")
    assert q2[0]["quantization"] == "q2" and q2[0]["sha256"].startswith("ca22ae2f")
    assert q4[0] == {"name": Q4, "repo": "antirez/deepseek-v4-gguf", "revision": "main", "size": None,
                     "sha256": None, "role": "base", "generation": "0731", "quantization": "q4"}  # fmt: skip
    assert q4[1] == q2[1]


@pytest.mark.parametrize(
    ("generation", "quantization", "added", "message"),
    [
        ("0731", "q8", None, "ds4_quantization 'q8' is not a quantization of ds4_model_catalog['0731'] "
         "(known: q2, q2-q4, q4, mxfp4)"),
        ("legacy", "q4", None, "ds4_quantization 'q4' is not a quantization of ds4_model_catalog['legacy'] "
         "(known: q2)"),
        ("0731", "mxfp4", None, "ds4_quantization 'mxfp4' of '0731' has no published file name"),
        ("0731", "q3", extra("q3", "q3-0731.gguf", None),
         "ds4_extra_quantizations['0731']['q3'].sha256 is required"),
        ("0731", "q3", extra("q3", "q3.gguf"), "belongs to a generation other than 0731"),
        ("0731", "q4", extra("q4", "x-0731.gguf"), "already names the file of 'q4'"),
        ("0731", "q2", extra("q2", "x-0731.gguf"),
         "the key must be a short lowercase name other than the base's"),
        ("0731", "q3", {"v9": {}}, "ds4_extra_quantizations has generation 'v9'"),
    ],
)  # fmt: skip
def test_a_quantization_without_a_file_is_refused_naming_the_setting(
    catalog, generation, quantization, added, message
):
    with pytest.raises(CatalogError) as caught:
        model_files(catalog, generation, "plain", quantization, added)
    assert message in str(caught.value)


def test_an_operator_gives_the_file_of_a_published_quantization_or_a_new_one(catalog):
    entry = {"name": "DeepSeek-V4-Flash-MXFP4-0731.gguf", "repo": "antirez/deepseek-v4-gguf",
             "revision": "main", "size": 167503724544, "sha256": SHA}  # fmt: skip
    base = model_files(catalog, "0731", "plain", "mxfp4", {"0731": {"mxfp4": entry}})[0]
    assert base == dict(entry, role="base", generation="0731", quantization="mxfp4")
    own = model_files(catalog, "0731", "plain", "q3", {"0731": {"q3": dict(entry, name="q3-0731.gguf")}})[0]
    assert own["name"] == "q3-0731.gguf" and own["sha256"] == SHA


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"quantizations": {"q4": {"name": None}}}, "approx_bytes must be a positive byte count"),
        ({"quantizations": {"q2": {"approx_bytes": 5}}}, "other than base_quantization"),
        ({"quantizations": {"Q4": {"approx_bytes": 5}}}, "a short lowercase name"),
        ({"quantizations": {"q4": {"approx_bytes": 5, "pair_layers": "3:20"}}},
         "pair_layers must be the coordinator's slice 0:K"),
        ({"layers": 1}, "layers must be a layer count from 2 up"),
        ({"quantizations": {"q4": dict(extra("q4", DRAFTER)["0731"]["q4"], approx_bytes=5)}},
         "is also ds4_model_catalog['0731'].files.dspark"),
    ],
)  # fmt: skip
def test_a_bad_quantization_entry_is_refused(catalog, change, message):
    catalog["0731"].update(change)
    with pytest.raises(CatalogError) as caught:
        validate_catalog(catalog)
    assert message in str(caught.value)


def test_one_spark_holds_q2_and_q2_q4_and_refuses_q4_naming_the_pair_setting(catalog):
    extra = {
        "0731": {
            "q2-q4": {
                "name": "q2q4-0731.gguf",
                "repo": "a/b",
                "revision": "main",
                "size": 98000000000,
                "sha256": SHA,
            }
        }
    }
    for quant in ("q2", "q2-q4"):
        files = sized(catalog, model_files(catalog, "0731", "dspark", quant, extra))
        assert fit_problem("spark01", files, SPARK, FLOOR) is None, quant
    problem = fit_problem(
        "spark01", sized(catalog, model_files(catalog, "0731", "dspark", "q4")), SPARK, FLOOR
    )
    assert problem.startswith(
        "ds4_quantization 'q4' needs 159,971,241,504 bytes (148.98 GiB) of memory and spark01 has"
    )
    assert "declare spark01 in a pair (ds4_pairs)" in problem


def test_a_pair_holds_q4_each_member_its_slice(catalog):
    files = sized(catalog, model_files(catalog, "0731", "dspark", "q4"))
    layers = pair_split(catalog["0731"], quantizations_of(catalog, "0731")["q4"])
    assert (layers["coordinator"], layers["worker"]) == ("0:20", "21:output")
    for role in ("coordinator", "worker"):
        assert fit_problem("spark04", files, SPARK, FLOOR, role, layers) is None, role
    # The same pair with a split that leaves the worker almost all of it does not.
    lopsided = pair_split(catalog["0731"], {}, "0:1")
    problem = fit_problem("spark05", files, SPARK, FLOOR, "worker", lopsided)
    assert (
        problem.startswith("ds4_quantization 'q4' needs")
        and "the worker spark05 (its slice 2:output)" in problem
    )


def test_no_memory_fact_judges_nothing(catalog):
    files = sized(catalog, model_files(catalog, "0731", "dspark", "q4"))
    assert fit_problem("spark01", files, None, FLOOR) is None
