"""The engine's on-disk KV cache across a swap of model family (module_utils/_service/kv_cache.py, issue 53):
it survives a swap in the engine (cross-quant=accept), so a swap clears it, and a rollback clears what the
failed family wrote."""

import json
import os

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._service.kv_cache import (
    KvCacheError,
    restored,
    switched,
)
from ansible_collections.ds4.fleet.plugins.modules import ds4_kv_cache
from module_runner import run_module


@pytest.fixture
def kv(tmp_path):
    kv_dir = tmp_path / "kv"
    kv_dir.mkdir()
    (kv_dir / "bank-0").write_bytes(b"banks of V4 Flash")
    (kv_dir / "sub").mkdir()
    (kv_dir / "sub" / "bank-1").write_bytes(b"more")
    return kv_dir, tmp_path / "state" / "kv-family.json"


def test_a_cache_from_before_families_is_v4_flashs_and_stays_for_it(kv):
    kv_dir, record = kv
    result = switched(str(kv_dir), str(record), "deepseek-v4-flash")
    assert result == {"changed": True, "swap": False, "from": "deepseek-v4-flash", "removed": []}
    assert sorted(os.listdir(kv_dir)) == ["bank-0", "sub"]
    assert json.loads(record.read_text()) == {"family": "deepseek-v4-flash", "before": "deepseek-v4-flash"}
    # The same family again changes nothing.
    assert switched(str(kv_dir), str(record), "deepseek-v4-flash")["changed"] is False


def test_a_swap_clears_the_cache_and_keeps_its_directory(kv):
    kv_dir, record = kv
    result = switched(str(kv_dir), str(record), "glm-5.3-flash")
    assert (result["swap"], result["from"]) == (True, "deepseek-v4-flash")
    assert sorted(result["removed"]) == [f"{kv_dir}/bank-0", f"{kv_dir}/sub"]
    assert kv_dir.is_dir() and os.listdir(kv_dir) == []
    assert json.loads(record.read_text()) == {"family": "glm-5.3-flash", "before": "deepseek-v4-flash"}


def test_a_rollback_clears_what_the_failed_family_wrote_and_records_the_one_restored(kv):
    kv_dir, record = kv
    switched(str(kv_dir), str(record), "glm-5.3-flash")
    (kv_dir / "bank-glm").write_bytes(b"banks of GLM")
    result = restored(str(kv_dir), str(record))
    assert (result["swap"], result["removed"]) == (True, [f"{kv_dir}/bank-glm"])
    assert json.loads(record.read_text()) == {"family": "deepseek-v4-flash", "before": "deepseek-v4-flash"}
    # Nothing to undo when the switch swapped no family.
    assert restored(str(kv_dir), str(record))["changed"] is False


def test_check_mode_says_what_would_go_and_changes_nothing(kv):
    kv_dir, record = kv
    result = switched(str(kv_dir), str(record), "qwen3.8-flash-next", check_mode=True)
    assert result["swap"] is True and len(result["removed"]) == 2
    assert sorted(os.listdir(kv_dir)) == ["bank-0", "sub"] and not record.exists()


def test_a_link_in_the_cache_is_removed_never_followed(kv, tmp_path):
    kv_dir, record = kv
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("not the engine's")
    (kv_dir / "link").symlink_to(outside)
    switched(str(kv_dir), str(record), "glm-5.3-flash")
    assert (outside / "keep").read_text() == "not the engine's" and os.listdir(kv_dir) == []


def test_a_record_that_is_not_ours_is_refused_naming_it(kv):
    kv_dir, record = kv
    record.parent.mkdir()
    record.write_text("[1, 2]")
    with pytest.raises(KvCacheError, match=r"kv-family\.json .*not a record of the KV cache's family"):
        switched(str(kv_dir), str(record), "glm-5.3-flash")


def test_the_module_reads_without_changing_and_clears_when_switched(kv):
    kv_dir, record = kv
    args = {"kv_dir": str(kv_dir), "record": str(record), "family": "glm-5.3-flash"}
    read = run_module(ds4_kv_cache, dict(args, state="read"))[1]
    assert (read["changed"], read["swap"]) == (False, True) and sorted(os.listdir(kv_dir)) == [
        "bank-0",
        "sub",
    ]
    done = run_module(ds4_kv_cache, dict(args, state="switched"))[1]
    assert (done["changed"], done["swap"]) == (True, True) and os.listdir(kv_dir) == []
