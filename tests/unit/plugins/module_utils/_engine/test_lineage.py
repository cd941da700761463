"""Which engine a release is, and what follows from it (module_utils/ds4_lineage.py, the filter
ds4.fleet.engine_lineage, the catalog's speculation files per lineage)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.filter.ds4_engine import FilterModule
from ansible_collections.ds4.fleet.plugins.module_utils._engine.lineage import (
    LineageError,
    built_lineage,
    check_source,
    effective,
    help_lineage,
    probes,
    source_lineage,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights import catalog as ds4_catalog
from settings_cases import DEFAULTS

LINEAGE = FilterModule().filters()["engine_lineage"]
CATALOG = DEFAULTS["ds4_model_catalog"]


@pytest.mark.parametrize(
    ("declared", "release", "lineage"),
    [
        ("", "v0.6.5", "fork"),
        ("", "g67bd55c0a1b2", "upstream"),
        ("", "dwarfstar-g67bd55c0a1b2", "upstream"),
        ("fork", "g67bd55c0a1b2", "fork"),
        ("upstream", "v0.6.5", "upstream"),
    ],
)
def test_the_lineage_is_declared_or_follows_the_release(declared, release, lineage):
    assert effective(declared, release) == lineage == LINEAGE(declared, release)


def test_another_lineage_is_refused_naming_the_variable():
    with pytest.raises(
        AnsibleFilterError, match=r"ds4_engine_lineage must be empty, fork or upstream; got 'dw'"
    ):
        LINEAGE("dw", "v0.6.5")


def test_the_source_and_the_built_server_say_which_engine_they_are():
    assert source_lineage({"/v1/stats", "--mtp-model"}) == "fork"
    assert source_lineage({"--mtp-model"}) == "upstream"
    assert source_lineage(set()) is None
    assert (
        help_lineage("  --dspark               use DSpark\n  --mtp-model FILE  support GGUF\n") == "upstream"
    )
    assert help_lineage("  --dspark FILE              DSpark drafter GGUF\n") == "fork"
    assert help_lineage("usage: ds4-server [options]\n") is None


def test_a_source_of_the_other_lineage_is_refused_naming_the_variable():
    check_source("upstream", "upstream", "g67bd55c0a1b2", "67bd" * 10, "its source")
    check_source("upstream", None, "g67bd55c0a1b2", "67bd" * 10, "its source")
    with pytest.raises(LineageError) as refused:
        check_source("upstream", "fork", "g67bd55c0a1b2", "67bd" * 10, "its source at that commit")
    assert str(refused.value) == (
        f"ds4_engine_lineage makes release g67bd55c0a1b2 (commit {'67bd' * 10}) upstream's, but its source "
        "at that commit is fork's: it serves /v1/stats, which only the fork does. Set ds4_engine_lineage: "
        "fork, or pin a release of the upstream (ds4_release, ds4_release_commit, ds4_engine_repo)"
    )
    with pytest.raises(LineageError, match=r"is upstream's: it takes --mtp-model and serves no /v1/stats"):
        check_source("fork", "upstream", "v0.6.5", "1" * 40, "its built ds4-server --help")


def test_each_lineage_is_probed_where_its_engine_answers():
    assert probes("fork") == {
        "ready": "/v1/models",
        "alive": "/metrics",
        "inflight": "/metrics",
        "metrics": "/metrics",
    }
    # Upstream serves neither /metrics nor /v1/stats nor /health: /v1/models alone, and no count in flight.
    assert probes("upstream") == {
        "ready": "/v1/models",
        "alive": "/v1/models",
        "inflight": None,
        "metrics": None,
    }


def test_each_lineage_speculates_with_its_own_file_from_the_catalog():
    fork = ds4_catalog.model_files(CATALOG, "0731", "dspark")
    upstream = ds4_catalog.model_files(CATALOG, "0731", "dspark", lineage="upstream")
    assert [(f["role"], f["name"]) for f in fork][1] == ("dspark", "DSpark-drafter-Q2K-Q8-0731.gguf")
    assert [(f["role"], f["name"], f["repo"]) for f in upstream][1] == (
        "dspark_support",
        "DeepSeek-V4-Flash-DSpark-support-0731.gguf",
        "antirez/deepseek-v4-gguf",
    )
    assert [f["role"] for f in ds4_catalog.model_files(CATALOG, "0731", "plain", lineage="upstream")] == [
        "base"
    ]


def test_a_speculation_the_lineage_lacks_is_refused_naming_the_variables():
    with pytest.raises(
        ds4_catalog.CatalogError,
        match=r"^ds4_speculation 'mtp' \(the legacy MTP head\) is the fork's: ds4_engine_lineage upstream",
    ):
        ds4_catalog.model_files(CATALOG, "legacy", "mtp", lineage="upstream")
    with pytest.raises(
        ds4_catalog.CatalogError,
        match=r"^ds4_speculation 'dspark' on ds4_engine_lineage upstream needs a dspark_support file, and "
        r"ds4_model_generation 'legacy' has none",
    ):
        ds4_catalog.model_files(CATALOG, "legacy", "dspark", lineage="upstream")


@pytest.mark.parametrize(
    ("stamp", "lineage"),
    [
        ({"release": "v0.6.5", "lineage": "fork"}, "fork"),
        ({"release": "g67bd55c0a1b2", "lineage": "upstream"}, "upstream"),
        # Built before the stamp recorded it, not built, or a stamp that says nothing usable: unknown.
        ({"release": "v0.6.3"}, None),
        (None, None),
        ({"lineage": "antirez"}, None),
        (["lineage", "fork"], None),
    ],
)
def test_a_built_release_s_lineage_is_what_its_stamp_records(stamp, lineage):
    assert built_lineage(stamp) == lineage
