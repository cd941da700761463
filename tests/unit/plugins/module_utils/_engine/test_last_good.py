"""The last-known-good record (module_utils/_engine/last_good.py), what rollbacks return to, and the
ds4_last_good module."""

import json
import os
import stat

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ds4.fleet.plugins.module_utils._engine.last_good import (
    LastGoodError,
    make_record,
    read_record,
    recorded_release,
    restore_files,
    rollback_target,
    write_record,
)
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_plan import (
    ReleaseError,
    plan_release,
    release_state,
)
from ansible_collections.ds4.fleet.plugins.modules import ds4_last_good

SPARK = {"arch": "sm_121", "make_target": "cuda-spark", "make_args": []}
C1 = "1" * 40


def built(root, tag):
    path = root / "releases" / tag
    path.mkdir(parents=True)
    (path / "ds4-server").write_text("#!/bin/sh\n")
    stamp = {"release": tag, "commit": C1, "build_target": SPARK, "cuda_version": "13.0"}
    (path / ".ds4-build.json").write_text(json.dumps(stamp))
    return path


def switch(root, tag):
    """What the activation's switch does to current: a run killed right after it leaves only this."""
    link = root / "current"
    if link.is_symlink():
        link.unlink()
    os.symlink(root / "releases" / tag, link)


@pytest.fixture
def spark(tmp_path):
    """A Spark's layout in a temporary directory: the release root, launch files and the record's path."""
    root = tmp_path / "opt"
    etc = tmp_path / "etc"
    etc.mkdir()
    env = etc / "ds4.env"
    unit = etc / "ds4.service"
    return {
        "root": root,
        "env": env,
        "unit": unit,
        "files": [str(env), str(unit), str(etc / "ds4.fact")],
        "record": str(tmp_path / "lib" / "last-good.json"),
    }


def passed(spark, tag, env_text):
    """The activation of TAG up to its passing smoke test: switched, its launch files written, recorded."""
    if not (spark["root"] / "releases" / tag).exists():
        built(spark["root"], tag)
    switch(spark["root"], tag)
    spark["env"].write_text(env_text)
    spark["env"].chmod(0o640)
    spark["unit"].write_text(f"[Service]\nDescription=ds4 {tag}\n")
    write_record(make_record(spark["root"], tag, spark["files"], model_generation="0731"), spark["record"])


def test_a_first_install_has_nothing_to_roll_back_to(spark):
    built(spark["root"], "v0.6.5")
    switch(spark["root"], "v0.6.5")
    target = rollback_target(read_record(spark["record"]), spark["root"])
    assert target == {
        "release": None,
        "release_dir": None,
        "reason": "no release has passed its smoke test on this Spark yet",
    }


def test_a_run_killed_after_the_switch_leaves_the_last_good_release_as_the_target(spark):
    passed(spark, "v0.6.5", "DS4_CTX=65536\n")
    # The next run switches to v0.6.6 and its launch files, and is killed before the smoke test.
    built(spark["root"], "v0.6.6")
    switch(spark["root"], "v0.6.6")
    spark["env"].write_text("DS4_CTX=131072\n")
    spark["unit"].write_text("[Service]\nDescription=ds4 v0.6.6\n")
    assert os.readlink(spark["root"] / "current").endswith("/releases/v0.6.6")
    # The run after it fails its smoke test: the rollback returns to v0.6.5, never to what current names.
    record = read_record(spark["record"])
    assert rollback_target(record, spark["root"]) == {
        "release": "v0.6.5",
        "release_dir": str(spark["root"] / "releases" / "v0.6.5"),
        "reason": None,
    }
    assert record["model_generation"] == "0731"
    # ... with the launch settings v0.6.5 passed with, owner and mode included.
    assert restore_files(record) == sorted([str(spark["env"]), str(spark["unit"])])
    assert spark["env"].read_text() == "DS4_CTX=65536\n"
    assert stat.S_IMODE(spark["env"].stat().st_mode) == 0o640
    assert spark["unit"].read_text() == "[Service]\nDescription=ds4 v0.6.5\n"
    assert restore_files(record) == [], "a second restore finds everything in place"


def test_only_what_passed_replaces_the_record(spark):
    passed(spark, "v0.6.5", "A\n")
    passed(spark, "v0.6.5.2", "B\n")
    target = rollback_target(read_record(spark["record"]), spark["root"])
    assert target["release"] == "v0.6.5.2"


def test_the_record_is_roots_alone_and_written_whole(spark):
    passed(spark, "v0.6.5", "DS4_EXTRA=secret\n")
    path = spark["record"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert not [name for name in os.listdir(os.path.dirname(path)) if name.endswith(".tmp")]
    record = read_record(path)
    # A launch file that does not exist (the fact) is left out, and left as it is by a rollback.
    assert sorted(record["files"]) == [str(spark["env"]), str(spark["unit"])]
    # The same release and files again: nothing to write.
    assert not write_record(
        make_record(spark["root"], "v0.6.5", spark["files"], model_generation="0731"), path
    )


def test_the_record_is_never_read_or_written_through_a_link(spark, tmp_path):
    passed(spark, "v0.6.5", "A\n")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(read_record(spark["record"])))
    os.unlink(spark["record"])
    os.symlink(elsewhere, spark["record"])
    with pytest.raises(LastGoodError, match="cannot read the last-good record"):
        read_record(spark["record"])
    # Writing replaces the link itself; what it pointed at is untouched.
    before = elsewhere.read_text()
    write_record(make_record(spark["root"], "v0.6.5", spark["files"]), spark["record"])
    assert not os.path.islink(spark["record"]) and elsewhere.read_text() == before


@pytest.mark.parametrize("how", ["link", "group-writable"])
def test_a_record_directory_others_could_change_is_refused(tmp_path, spark, how):
    directory = tmp_path / "lib"
    if how == "link":
        real = tmp_path / "real"
        real.mkdir(mode=0o700)
        os.symlink(real, directory)
    else:
        directory.mkdir()
        directory.chmod(0o770)
    built(spark["root"], "v0.6.5")
    with pytest.raises(LastGoodError, match="must be a directory of the user running the activation alone"):
        write_record(make_record(spark["root"], "v0.6.5", []), str(directory / "last-good.json"))


def test_a_launch_file_replaced_by_a_link_is_put_back_without_following_it(spark, tmp_path):
    passed(spark, "v0.6.5", "A\n")
    victim = tmp_path / "victim"
    victim.write_text("not yours\n")
    spark["env"].unlink()
    os.symlink(victim, spark["env"])
    record = read_record(spark["record"])
    with pytest.raises(LastGoodError, match="cannot read the launch file"):
        make_record(spark["root"], "v0.6.5", spark["files"])
    assert str(spark["env"]) in restore_files(record)
    assert not spark["env"].is_symlink() and spark["env"].read_text() == "A\n"
    assert victim.read_text() == "not yours\n"


def test_a_record_not_ours_is_refused_naming_the_file(spark):
    os.makedirs(os.path.dirname(spark["record"]), mode=0o700)
    for text in (
        "not json",
        json.dumps({"version": 1, "release": "../../etc", "release_dir": "/", "files": {}}),
    ):
        with open(spark["record"], "w") as handle:
            handle.write(text)
        with pytest.raises(LastGoodError, match=f"the last-good record {spark['record']} is not one"):
            read_record(spark["record"])
        # The engine role's plan protects nothing by it, and does not fail on it.
        assert recorded_release(spark["root"], spark["record"]) is None


def test_a_last_good_release_removed_by_hand_or_under_another_root_is_no_target(spark, tmp_path):
    passed(spark, "v0.6.5", "A\n")
    record = read_record(spark["record"])
    other = rollback_target(record, tmp_path / "other-root")
    assert other["release"] is None and "outside ds4_root" in other["reason"]
    os.remove(spark["root"] / "releases" / "v0.6.5" / "ds4-server")
    gone = rollback_target(record, spark["root"])
    assert gone["release"] is None and gone["reason"].endswith(
        "is no longer built in " + record["release_dir"]
    )


def test_the_last_good_release_is_never_pruned_nor_rebuilt(spark):
    for tag in ("v0.5.6", "v0.6.3", "v0.6.5", "v0.6.5.1"):
        built(spark["root"], tag)
    passed(spark, "v0.5.6", "A\n")
    switch(spark["root"], "v0.6.5.1")  # a killed run's switch
    plan = plan_release(spark["root"], "v0.6.6", C1, SPARK, "13.0", 2, "/var/log/ds4", spark["record"])
    assert plan["last_good"] == "v0.5.6"
    assert "v0.5.6" in plan["kept"] and plan["prune"] == ["v0.6.3", "v0.6.5"]
    with pytest.raises(
        ReleaseError, match=r"is the rollback release \(the last that passed its smoke test\)"
    ):
        release_state(spark["root"], "v0.5.6", C1, SPARK, "13.1", spark["record"])


def run_module(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit):
        ds4_last_good.main()
    return json.loads(capsys.readouterr().out)


def test_module_records_reads_and_restores(capsys, spark):
    built(spark["root"], "v0.6.5")
    spark["env"].write_text("A\n")
    common = {"path": spark["record"], "root": str(spark["root"])}
    none = run_module(capsys, **common)
    assert (none["release"], none["reason"]) == (
        None,
        "no release has passed its smoke test on this Spark yet",
    )
    recorded = run_module(capsys, state="recorded", release="v0.6.5", files=spark["files"], **common)
    assert (recorded["changed"], recorded["release"]) == (False, "v0.6.5")
    spark["env"].write_text("B\n")
    read = run_module(capsys, **common)
    assert (read["release"], read["release_dir"]) == ("v0.6.5", str(spark["root"] / "releases" / "v0.6.5"))
    restored = run_module(capsys, state="restored", path=spark["record"])
    assert (restored["changed"], restored["restored"]) == (True, [str(spark["env"])])
    assert spark["env"].read_text() == "A\n"
