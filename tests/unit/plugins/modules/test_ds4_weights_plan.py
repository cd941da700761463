"""The ds4_weights_plan module on a real directory, with sizes the catalog lacks asked of the hub stand-in."""

import json
import os
import shutil
from types import SimpleNamespace

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ds4.fleet.plugins.modules import ds4_weights_plan

BASE_0731 = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
DRAFTER_0731 = "DSpark-drafter-Q2K-Q8-0731.gguf"
BASE_LEGACY = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf"
DRAFTER_LEGACY = "DSpark-drafter-Q2K-Q8.gguf"
MTP_LEGACY = "DeepSeek-V4-Flash-MTP-Q4K-Q8_0-F32.gguf"
LEGACY = [BASE_LEGACY, DRAFTER_LEGACY, MTP_LEGACY]


@pytest.fixture
def catalog(hub_files):
    """The shipped catalog's shape over the stand-in's files: 0731 with sizes and hashes, legacy without."""

    def entry(name, known):
        f = hub_files[name]
        return {
            "name": name,
            "repo": f["repo"],
            "revision": "main",
            "size": f["size"] if known else None,
            "sha256": f["sha256"] if known else None,
        }

    return {
        "0731": {"files": {"base": entry(BASE_0731, True), "dspark": entry(DRAFTER_0731, True)}},
        "legacy": {
            "files": {
                "base": entry(BASE_LEGACY, False),
                "dspark": entry(DRAFTER_LEGACY, False),
                "mtp": entry(MTP_LEGACY, False),
            }
        },
    }


@pytest.fixture
def plan(hub, catalog, tmp_path, capsys):
    def run(generation="0731", speculation="dspark", **extra):
        args = {
            "catalog": catalog,
            "generation": generation,
            "speculation": speculation,
            "gguf_dir": str(tmp_path / "gguf"),
            "endpoint": hub.endpoint,
            **extra,
        }
        with patch_module_args(args), pytest.raises(SystemExit) as e:
            ds4_weights_plan.main()
        out = json.loads(capsys.readouterr().out)
        assert not out.get("changed")
        return e.value.code, out

    return run


def place(hub_files, directory, names):
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copyfile(hub_files[name]["path"], directory / name)


def names(entries):
    return [e["name"] for e in entries]


def test_a_fresh_host_fetches_the_generation(plan, hub_files, tmp_path):
    rc, out = plan()
    assert rc == 0 and out["fits"] is True
    assert names(out["fetch"]) == [BASE_0731, DRAFTER_0731]
    assert out["need_bytes"] == hub_files[BASE_0731]["size"] + hub_files[DRAFTER_0731]["size"]
    assert [f["size_source"] for f in out["files"]] == ["catalog", "catalog"]
    assert out["files"][0]["path"] == str(tmp_path / "gguf" / BASE_0731)
    assert not (tmp_path / "gguf").exists(), "the plan changes nothing"


def test_sizes_the_catalog_lacks_come_from_the_hub(plan, hub_files):
    rc, out = plan("legacy", "mtp")
    assert rc == 0
    assert [(f["name"], f["size"], f["size_source"]) for f in out["files"]] == [
        (n, hub_files[n]["size"], "hub") for n in (BASE_LEGACY, MTP_LEGACY)
    ]


@pytest.mark.parametrize(
    "policy, after, kept_reason",
    [("remove", LEGACY, None), ("auto", [], "ds4_old_weights=remove"), ("keep", [], "ds4_old_weights=keep")],
)
def test_old_generation_with_room(plan, hub_files, tmp_path, policy, after, kept_reason):
    place(hub_files, tmp_path / "gguf", LEGACY)
    rc, out = plan(policy=policy)
    assert rc == 0 and out["remove_before"] == []
    assert names(out["remove_after_smoke"]) == after
    if kept_reason:
        assert sorted(k["name"] for k in out["keep"] if kept_reason in k["reason"]) == sorted(LEGACY)


def fake_free(monkeypatch, free):
    real = os.statvfs
    monkeypatch.setattr(os, "statvfs", lambda p: SimpleNamespace(f_bavail=free, f_frsize=1) if p else real(p))


def test_not_enough_room_removes_first_or_refuses(plan, hub_files, tmp_path, monkeypatch):
    place(hub_files, tmp_path / "gguf", LEGACY)
    need = hub_files[BASE_0731]["size"] + hub_files[DRAFTER_0731]["size"]
    legacy = sum(hub_files[n]["size"] for n in LEGACY)
    fake_free(monkeypatch, need - 1000)
    rc, out = plan(policy="auto")
    assert rc == 0 and names(out["remove_before"]) == LEGACY
    rc, out = plan(policy="keep")
    assert rc == 1 and out["shortfall_bytes"] == 1000
    assert out["msg"].startswith(f"not enough space in {tmp_path / 'gguf'}: ")
    assert "short by 1,000 bytes (0.00 GiB); ds4_old_weights=keep forbids removing" in out["msg"]
    fake_free(monkeypatch, need - legacy - 1000)
    rc, out = plan(policy="remove")
    assert rc == 1 and out["shortfall_bytes"] == 1000 and "even after removing" in out["msg"]


def test_a_file_a_process_has_open_is_never_removed(plan, hub_files, tmp_path, monkeypatch):
    gguf = tmp_path / "gguf"
    place(hub_files, gguf, LEGACY)
    need = hub_files[BASE_0731]["size"] + hub_files[DRAFTER_0731]["size"]
    fake_free(monkeypatch, need - 1000)
    with open(gguf / BASE_LEGACY, "rb"):
        rc, out = plan(policy="remove")
    assert rc == 0
    assert out["in_use"] == [str(gguf / BASE_LEGACY)]
    assert names(out["remove_before"]) == [DRAFTER_LEGACY, MTP_LEGACY]
    assert {k["name"]: k["reason"] for k in out["keep"]} == {BASE_LEGACY: "in use by the running service"}


def test_a_shell_installers_files_are_adopted(plan, hub_files, tmp_path):
    home = tmp_path / "home" / "gguf"
    place(hub_files, home, [BASE_0731])
    (home / f"{DRAFTER_0731}.part").write_bytes(hub_files[DRAFTER_0731]["path"].read_bytes()[:1000])
    rc, out = plan(adopt_dirs=[str(home)])
    assert rc == 0
    gguf = tmp_path / "gguf"
    assert [(a["action"], a["src"], a["dest"], a["partial"]) for a in out["adopt"]] == [
        ("move", str(home / BASE_0731), str(gguf / BASE_0731), False),
        ("move", str(home / f"{DRAFTER_0731}.part"), str(gguf / f"{DRAFTER_0731}.part"), True),
    ]
    assert [(f["name"], f["resume_from"]) for f in out["fetch"]] == [(DRAFTER_0731, 1000)]


def test_an_impossible_pair_names_the_variables(plan):
    rc, out = plan(speculation="mtp")
    assert rc == 1
    assert "ds4_speculation 'mtp'" in out["msg"] and "ds4_model_generation '0731'" in out["msg"]


def test_a_link_in_the_installers_directory_is_never_adopted_and_the_run_says_so(plan, hub_files, tmp_path):
    # The case: a file of the catalog's name that is a link to another file (here a root-only one).
    home = tmp_path / "home" / "gguf"
    home.mkdir(parents=True)
    secret = tmp_path / "shadow"
    secret.write_bytes(b"x" * hub_files[BASE_0731]["size"])
    secret.chmod(0o600)
    (home / BASE_0731).symlink_to(secret)
    rc, out = plan(adopt_dirs=[str(home)])
    assert rc == 0 and out["adopt"] == []
    assert names(out["fetch"]) == [BASE_0731, DRAFTER_0731]
    said = f"{home / BASE_0731} is a symbolic link (to {secret}), not adopted"
    assert [line[: len(said)] for line in out["skipped"]] == [said]


def test_a_model_reached_through_a_link_is_in_use_when_its_target_is_open(
    plan, hub_files, tmp_path, monkeypatch
):
    # The service maps the link's target; the plan must see the name in gguf_dir as in use.
    elsewhere = tmp_path / "other-disk"
    place(hub_files, elsewhere, [BASE_LEGACY])
    gguf = tmp_path / "gguf"
    place(hub_files, gguf, [DRAFTER_LEGACY, MTP_LEGACY])
    (gguf / BASE_LEGACY).symlink_to(elsewhere / BASE_LEGACY)
    need = hub_files[BASE_0731]["size"] + hub_files[DRAFTER_0731]["size"]
    fake_free(monkeypatch, need - 1000)
    with open(elsewhere / BASE_LEGACY, "rb"):
        rc, out = plan(policy="remove")
    assert rc == 0 and out["in_use"] == [str(gguf / BASE_LEGACY)]
    assert BASE_LEGACY not in names(out["remove_before"])
    assert {k["name"]: k["reason"] for k in out["keep"]} == {BASE_LEGACY: "in use by the running service"}


def test_removing_a_link_frees_nothing_on_the_weights_filesystem(plan, hub_files, tmp_path, monkeypatch):
    elsewhere = tmp_path / "other-disk"
    place(hub_files, elsewhere, [BASE_LEGACY])
    gguf = tmp_path / "gguf"
    place(hub_files, gguf, [DRAFTER_LEGACY, MTP_LEGACY])
    (gguf / BASE_LEGACY).symlink_to(elsewhere / BASE_LEGACY)
    need = hub_files[BASE_0731]["size"] + hub_files[DRAFTER_0731]["size"]
    small = hub_files[DRAFTER_LEGACY]["size"] + hub_files[MTP_LEGACY]["size"]
    # Short by more than the two real files free: the linked base must not be counted to make up for it.
    fake_free(monkeypatch, need - small - 1000)
    rc, out = plan(policy="remove")
    assert rc == 1 and out["shortfall_bytes"] == 1000, out
    assert "even after removing the other generation" in out["msg"]
