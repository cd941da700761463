"""Release layout, stamps and plan (module_utils/_engine/release_plan.py) and the ds4_release_plan module."""

import json
import os
import subprocess

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_plan import (
    ReleaseError,
    as_built,
    check_build_target,
    check_commit,
    check_release,
    check_release_tag,
    choose_target,
    linked_release,
    list_releases,
    ls_remote_argv,
    parse_ls_remote,
    plan_release,
    read_stamp,
    record_tag,
    recorded_commit,
    release_state,
    resolve_commit,
    resolve_release,
    stamp_changes,
    verify_pin,
    verify_unmoved,
)
from ansible_collections.ds4.fleet.plugins.modules import ds4_release_plan

SPARK = {"arch": "sm_121", "make_target": "cuda-spark", "make_args": []}
H200 = {"arch": "sm_90", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_90"]}
C1, C2, C3 = "1" * 40, "2" * 40, "3" * 40
TAG_OBJECT = "c1572cf88b651f20f90c826cb14176e6c36fa250"
PEELED = "0e05c4f2672023b3d6aa0cba32b1aaa8465d10b3"
LOGS = "/var/log/ds4"
GENERIC = {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
SPARK_MAKEFILE = "cuda-spark:\n\t$(MAKE) ds4 CUDA_ARCH=sm_121a\ncuda:\n\t$(MAKE) ds4 CUDA_ARCH=$(CUDA_ARCH)\n"
EMPTY_ARCH_MAKEFILE = "cuda-spark:\n\t$(MAKE) ds4 CUDA_ARCH=\ncuda:\n\t$(MAKE) ds4 CUDA_ARCH=$(CUDA_ARCH)\n"


def make_release(root, tag, commit=C1, target=SPARK, cuda="13.0", **extra):
    path = root / "releases" / tag
    path.mkdir(parents=True)
    stamp = {"release": tag, "commit": commit, "build_target": target, "cuda_version": cuda, **extra}
    (path / ".ds4-build.json").write_text(json.dumps(stamp))
    return path


def link(root, name, tag):
    os.symlink(f"releases/{tag}", root / name)


@pytest.mark.parametrize("tag", ["v0.6.5", "v0.6.5.1", "v0.10.0", "v1.2.3.4.5"])
def test_release_tags(tag):
    assert check_release_tag(tag) == tag


@pytest.mark.parametrize("tag", ["0.6.5", "v0.6", "V0.6.5", "v0.06.5", "v0.6.5-rc1", "main", "", None, 65])
def test_bad_release_tags_name_the_variable(tag):
    with pytest.raises(ReleaseError, match=r"^ds4_release must be .*like v0\.6\.5"):
        check_release_tag(tag)


def test_commit_pins():
    assert check_commit("") is None
    assert check_commit(None) is None
    assert check_commit(PEELED.upper()) == PEELED
    for bad in ("0e05c4f", PEELED + "0", "g" * 40, 12):
        with pytest.raises(ReleaseError, match="^ds4_release_commit must be a full commit id"):
            check_commit(bad)


def test_build_target_must_be_the_filters():
    assert check_build_target(dict(H200)) == H200
    for bad in ({"arch": "sm_90"}, {**SPARK, "make_args": "CUDA_ARCH=sm_90"}, {**SPARK, "arch": ""}, "cuda"):
        with pytest.raises(ReleaseError, match="cuda_build_target"):
            check_build_target(bad)


def test_ls_remote_asks_for_the_peeled_commit_by_name():
    assert ls_remote_argv("git", "git://forge/ds4.git", "v0.6.5")[-2:] == [
        "refs/tags/v0.6.5",
        "refs/tags/v0.6.5^{}",
    ]


def test_annotated_tag_resolves_to_its_commit_not_the_tag_object():
    # What `git ls-remote` printed for the stand-in repository's annotated v0.6.5.
    text = f"{TAG_OBJECT}\trefs/tags/v0.6.5\n{PEELED}\trefs/tags/v0.6.5^{{}}\n"
    assert parse_ls_remote(text, "v0.6.5") == PEELED


def test_lightweight_tag_and_absent_tag():
    assert parse_ls_remote(f"{C1}\trefs/tags/v0.6.5\n", "v0.6.5") == C1
    # A longer tag sharing the prefix is another release.
    assert parse_ls_remote(f"{C1}\trefs/tags/v0.6.5.1\n", "v0.6.5") is None
    assert parse_ls_remote("", "v0.6.5") is None


def test_resolve_names_the_tag_and_the_repository():
    def answer(rc, out, err=""):
        return lambda argv, **_: (rc, out, err)

    assert resolve_release(answer(0, f"{C2}\trefs/tags/v0.6.5\n"), "git", "R", "v0.6.5") == C2
    with pytest.raises(ReleaseError) as missing:
        resolve_release(answer(0, ""), "git", "git://forge/ds4.git", "v9.9.9")
    assert str(missing.value) == (
        "release tag v9.9.9 (ds4_release) does not exist in git://forge/ds4.git (ds4_engine_repo)"
    )
    with pytest.raises(
        ReleaseError, match=r"cannot list the tags of git://x/ds4.git .*exited 128: fatal: no"
    ):
        resolve_release(answer(128, "", "fatal: no\n"), "git", "git://x/ds4.git", "v0.6.5")


def test_a_moved_tag_is_refused_naming_both_commits():
    verify_pin("v0.6.5", "R", C1, None)
    verify_pin("v0.6.5", "R", C1, C1)
    with pytest.raises(ReleaseError) as moved:
        verify_pin("v0.6.5", "git://forge/ds4.git", C1, C2)
    message = str(moved.value)
    assert message.startswith(f"release tag v0.6.5 in git://forge/ds4.git resolves to commit {C1}, not to ")
    assert f"ds4_release_commit {C2}" in message


def test_links(tmp_path):
    make_release(tmp_path, "v0.6.5")
    assert linked_release(tmp_path, "current") == {
        "path": str(tmp_path / "current"),
        "target": None,
        "release": None,
    }
    link(tmp_path, "current", "v0.6.5")
    assert linked_release(tmp_path, "current")["release"] == "v0.6.5"
    os.symlink(str(tmp_path / "releases" / "v0.6.5"), tmp_path / "previous")
    assert linked_release(tmp_path, "previous")["release"] == "v0.6.5"
    # A link to something that is not one of our releases (a shell-installer clone) protects nothing here.
    (tmp_path / "current").unlink()
    os.symlink("/root/code/ds4", tmp_path / "current")
    assert linked_release(tmp_path, "current") == {
        "path": str(tmp_path / "current"),
        "target": "/root/code/ds4",
        "release": None,
    }


def test_listing_keeps_tags_and_reports_the_rest(tmp_path):
    assert list_releases(tmp_path) == ([], [])
    for tag in ("v0.6.5", "v0.5.6", "v0.10.0"):
        make_release(tmp_path, tag)
    (tmp_path / "releases" / ".build-v0.6.6").mkdir()
    (tmp_path / "releases" / "notes.txt").write_text("x")
    (tmp_path / "releases" / "v0.6.9").write_text("a file, not a release")
    assert list_releases(tmp_path) == (["v0.10.0", "v0.5.6", "v0.6.5"], ["notes.txt", "v0.6.9"])


def test_stamps(tmp_path):
    path = make_release(tmp_path, "v0.6.5")
    assert read_stamp(path)[0]["commit"] == C1
    (path / ".ds4-build.json").write_text("{not json")
    assert read_stamp(path)[0] is None and "unreadable" in read_stamp(path)[1]
    (path / ".ds4-build.json").write_text("[]")
    assert read_stamp(path) == (None, f"{path}/.ds4-build.json is not a JSON object")
    (path / ".ds4-build.json").unlink()
    assert read_stamp(path) == (None, f"{path}/.ds4-build.json is missing")


def test_stamp_changes_cover_the_four_keys_only():
    stamp = {
        "release": "v0.6.5",
        "commit": C1,
        "build_target": SPARK,
        "cuda_version": "13.0",
        "built_at": "x",
    }
    wanted = {"release": "v0.6.5", "commit": C1, "build_target": SPARK, "cuda_version": "13.0"}
    assert stamp_changes(stamp, wanted) == []
    assert stamp_changes(dict(stamp, engine_repo="elsewhere"), wanted) == []
    assert stamp_changes(stamp, dict(wanted, cuda_version="13.1", build_target=H200)) == [
        'build_target: {"arch": "sm_121", "make_args": [], "make_target": "cuda-spark"} -> '
        '{"arch": "sm_90", "make_args": ["CUDA_ARCH=sm_90"], "make_target": "cuda"}',
        "cuda_version: 13.0 -> 13.1",
    ]


def test_state_not_built_up_to_date_and_each_change(tmp_path):
    state = release_state(tmp_path, "v0.6.5", C1, SPARK, "13.0")
    assert (state["build"], state["reason"], state["stamp"]) == (True, "not built yet", None)
    make_release(tmp_path, "v0.6.5")
    assert release_state(tmp_path, "v0.6.5", C1, SPARK, "13.0")["reason"] == "up to date"
    assert not release_state(tmp_path, "v0.6.5", C1, SPARK, "13.0")["build"]
    for args in ((C2, SPARK, "13.0"), (C1, H200, "13.0"), (C1, SPARK, "13.1")):
        state = release_state(tmp_path, "v0.6.5", *args)
        assert state["build"] and state["reason"].startswith("stamp differs: ")
    (tmp_path / "releases" / "v0.6.5" / ".ds4-build.json").unlink()
    state = release_state(tmp_path, "v0.6.5", C1, SPARK, "13.0")
    assert state["build"] and state["reason"].startswith("its build stamp cannot be used (")


@pytest.mark.parametrize(("name", "role"), [("current", "running"), ("previous", "rollback")])
def test_running_and_rollback_releases_are_never_rebuilt(tmp_path, name, role):
    make_release(tmp_path, "v0.6.5")
    link(tmp_path, name, "v0.6.5")
    # Up to date: fine.
    assert not release_state(tmp_path, "v0.6.5", C1, SPARK, "13.0")["build"]
    with pytest.raises(ReleaseError) as refused:
        release_state(tmp_path, "v0.6.5", C1, SPARK, "13.1")
    message = str(refused.value)
    assert message.startswith(f"release v0.6.5 is the {role} release ({name}) and must be rebuilt (stamp")
    assert "cuda_version: 13.0 -> 13.1" in message
    assert "never rebuilds, replaces or removes the running or the rollback release" in message


def test_a_link_to_a_missing_release_does_not_stop_building_it(tmp_path):
    (tmp_path / "releases").mkdir()
    link(tmp_path, "current", "v0.6.5")
    state = release_state(tmp_path, "v0.6.5", C1, SPARK, "13.0")
    assert (state["build"], state["current"]["release"]) == (True, "v0.6.5")


def test_plan_prunes_beyond_keep_protecting_current_previous_and_wanted(tmp_path):
    for tag in ("v0.5.6", "v0.6.3", "v0.6.5", "v0.6.5.1"):
        make_release(tmp_path, tag)
    link(tmp_path, "current", "v0.6.3")
    link(tmp_path, "previous", "v0.5.6")
    plan = plan_release(tmp_path, "v0.6.6", C1, SPARK, "13.0", 2, LOGS)
    assert plan["build"] and plan["present"] == ["v0.5.6", "v0.6.3", "v0.6.5", "v0.6.5.1"]
    assert plan["prune"] == ["v0.6.5"]
    assert plan["prune_paths"] == [str(tmp_path / "releases" / "v0.6.5"), f"{LOGS}/build-v0.6.5.log"]
    assert plan["kept"] == ["v0.5.6", "v0.6.3", "v0.6.5.1", "v0.6.6"]
    # Without the links, pinning an old release keeps it rather than building it only to remove it.
    (tmp_path / "current").unlink()
    (tmp_path / "previous").unlink()
    plan = plan_release(tmp_path, "v0.5.0", C1, SPARK, "13.0", 2, LOGS)
    assert (plan["prune"], plan["kept"]) == (["v0.5.6", "v0.6.3"], ["v0.5.0", "v0.6.5", "v0.6.5.1"])


def test_plan_keeps_everything_within_keep(tmp_path):
    make_release(tmp_path, "v0.6.5")
    plan = plan_release(tmp_path, "v0.6.5", C1, SPARK, "13.0", 3, LOGS)
    assert (plan["build"], plan["prune"], plan["kept"]) == (False, [], ["v0.6.5"])


class _Exit(Exception):
    pass


def _fake_git(ls_remote, makefile, calls=None):
    """git as the module runs it: ls-remote's listing, a fetch of the tag at the commit it lists, and the
    Makefile at that commit (None: the commit has none)."""

    def run(self, argv, **_):
        if calls is not None:
            calls.append(argv)
        if "ls-remote" in argv:
            return ls_remote
        if "rev-parse" in argv:
            return 0, parse_ls_remote(ls_remote[1], "v0.6.5") or "", ""
        if "cat-file" in argv and "-s" in argv:
            return (0, f"{len(makefile)}\n", "") if makefile is not None else (128, "", "fatal: no Makefile")
        if "cat-file" in argv:
            return (
                (0, makefile, "")
                if makefile is not None
                else (128, "", "fatal: path 'Makefile' does not exist")
            )
        return 0, "", ""

    return run


def _run_module(monkeypatch, args, ls_remote=(0, "", ""), makefile=SPARK_MAKEFILE, calls=None):
    printed = []
    monkeypatch.setattr("builtins.print", lambda text, **_: printed.append(text))
    monkeypatch.setattr("sys.exit", lambda code=0: (_ for _ in ()).throw(_Exit(code)))
    monkeypatch.setattr(
        "ansible.module_utils.basic.AnsibleModule.run_command", _fake_git(ls_remote, makefile, calls)
    )
    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule.get_bin_path", lambda self, *a, **k: "git")
    with patch_module_args(args), pytest.raises(_Exit):
        ds4_release_plan.main()
    return json.loads(printed[-1])


def _args(root, **extra):
    return {
        "root": str(root),
        "release": "v0.6.5",
        "repo": "git://forge/ds4.git",
        "build_target": GENERIC,
        "cuda_version": "13.0",
        "log_dir": LOGS,
        "tags_record": str(root / "engine-tags.json"),
        **extra,
    }


def test_module_plans(monkeypatch, tmp_path):
    listing = (0, f"{TAG_OBJECT}\trefs/tags/v0.6.5\n{PEELED}\trefs/tags/v0.6.5^{{}}\n", "")
    result = _run_module(monkeypatch, _args(tmp_path, commit=PEELED), listing)
    assert "failed" not in result, result
    assert (result["changed"], result["commit"], result["build"]) == (False, PEELED, True)
    assert result["path"] == str(tmp_path / "releases" / "v0.6.5")


def test_module_refuses_a_moved_tag_an_unknown_tag_and_a_small_keep(monkeypatch, tmp_path):
    listing = (0, f"{C1}\trefs/tags/v0.6.5\n", "")
    result = _run_module(monkeypatch, _args(tmp_path, commit=C2), listing)
    assert result["failed"] and "ds4_release_commit" in result["msg"] and C1 in result["msg"]
    result = _run_module(monkeypatch, _args(tmp_path), (0, "", ""))
    assert result["msg"].startswith("release tag v0.6.5 (ds4_release) does not exist in git://forge/ds4.git")
    result = _run_module(monkeypatch, _args(tmp_path, keep=1), listing)
    assert result["msg"].startswith("ds4_releases_keep must be 2 or more")


def test_a_tag_that_moved_since_this_host_built_it_is_refused_naming_both_commits(tmp_path):
    record = tmp_path / "engine-tags.json"
    record.write_text(json.dumps({"v0.6.5": {"commit": C1, "recorded_at": "2026-09-01T12:00:00Z"}}))
    recorded, where = recorded_commit(tmp_path, "v0.6.5", str(record))
    assert (recorded, where) == (C1, f"{record}, 2026-09-01T12:00:00Z")
    verify_unmoved("v0.6.5", "git://forge/ds4.git", C1, recorded, where, None, False)
    with pytest.raises(ReleaseError) as moved:
        verify_unmoved("v0.6.5", "git://forge/ds4.git", C2, recorded, where, None, False)
    assert str(moved.value).startswith(
        f"release tag v0.6.5 in git://forge/ds4.git now resolves to commit {C2}, but it resolved to commit "
        f"{C1} when this host built it ({record}, 2026-09-01T12:00:00Z): refusing to build it"
    )
    assert "ds4_release_accept_moved_tag: true" in str(moved.value)
    # The operator accepts it, or pins the new commit.
    verify_unmoved("v0.6.5", "git://forge/ds4.git", C2, recorded, where, None, True)
    verify_unmoved("v0.6.5", "git://forge/ds4.git", C2, recorded, where, C2, False)


def test_without_a_record_the_release_stamp_says_what_the_tag_resolved_to(tmp_path):
    assert recorded_commit(tmp_path, "v0.6.5", str(tmp_path / "none.json")) == (None, None)
    make_release(tmp_path, "v0.6.5", commit=C3)
    recorded, where = recorded_commit(tmp_path, "v0.6.5", str(tmp_path / "none.json"))
    assert (recorded, where) == (C3, f"the build stamp of {tmp_path / 'releases' / 'v0.6.5'}")


def test_the_record_is_replaced_whole_and_never_written_through_a_link(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("untouched\n")
    record = tmp_path / "state" / "engine-tags.json"
    record.parent.mkdir()
    (record.parent / "engine-tags.json.tmp").symlink_to(target)
    record_tag(str(record), "v0.6.5", C1)
    record_tag(str(record), "v0.6.3", C2)
    assert {tag: entry["commit"] for tag, entry in json.loads(record.read_text()).items()} == {
        "v0.6.5": C1,
        "v0.6.3": C2,
    }
    assert target.read_text() == "untouched\n" and not record.is_symlink()


def test_module_refuses_a_moved_tag_unless_accepted_and_says_so(monkeypatch, tmp_path):
    (tmp_path / "engine-tags.json").write_text(json.dumps({"v0.6.5": {"commit": C1}}))
    listing = (0, f"{C2}\trefs/tags/v0.6.5\n", "")
    result = _run_module(monkeypatch, _args(tmp_path), listing)
    assert result["failed"], result
    assert f"now resolves to commit {C2}, but it resolved to commit {C1}" in result["msg"]
    result = _run_module(monkeypatch, _args(tmp_path, accept_moved_tag=True), listing)
    assert "failed" not in result, result
    assert (result["commit"], result["recorded_commit"], result["moved"]) == (C2, C1, True)
    result = _run_module(monkeypatch, _args(tmp_path), (0, f"{C1}\trefs/tags/v0.6.5\n", ""))
    assert (result["commit"], result["recorded_commit"], result["moved"]) == (C1, C1, False)


LISTED = (0, f"{TAG_OBJECT}\trefs/tags/v0.6.5\n{PEELED}\trefs/tags/v0.6.5^{{}}\n", "")


def test_module_reads_the_makefile_at_the_commit_and_chooses_the_spark_target(monkeypatch, tmp_path):
    calls = []
    result = _run_module(monkeypatch, _args(tmp_path), LISTED, calls=calls)
    assert (result["build_target"], result["without_spark_target"]) == (SPARK, False)
    assert (
        result["make_target_reason"]
        == "the Spark target: its Makefile's cuda-spark builds for sm_121a, the GB10's"
    )
    assert result["wanted"]["build_target"] == SPARK
    # Read from git, never run: a shallow fetch of the tag into a scratch repository, removed after.
    fetch = next(argv for argv in calls if "fetch" in argv)
    assert fetch[-5:] == ["--depth", "1", "--no-tags", "git://forge/ds4.git", "refs/tags/v0.6.5"]
    assert calls[-1][-2:] == ["blob", f"{PEELED}:Makefile"]
    assert not os.path.exists(fetch[2])


def test_module_falls_back_for_an_empty_arch_and_says_why(monkeypatch, tmp_path):
    result = _run_module(monkeypatch, _args(tmp_path), LISTED, makefile=EMPTY_ARCH_MAKEFILE)
    assert (result["build_target"], result["without_spark_target"]) == (GENERIC, True)
    assert "cuda-spark passes an empty CUDA_ARCH" in result["make_target_reason"]
    result = _run_module(monkeypatch, _args(tmp_path), LISTED, makefile=None)
    assert "the release has no Makefile at its top" in result["make_target_reason"]


def test_module_refuses_a_named_target_the_makefile_lacks_before_anything(monkeypatch, tmp_path):
    result = _run_module(
        monkeypatch, _args(tmp_path, make_targets={"sm_121": "cuda-generic"}), LISTED, makefile=SPARK_MAKEFILE
    )
    assert result["failed"] and result["msg"] == (
        f"release v0.6.5 (commit {PEELED}): ds4_engine_make_targets names cuda-generic for sm_121, but the "
        "release's Makefile has no cuda-generic target: name another, or remove the entry to let the "
        "Makefile decide"
    )
    chosen = _run_module(monkeypatch, _args(tmp_path, make_targets={"sm_121": "cuda"}), LISTED)
    assert chosen["build_target"] == GENERIC and chosen["without_spark_target"]
    assert chosen["make_target_reason"] == "ds4_engine_make_targets names cuda for sm_121"


def test_module_reads_no_makefile_for_another_arch(monkeypatch, tmp_path):
    calls = []
    result = _run_module(monkeypatch, _args(tmp_path, build_target=H200), LISTED, calls=calls)
    assert result["build_target"] == H200 and [argv for argv in calls if "ls-remote" not in argv] == []


def test_a_built_release_s_own_clone_answers_without_a_fetch(monkeypatch, tmp_path):
    (make_release(tmp_path, "v0.6.5", PEELED, GENERIC) / ".git").mkdir()
    calls = []
    result = _run_module(monkeypatch, _args(tmp_path), LISTED, calls=calls)
    assert not any("fetch" in argv for argv in calls)
    assert calls[-1][1:3] == ["--git-dir", str(tmp_path / "releases" / "v0.6.5" / ".git")]
    # Its stamp names make cuda: the target changed, so it is rebuilt (it is neither running nor rollback).
    assert result["build"] and result["reason"].startswith("stamp differs: build_target: ")


def test_a_changed_target_rebuilds_but_keeps_the_running_release_as_built(tmp_path):
    make_release(tmp_path, "v0.6.5", C1, GENERIC, make_target_reason="older")
    state = release_state(tmp_path, "v0.6.5", C1, SPARK, "13.0", tmp_path / "none.json")
    assert state["build"] and not state["kept_as_built"]
    link(tmp_path, "current", "v0.6.5")
    state = release_state(tmp_path, "v0.6.5", C1, SPARK, "13.0", tmp_path / "none.json")
    assert (state["build"], state["kept_as_built"]) == (False, True)
    assert state["reason"] == (
        "kept as built (make cuda CUDA_ARCH=sm_121), not rebuilt with make cuda-spark: it is the running "
        "release (current), never rebuilt in place"
    )
    kept = as_built({"build_target": SPARK, "reason": "x", "without_spark_target": False}, state)
    assert kept == {
        "build_target": GENERIC,
        "reason": state["reason"] + " (older)",
        "without_spark_target": True,
    }
    # Another arch is a change the running release cannot take: refused, as before.
    with pytest.raises(ReleaseError, match="never rebuilds"):
        release_state(tmp_path, "v0.6.5", C1, H200, "13.0", tmp_path / "none.json")


def _git(repo, *args):
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture(scope="module")
def tagless(tmp_path_factory):
    """A source without tags: main with three commits, and a side branch off the first."""
    repo = tmp_path_factory.mktemp("upstream") / "ds4"
    repo.mkdir()
    _git(repo, "init", "--quiet", "--initial-branch=main")
    commits = []
    for n in range(3):
        (repo / "Makefile").write_text(SPARK_MAKEFILE + f"# {n}\n")
        # From the second commit on, the server takes upstream's --mtp-model: its source says upstream.
        (repo / "server.c").write_text('"--mtp-model", /* support GGUF */\n' if n else "int main;\n")
        _git(repo, "add", "Makefile", "server.c")
        _git(repo, "commit", "--quiet", "-m", f"commit {n}")
        commits.append(_git(repo, "rev-parse", "HEAD"))
    _git(repo, "checkout", "--quiet", "-b", "side", commits[0])
    _git(repo, "commit", "--quiet", "--allow-empty", "-m", "side")
    side = _git(repo, "rev-parse", "HEAD")
    return {"url": f"file://{repo}", "main": commits, "side": side}


def _real_run(argv, environ_update=None):
    done = subprocess.run(argv, env={**os.environ, **(environ_update or {})}, capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def test_commit_release_names_must_carry_their_commit():
    commit = "67bd55c0a1b2" + "0" * 28
    assert check_release("g67bd55c0a1b2", commit) == "g67bd55c0a1b2"
    assert check_release("dwarfstar-g67bd55c0a1b2", commit.upper()) == "dwarfstar-g67bd55c0a1b2"
    with pytest.raises(
        ReleaseError,
        match=r"^ds4_release g67bd55c0a1b2 names a release pinned by commit, "
        r"but ds4_release_commit is empty: set it .* begins 67bd55c0a1b2$",
    ):
        check_release("g67bd55c0a1b2", "")
    with pytest.raises(
        ReleaseError,
        match=r"^ds4_release dwarfstar-g67bd55c0a1b2 does not name "
        rf"ds4_release_commit {C1}: .*\(dwarfstar-g111111111111\)$",
    ):
        check_release("dwarfstar-g67bd55c0a1b2", C1)
    with pytest.raises(
        ReleaseError, match=r"^ds4_release must be .* \(dwarfstar-g67bd55c0a1b2\); got 'main'"
    ):
        check_release("main", C1)


def test_a_commit_in_the_repository_and_on_the_followed_branch_is_placed_on_it(tagless):
    first, _second, head = tagless["main"]
    assert resolve_commit(_real_run, "git", tagless["url"], head) == {
        "commit": head,
        "branch_head": None,
        "branch_ahead": None,
        "marks": ["--mtp-model"],
    }
    assert resolve_commit(_real_run, "git", tagless["url"], first)["marks"] == []
    assert resolve_commit(_real_run, "git", tagless["url"], head, "main")["branch_ahead"] == 0
    placed = resolve_commit(_real_run, "git", tagless["url"], first, "main")
    assert (placed["branch_head"], placed["branch_ahead"]) == (head, 2)


def test_a_commit_the_repository_lacks_or_off_the_branch_is_refused(tagless):
    with pytest.raises(
        ReleaseError,
        match=rf"^commit {C1} \(ds4_release_commit\) is not in file://\S+ "
        r"\(ds4_engine_repo\), or that repository cannot be reached: git fetch exited 128",
    ):
        resolve_commit(_real_run, "git", tagless["url"], C1)
    with pytest.raises(
        ReleaseError,
        match=rf"^commit {tagless['side']} \(ds4_release_commit\) is not on "
        r"branch main \(ds4_engine_branch\)",
    ):
        resolve_commit(_real_run, "git", tagless["url"], tagless["side"], "main")
    with pytest.raises(ReleaseError, match=r"^branch next \(ds4_engine_branch\) does not exist in file://"):
        resolve_commit(_real_run, "git", tagless["url"], tagless["main"][0], "next")


def test_module_plans_a_release_pinned_by_commit_without_a_tag(monkeypatch, tmp_path, tagless):
    first, _second, head = tagless["main"]
    printed = []
    monkeypatch.setattr("builtins.print", lambda text, **_: printed.append(text))
    monkeypatch.setattr("sys.exit", lambda code=0: (_ for _ in ()).throw(_Exit(code)))
    name = f"dwarfstar-g{first[:12]}"
    args = _args(tmp_path, release=name, commit=first, branch="main", repo=tagless["url"], build_target=SPARK)
    with patch_module_args(args), pytest.raises(_Exit):
        ds4_release_plan.main()
    result = json.loads(printed[-1])
    assert "failed" not in result, result
    assert (result["release"], result["commit"], result["pinned_by_commit"]) == (name, first, True)
    assert (result["branch_head"], result["branch_ahead"], result["build"]) == (head, 2, True)
    assert result["build_target"]["make_target"] == "cuda-spark"
    assert result["path"] == str(tmp_path / "releases" / name)
    with patch_module_args(dict(args, commit=C1, release="g111111111111")), pytest.raises(_Exit):
        ds4_release_plan.main()
    result = json.loads(printed[-1])
    assert result["failed"] and result["msg"].startswith(f"commit {C1} (ds4_release_commit) is not in ")
    assert not (tmp_path / "releases").exists()


def test_module_refuses_a_commit_whose_source_is_of_the_other_lineage(monkeypatch, tmp_path, tagless):
    head = tagless["main"][2]
    printed = []
    monkeypatch.setattr("builtins.print", lambda text, **_: printed.append(text))
    monkeypatch.setattr("sys.exit", lambda code=0: (_ for _ in ()).throw(_Exit(code)))
    args = _args(tmp_path, release=f"g{head[:12]}", commit=head, repo=tagless["url"], build_target=H200)
    with patch_module_args(dict(args, lineage="fork")), pytest.raises(_Exit):
        ds4_release_plan.main()
    result = json.loads(printed[-1])
    assert result["failed"] and result["msg"] == (
        f"ds4_engine_lineage makes release g{head[:12]} (commit {head}) fork's, but its source at that "
        "commit is upstream's: it takes --mtp-model and serves no /v1/stats, as only upstream does. Set "
        "ds4_engine_lineage: upstream, or pin a release of the fork (ds4_release, ds4_release_commit, "
        "ds4_engine_repo)"
    )
    with patch_module_args(dict(args, lineage="upstream")), pytest.raises(_Exit):
        ds4_release_plan.main()
    result = json.loads(printed[-1])
    assert "failed" not in result and result["lineage"] == "upstream", result


def test_a_makefile_larger_than_its_reader_takes_is_never_read(tmp_path):
    """Issue 55, point 2: git's cat-file read upstream's whole Makefile into root's memory, whatever its
    size; its size is asked first, and a file over 1 MiB is the fallback, unread."""
    calls = []

    def run(argv, environ_update=None):
        calls.append(argv)
        if "rev-parse" in argv:
            return 0, C1 + "\n", ""
        if "-s" in argv:
            return 0, f"{5 << 30}\n", ""
        if "blob" in argv:
            raise AssertionError("the Makefile was read")
        return 0, "", ""

    gb10 = {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
    chosen = choose_target(run, "git", "git://forge/ds4.git", "v0.6.5", C1, gb10, {})
    assert chosen["without_spark_target"] and chosen["build_target"]["make_target"] == "cuda"
    assert (
        f"cannot be read within bounds: it is {5 << 30} bytes long, over 1048576: not read"
        in chosen["reason"]
    )
    assert [argv for argv in calls if "cat-file" in argv] == [
        ["git", "--git-dir", argv[2], "cat-file", "-s", f"{C1}:Makefile"]
        for argv in calls
        if "cat-file" in argv
    ]


def test_a_built_release_is_held_to_the_lineage_its_stamp_records(monkeypatch, tmp_path):
    """A tag's source is not fetched to be read (a tag is the fork's; upstream has none), but a release
    already built says what it is: declaring the other lineage for it is refused before anything changes,
    where the launch would otherwise write that lineage's flags for a server that refuses them."""
    listing = (0, f"{TAG_OBJECT}\trefs/tags/v0.6.5\n{PEELED}\trefs/tags/v0.6.5^{{}}\n", "")
    make_release(tmp_path, "v0.6.5", commit=PEELED, target=H200, lineage="fork")
    args = _args(tmp_path, commit=PEELED, build_target=H200)
    result = _run_module(monkeypatch, dict(args, lineage="upstream"), listing)
    assert result.get("failed") and result["msg"] == (
        f"ds4_engine_lineage makes release v0.6.5 (commit {PEELED}) upstream's, but the release as built "
        "(its build stamp) is fork's: it serves /v1/stats, which only the fork does. Set ds4_engine_lineage: "
        "fork, or pin a release of the upstream (ds4_release, ds4_release_commit, ds4_engine_repo)"
    ), result
    result = _run_module(monkeypatch, dict(args, lineage="fork"), listing)
    assert "failed" not in result and result["build"] is False, result
