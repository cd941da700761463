"""Building a release beside the others (_engine/release_build.py and the ds4_release_build module),
with real git and make against the stand-in engine repository and the stand-in nvcc."""

import contextlib
import datetime
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._engine import (
    release_build as ds4_release_build_utils,
)
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_build import (
    BuildError,
    build_env,
    build_release,
    make_argv,
)
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_plan import ReleaseError, public_url
from ansible_collections.ds4.fleet.plugins.modules import ds4_release_build
from module_runner import run_module

REPO = Path(__file__).resolve().parents[5]
STANDINS = REPO / "tests" / "standins"
SPARK = {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
SPARK_TARGET = {"arch": "sm_121", "make_target": "cuda-spark", "make_args": []}
H200 = {"arch": "sm_90", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_90"]}
NOW = datetime.datetime(2026, 9, 1, 12, 0, 0)


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    """The build lock's directory of root's alone, for this test only (never the host's /run)."""
    directory = tmp_path / "run-ds4-fleet"
    monkeypatch.setattr(ds4_release_build_utils, "LOCK_DIR", str(directory))
    return directory


@pytest.fixture(scope="module")
def forge(tmp_path_factory):
    """The stand-in engine repository (file:// so that --depth applies) and a GB10 persona's nvcc."""
    base = tmp_path_factory.mktemp("forge")
    subprocess.run(
        [sys.executable, str(STANDINS / "engine" / "make_repo.py"), "--out", str(base / "git")],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [
            sys.executable,
            str(STANDINS / "gpu" / "install.py"),
            "--root",
            str(base / "gpu"),
            "--persona",
            "gb10",
        ],
        check=True,
    )
    tags = json.loads((base / "git" / "ds4-tags.json").read_text())
    return {
        "repo": f"file://{base / 'git' / 'ds4.git'}",
        "tags": tags,
        "nvcc": str(base / "gpu" / "usr" / "local" / "cuda" / "bin" / "nvcc"),
    }


def build(forge, root, tag, target=SPARK, cuda="13.0", commit=None):
    return build_release(
        root=str(root),
        release=tag,
        commit=commit or forge["tags"][tag],
        repo=forge["repo"],
        build_target=target,
        cuda_version=cuda,
        nvcc=forge["nvcc"],
        jobs=2,
        log_dir=str(root / "logs"),
        git="git",
        make="make",
        env=os.environ,
        now=NOW,
    )


def stamp_of(root, tag):
    return json.loads((root / "releases" / tag / ".ds4-build.json").read_text())


def hidden(root):
    return sorted(name for name in os.listdir(root / "releases") if name.startswith("."))


def test_make_command_and_environment():
    assert make_argv("make", SPARK, 20, "/usr/local/cuda/bin/nvcc") == [
        "make",
        "cuda",
        "CUDA_ARCH=sm_121",
        "-j20",
        "NVCC=/usr/local/cuda/bin/nvcc",
    ]
    assert make_argv("make", H200, 4, "/c/bin/nvcc")[1:3] == ["cuda", "CUDA_ARCH=sm_90"]
    env = build_env("/usr/local/cuda/bin/nvcc", {"PATH": "/usr/bin", "HOME": "/root"})
    assert env["PATH"] == "/usr/local/cuda/bin:/usr/bin"
    assert (env["LC_ALL"], env["GIT_TERMINAL_PROMPT"], env["HOME"]) == ("C", "0", "/root")


def test_two_releases_side_by_side_then_nothing_to_do(forge, tmp_path):
    first = build(forge, tmp_path, "v0.5.6")
    assert first["built"] and first["state"]["reason"] == "not built yet"
    old = stamp_of(tmp_path, "v0.5.6")
    assert old == {
        "release": "v0.5.6",
        "commit": forge["tags"]["v0.5.6"],
        "build_target": SPARK,
        "cuda_version": "13.0",
        "built_at": "2026-09-01T12:00:00Z",
        # v0.5.6 has no --version: recorded as absent, not a failure.
        "version_output": None,
        "engine_repo": forge["repo"],
        "make_command": f"make cuda CUDA_ARCH=sm_121 -j2 NVCC={forge['nvcc']}",
        "make_target": "cuda",
        "make_target_reason": "",
        # What the stand-in cuobjdump found in each program.
        "sass_archs": {"ds4": ["sm_121"], "ds4-server": ["sm_121"], "ds4-bench": ["sm_121"]},
    }
    second = build(forge, tmp_path, "v0.6.5")
    assert second["stamp"]["version_output"] == "ds4-server v0.6.5 (cuda sm_121, CUDA 13.0)"
    assert stamp_of(tmp_path, "v0.5.6") == old
    for tag in ("v0.5.6", "v0.6.5"):
        for program in ("ds4", "ds4-server", "ds4-bench"):
            path = tmp_path / "releases" / tag / program
            assert subprocess.run([str(path), "--help"], capture_output=True).returncode == 0
    assert oct((tmp_path / "releases" / "v0.6.5").stat().st_mode & 0o777) == "0o755"
    assert hidden(tmp_path) == []
    log = tmp_path / "logs" / "build-v0.6.5.log"
    assert f"== $ make cuda CUDA_ARCH=sm_121 -j2 NVCC={forge['nvcc']}" in log.read_text()
    written = log.stat().st_mtime_ns
    again = build(forge, tmp_path, "v0.6.5")
    assert (again["built"], again["state"]["reason"]) == (False, "up to date")
    assert log.stat().st_mtime_ns == written


def test_a_password_in_the_repository_url_is_never_logged_and_the_log_is_private(forge, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    # A link planted at the log's name: the build replaces it rather than writing through it.
    target = tmp_path / "elsewhere"
    target.write_text("untouched\n")
    (logs / "build-v0.6.5.log").symlink_to(target)
    repo = "http://builder:s3cret-token@127.0.0.1:9/Entrpi/ds4.git"
    with pytest.raises(BuildError) as info:
        build_release(
            root=str(tmp_path),
            release="v0.6.5",
            commit=forge["tags"]["v0.6.5"],
            repo=repo,
            build_target=SPARK,
            cuda_version="13.0",
            nvcc=forge["nvcc"],
            jobs=1,
            log_dir=str(logs),
            git="git",
            make="make",
            env=os.environ,
            progress_file=str(tmp_path / "progress.json"),
        )
    log = logs / "build-v0.6.5.log"
    assert "cloning tag v0.6.5 of http://***@127.0.0.1:9/Entrpi/ds4.git failed" in str(info.value)
    for text in (str(info.value), log.read_text(), (tmp_path / "progress.json").read_text()):
        assert "s3cret-token" not in text
    # Git was given the URL without its user information: no output of it can hold the password.
    assert "from http://127.0.0.1:9/Entrpi/ds4.git, not built yet" in log.read_text()
    assert not log.is_symlink() and oct(log.stat().st_mode & 0o777) == "0o640"
    assert target.read_text() == "untouched\n"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:tok@github.com/Entrpi/ds4.git", "https://***@github.com/Entrpi/ds4.git"),
        # A token given as the user, as GitHub's own URLs take it.
        ("https://ghp_tok@github.com/Entrpi/ds4.git", "https://***@github.com/Entrpi/ds4.git"),
        ("https://github.com/Entrpi/ds4.git", "https://github.com/Entrpi/ds4.git"),
        ("git@github.com:Entrpi/ds4.git", "git@github.com:Entrpi/ds4.git"),
        ("/srv/git/ds4.git", "/srv/git/ds4.git"),
    ],
)
def test_public_url_masks_the_userinfo(url, shown):
    assert public_url(url) == shown


def test_a_failed_build_changes_nothing_and_reports_the_log(forge, tmp_path):
    build(forge, tmp_path, "v0.6.5")
    os.symlink("releases/v0.6.5", tmp_path / "current")
    before = stamp_of(tmp_path, "v0.6.5")
    with pytest.raises(BuildError) as failed:
        build(forge, tmp_path, "v0.6.7")
    error = failed.value
    log = str(tmp_path / "logs" / "build-v0.6.7.log")
    assert error.log_path == log
    assert any("error: this release does not build" in line for line in error.log_tail)
    message = str(error)
    assert message.startswith(
        f"building release v0.6.7 failed: `make cuda CUDA_ARCH=sm_121 -j2 NVCC={forge['nvcc']}` exited"
    )
    assert f"Last {len(error.log_tail)} lines of the build log {log}:\n" in message
    assert not (tmp_path / "releases" / "v0.6.7").exists() and hidden(tmp_path) == []
    assert stamp_of(tmp_path, "v0.6.5") == before
    assert os.readlink(tmp_path / "current") == "releases/v0.6.5"


def test_a_release_whose_spark_target_drops_the_arch_builds_native_code_all_the_same(forge, tmp_path):
    # v0.6.8's `make cuda-spark` builds for nvcc's default arch, as the real source does: the plan falls
    # back to `make cuda CUDA_ARCH=sm_121`, which does not depend on it.
    built = build(forge, tmp_path, "v0.6.8")
    assert built["stamp"]["sass_archs"]["ds4-server"] == ["sm_121"]
    assert "cuda-spark" not in built["stamp"]["make_command"]


def test_the_spark_target_is_built_and_stamped_with_its_reason(forge, tmp_path):
    built = build_release(
        root=str(tmp_path), release="v0.6.5", commit=forge["tags"]["v0.6.5"], repo=forge["repo"],
        build_target=SPARK_TARGET, cuda_version="13.0", nvcc=forge["nvcc"], jobs=2,
        log_dir=str(tmp_path / "logs"), git="git", make="make", env=os.environ, make_target_reason="why",
    )  # fmt: skip
    stamp = stamp_of(tmp_path, "v0.6.5")
    assert stamp["make_command"].startswith("make cuda-spark -j2 ")
    assert (stamp["make_target"], stamp["make_target_reason"]) == ("cuda-spark", "why")
    assert stamp["build_target"] == SPARK_TARGET and built["built"]
    assert "== make cuda-spark: why\n" in (tmp_path / "logs" / "build-v0.6.5.log").read_text()
    # Its stand-in programs carry native GB10 code (sm_121a counts as well: _engine.cubin.is_native_for).
    assert stamp["sass_archs"]["ds4-server"][0].startswith("sm_121")
    # v0.6.8's cuda-spark passes an empty arch: built as named, refused by the native-code check.
    with pytest.raises(BuildError, match=r"holds no native code \(SASS\) for sm_121: .* sm_75 only"):
        build(forge, tmp_path, "v0.6.8", target=SPARK_TARGET)


def test_a_build_without_native_code_for_the_arch_is_refused_before_it_can_be_used(forge, tmp_path):
    build(forge, tmp_path, "v0.6.5")
    os.symlink("releases/v0.6.5", tmp_path / "current")
    with pytest.raises(BuildError) as failed:
        # v0.6.9's Makefile drops the arch it is given: nvcc builds for its default, sm_75.
        build(forge, tmp_path, "v0.6.9")
    message = str(failed.value)
    assert message.startswith(
        "building release v0.6.9 failed: the built ds4 holds no native code (SASS) for sm_121: "
        "`cuobjdump --list-elf` lists cubins for sm_75 only."
    ), message
    log = (tmp_path / "logs" / "build-v0.6.9.log").read_text()
    # The log shows what was asked and what was found; the error carries its tail.
    assert "ELF file    1: ds4_cuda.sm_75.cubin" in log
    assert any("ELF file    1: ds4_cuda.sm_75.cubin" in line for line in failed.value.log_tail)
    assert not (tmp_path / "releases" / "v0.6.9").exists() and hidden(tmp_path) == []
    assert os.readlink(tmp_path / "current") == "releases/v0.6.5"


def test_a_toolkit_without_cuobjdump_is_refused(forge, tmp_path):
    subprocess.run(
        [sys.executable, str(STANDINS / "gpu" / "install.py"), "--root", str(tmp_path / "gpu")], check=True
    )
    toolkit = tmp_path / "gpu" / "usr" / "local" / "cuda" / "bin"
    (toolkit / "cuobjdump").unlink()
    with pytest.raises(BuildError, match=r"cannot check which GPU code ds4 holds: .*cuobjdump .*is missing"):
        build_release(
            root=str(tmp_path / "root"), release="v0.6.5", commit=forge["tags"]["v0.6.5"], repo=forge["repo"],
            build_target=SPARK, cuda_version="13.0", nvcc=str(toolkit / "nvcc"), jobs=2,
            log_dir=str(tmp_path / "logs"), git="git", make="make", env=os.environ,
        )  # fmt: skip
    assert not (tmp_path / "root" / "releases" / "v0.6.5").exists()


def test_the_progress_file_says_what_runs(forge, tmp_path, monkeypatch):
    progress = tmp_path / "progress.json"
    records = []
    write = ds4_release_build_utils._Progress.write

    def spy(self, step=None):
        write(self, step)
        records.append(json.loads(progress.read_text()))

    monkeypatch.setattr(ds4_release_build_utils._Progress, "write", spy)
    build_release(
        root=str(tmp_path), release="v0.6.5", commit=forge["tags"]["v0.6.5"], repo=forge["repo"],
        build_target=SPARK, cuda_version="13.0", nvcc=forge["nvcc"], jobs=2, log_dir=str(tmp_path / "logs"),
        git="git", make="make", env=os.environ, progress_file=str(progress),
    )  # fmt: skip
    messages = [record["message"] for record in records]
    assert all(record["state"] == "building" for record in records)
    assert any(message.startswith("building v0.6.5, 0 s in: `git -c") for message in messages), messages
    make = next(message for message in messages if "`make cuda CUDA_ARCH=sm_121" in message)
    assert "; last log line: == $ make cuda CUDA_ARCH=sm_121" in make
    assert any("--list-elf" in message for message in messages)


def test_a_long_step_rewrites_the_progress_file_while_it_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(ds4_release_build_utils, "PROGRESS_EVERY", 0.2)
    progress = tmp_path / "progress.json"
    log_path = tmp_path / "build.log"
    ticks = []
    done = tmp_path / "done"

    def write(step=None):
        ticks.append(step)
        original(step)
        if ticks[1:].count(None) >= 3:
            done.touch()  # the step ends once the file was rewritten three times while it ran

    # A step that runs until the test says so (at most 60 s, then it fails): no pace to guess.
    step = f"echo compiling; for i in $(seq 1200); do [ -e {done} ] && exit 0; sleep 0.05; done; exit 1"
    with open(log_path, "w") as handle:
        tracker = ds4_release_build_utils._Progress(str(progress), "v0.6.5", str(log_path))
        original = tracker.write
        tracker.write = write
        log = ds4_release_build_utils._Log(handle, dict(os.environ), tracker)
        assert log.run(["sh", "-c", step], cwd=str(tmp_path)) == 0
    # The first write names the step; the others, while it runs, keep it.
    assert ticks[0] == f"`sh -c {step}`" and ticks[1:].count(None) >= 3
    assert json.loads(progress.read_text())["message"].endswith("last log line: compiling")


def test_a_tag_that_moves_after_resolving_is_refused(forge, tmp_path):
    with pytest.raises(
        BuildError, match=r"the clone of tag v0\.6\.5 is at commit \w{40}, not at 1{40}.*moved"
    ):
        build(forge, tmp_path, "v0.6.5", commit="1" * 40)
    assert not (tmp_path / "releases" / "v0.6.5").exists() and hidden(tmp_path) == []


def test_a_changed_stamp_rebuilds_a_release_that_is_not_in_use(forge, tmp_path):
    build(forge, tmp_path, "v0.6.5", cuda="12.9")
    rebuilt = build(forge, tmp_path, "v0.6.5", target=H200)
    assert rebuilt["built"]
    assert rebuilt["state"]["changes"][0].startswith("build_target: ")
    assert "cuda_version: 12.9 -> 13.0" in rebuilt["state"]["changes"]
    assert stamp_of(tmp_path, "v0.6.5")["build_target"] == H200
    assert rebuilt["stamp"]["version_output"] == "ds4-server v0.6.5 (cuda sm_90, CUDA 13.0)"
    assert hidden(tmp_path) == []


@pytest.mark.parametrize("link", ["current", "previous"])
def test_the_running_and_rollback_releases_are_never_rebuilt(forge, tmp_path, link):
    build(forge, tmp_path, "v0.6.5")
    os.symlink("releases/v0.6.5", tmp_path / link)
    log = tmp_path / "logs" / "build-v0.6.5.log"
    written = log.stat().st_mtime_ns
    with pytest.raises(ReleaseError, match="never rebuilds, replaces or removes"):
        build(forge, tmp_path, "v0.6.5", cuda="13.1")
    assert stamp_of(tmp_path, "v0.6.5")["cuda_version"] == "13.0"
    assert log.stat().st_mtime_ns == written


def test_leftovers_of_an_interrupted_build_are_cleared(forge, tmp_path):
    for name in (".build-v0.6.3", ".old-v0.6.5"):
        (tmp_path / "releases" / name / "x").mkdir(parents=True)
    build(forge, tmp_path, "v0.6.5")
    assert hidden(tmp_path) == []


def _run_module(args):
    return run_module(ds4_release_build, args)[1]


def _args(forge, root, tag, **extra):
    return {
        "root": str(root),
        "release": tag,
        "commit": forge["tags"][tag],
        "repo": forge["repo"],
        "build_target": SPARK,
        "cuda_version": "13.0",
        "nvcc": forge["nvcc"],
        "jobs": 2,
        "log_dir": str(root / "logs"),
        "tags_record": str(root / "engine-tags.json"),
        **extra,
    }


def test_module_check_mode_builds_nothing_and_shows_the_stamp(monkeypatch, forge, tmp_path):
    result = _run_module({**_args(forge, tmp_path, "v0.6.3"), "_ansible_check_mode": True})
    assert (result["changed"], result["built"], result["msg"]) == (
        True,
        False,
        "would build v0.6.3 (not built yet)",
    )
    assert result["diff"]["before"] == "" and '"release": "v0.6.3"' in result["diff"]["after"]
    assert not (tmp_path / "releases").exists() and not (tmp_path / "logs").exists()


def test_module_builds_once_and_reports_failures(monkeypatch, forge, tmp_path):
    result = _run_module(_args(forge, tmp_path, "v0.6.5.1"))
    assert (result["changed"], result["built"], result["stamp"]["release"]) == (True, True, "v0.6.5.1")
    result = _run_module(_args(forge, tmp_path, "v0.6.5.1"))
    assert (result["changed"], result["built"], result["msg"]) == (False, False, "v0.6.5.1 is up to date")
    result = _run_module(_args(forge, tmp_path, "v0.6.7"))
    assert result["failed"] and result["log_path"] == str(tmp_path / "logs" / "build-v0.6.7.log")
    assert result["msg"].startswith("building release v0.6.7 failed")


# A uid no account or process of this machine has: end_processes_of kills every process of the build
# user, which must be no one else's.
BUILD_UID = 61883


@pytest.fixture
def open_tree(forge, monkeypatch):
    """A tree the build user may traverse (pytest's own is root's alone), a GB10 nvcc in it, a `make` that
    records who ran it and with what environment, leaves a process behind, tries to write beside its tree
    and sets a set-user-ID bit; and the build user, an account of BUILD_UID."""
    if os.geteuid() != 0:
        pytest.skip("switching to the build user needs root")
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            text = status.read_text()
            # An ended process of an earlier test, not yet reaped, is no one's.
            assert f"Uid:\t{BUILD_UID}\t" not in text or "State:\tZ" in text, f"uid {BUILD_UID} is in use"
    base = Path(tempfile.mkdtemp(prefix="ds4-build-user-"))
    base.chmod(0o755)
    subprocess.run(
        [sys.executable, str(STANDINS / "gpu" / "install.py"), "--root", str(base / "gpu"),
         "--persona", "gb10"],
        check=True,
    )  # fmt: skip
    spy = base / "make"
    spy.write_text(
        "#!/bin/sh\n"
        'id -u > .built-by && chmod 4775 .built-by && echo "$HOME" > .home && env > .build-env\n'
        "sleep 300 & echo $! > .left-behind\n"
        "touch ../escaped 2>/dev/null\n"
        'exec make "$@"\n'
    )
    spy.chmod(0o755)
    entry = pwd.struct_passwd(
        ("ds4-build", "x", BUILD_UID, BUILD_UID, "", "/nonexistent", "/usr/sbin/nologin")
    )
    monkeypatch.setattr(ds4_release_build_utils.pwd, "getpwnam", lambda name: entry)
    yield {
        "base": base,
        "nvcc": str(base / "gpu" / "usr" / "local" / "cuda" / "bin" / "nvcc"),
        "make": str(spy),
    }
    shutil.rmtree(base)


def _gone(pid):
    """Whether process PID has ended (a zombie not yet reaped by init has ended too)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_the_engine_is_built_by_the_build_user_and_left_to_root(forge, open_tree):
    root = open_tree["base"] / "opt"
    built = build_release(
        root=str(root), release="v0.6.5", commit=forge["tags"]["v0.6.5"], repo=forge["repo"],
        build_target=SPARK, cuda_version="13.0", nvcc=open_tree["nvcc"], jobs=2, log_dir=str(root / "logs"),
        git="git", make=open_tree["make"], env=os.environ, build_user="ds4-build",
        tags_record=str(root / "engine-tags.json"),
    )  # fmt: skip
    assert built["built"]
    release = root / "releases" / "v0.6.5"
    assert (release / ".built-by").read_text() == f"{BUILD_UID}\n"
    assert (release / ".home").read_text() == f"{root / 'releases' / '.build-v0.6.5'}\n"
    # Nothing beside its own tree, and nothing of it left running.
    assert not (root / "releases" / "escaped").exists()
    assert _gone(int((release / ".left-behind").read_text()))
    for path in [release, *release.rglob("*")]:
        info = path.lstat()
        assert info.st_uid == 0 and info.st_gid == 0, path
        if not path.is_symlink():
            assert info.st_mode & 0o7022 == 0, (path, oct(info.st_mode))
    log = (root / "logs" / "build-v0.6.5.log").read_text()
    assert f"building as ds4-build (uid {BUILD_UID})" in log
    assert json.loads((root / "engine-tags.json").read_text())["v0.6.5"]["commit"] == forge["tags"]["v0.6.5"]


def test_the_build_user_is_not_given_the_proxy_that_the_clone_went_through(forge, open_tree, monkeypatch):
    """The proxy (ds4_proxy_env, set in the module's environment) is for root's clone; the engine's code,
    not trusted with root, is not trusted with a proxy's password either."""
    marker = "Px-9b2e-PROXYPASS"
    monkeypatch.setenv("https_proxy", f"http://u:{marker}@proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    root = open_tree["base"] / "opt"
    built = build_release(
        root=str(root), release="v0.6.5", commit=forge["tags"]["v0.6.5"], repo=forge["repo"],
        build_target=SPARK, cuda_version="13.0", nvcc=open_tree["nvcc"], jobs=2, log_dir=str(root / "logs"),
        git="git", make=open_tree["make"], env=os.environ, build_user="ds4-build",
    )  # fmt: skip
    assert built["built"]
    seen = (root / "releases" / "v0.6.5" / ".build-env").read_text()
    names = {line.partition("=")[0].lower() for line in seen.splitlines()}
    assert "path" in names and "https_proxy" not in names and "no_proxy" not in names
    assert marker not in seen


def test_a_build_that_links_to_a_file_outside_its_tree_is_refused(forge, open_tree, monkeypatch):
    victim = open_tree["base"] / "victim"
    victim.write_text("root's\n")
    victim.chmod(0o666)
    seal = ds4_release_build_utils.seal

    def linked_then_sealed(staging, account, git):
        # What the build user could do where protected_hardlinks is off (here it is on, so the test does
        # it for it): sealing the tree would hand the file to root and change its mode.
        os.link(victim, os.path.join(staging, "ds4-extra"))
        seal(staging, account, git)

    monkeypatch.setattr(ds4_release_build_utils, "seal", linked_then_sealed)
    with pytest.raises(
        BuildError, match="left ds4-extra in .* owned by uid 0, not by the build user ds4-build"
    ):
        build_release(
            root=str(open_tree["base"] / "opt"), release="v0.6.5", commit=forge["tags"]["v0.6.5"],
            repo=forge["repo"], build_target=SPARK, cuda_version="13.0", nvcc=open_tree["nvcc"], jobs=2,
            log_dir=str(open_tree["base"] / "logs"), git="git", make="make", env=os.environ,
            build_user="ds4-build",
        )  # fmt: skip
    assert oct(victim.stat().st_mode & 0o777) == "0o666" and victim.read_text() == "root's\n"
    assert not (open_tree["base"] / "opt" / "releases" / "v0.6.5").exists()


def test_a_build_user_that_cannot_reach_its_tree_is_refused_before_the_build(forge, open_tree):
    root = open_tree["base"] / "opt"
    (root / "releases").mkdir(parents=True)
    root.chmod(0o700)
    refused = rf"^the build user ds4-build may not pass through {root} \(mode 0700, owner root\)"
    with pytest.raises(ReleaseError, match=refused):
        build_release(
            root=str(root), release="v0.6.5", commit=forge["tags"]["v0.6.5"], repo=forge["repo"],
            build_target=SPARK, cuda_version="13.0", nvcc=open_tree["nvcc"], jobs=2,
            log_dir=str(open_tree["base"] / "logs"), git="git", make="make", env=os.environ,
            build_user="ds4-build",
        )  # fmt: skip
    # Refused before anything: no clone, no log.
    assert os.listdir(root / "releases") == [] and not (open_tree["base"] / "logs").exists()


def test_the_build_lock_is_root_s_alone_and_a_holder_is_named(forge, tmp_path, lock_dir, monkeypatch):
    # Anyone could flock releases/.build.lock (0644) and stall every build for good.
    build(forge, tmp_path, "v0.6.5")
    assert not (tmp_path / "releases" / ".build.lock").exists()
    assert oct(lock_dir.stat().st_mode & 0o777) == "0o700"
    assert oct((lock_dir / "build.lock").stat().st_mode & 0o777) == "0o600"
    import fcntl

    monkeypatch.setattr(ds4_release_build_utils, "BUILD_LOCK_WAIT", 0.3)
    fd = os.open(lock_dir / "build.lock", os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        held_by = rf"the build lock .* is held by pid {os.getpid()} of user root"
        with pytest.raises(ReleaseError, match=held_by):
            build(forge, tmp_path, "v0.6.6")
    finally:
        os.close(fd)


def test_no_process_job_or_file_of_the_build_user_outlives_a_build(forge, open_tree, tmp_path, monkeypatch):
    # A release's Makefile may leave an at or cron job, or a process, to rewrite the next release.
    from ansible_collections.ds4.fleet.plugins.module_utils._engine import build_user as ds4_build_user

    # The shared directory where the build user can reach it (pytest's tmp_path is root's alone).
    cron, at, shared = tmp_path / "crontabs", tmp_path / "atjobs", open_tree["base"] / "shared-tmp"
    for directory in (cron, at, shared):
        directory.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(ds4_build_user, "CRON_SPOOL", str(cron))
    monkeypatch.setattr(ds4_build_user, "AT_SPOOL", str(at))
    monkeypatch.setattr(ds4_build_user, "SHARED_DIRS", (str(shared),))
    # What an earlier build left: a crontab and an at job of the build user.
    for path in (cron / "ds4-build", at / "a0001201b4c2e1"):
        path.write_text("* * * * * cp /tmp/evil ds4-server\n")
        os.chown(path, BUILD_UID, BUILD_UID)
    spy = Path(open_tree["make"])
    leave = f"mkdir {shared}/.keep && touch {shared}/.keep/x && ls -ld {shared}/.keep\nexec make"
    spy.write_text(spy.read_text().replace("exec make", leave))
    root = open_tree["base"] / "opt"
    built = build_release(
        root=str(root), release="v0.6.5", commit=forge["tags"]["v0.6.5"], repo=forge["repo"],
        build_target=SPARK, cuda_version="13.0", nvcc=open_tree["nvcc"], jobs=2, log_dir=str(root / "logs"),
        git="git", make=open_tree["make"], env=os.environ, build_user="ds4-build",
    )  # fmt: skip
    release = root / "releases" / "v0.6.5"
    assert built["built"] and _gone(int((release / ".left-behind").read_text()))
    assert list(cron.iterdir()) == [] and list(at.iterdir()) == [] and list(shared.iterdir()) == []
    assert built["cleared"] == [str(cron / "ds4-build"), str(at / "a0001201b4c2e1")]
    log = (root / "logs" / "build-v0.6.5.log").read_text()
    assert f"an earlier build left, as ds4-build, now removed: {cron / 'ds4-build'}" in log
    assert f" {shared}/.keep\n" in log, "the build left nothing in the shared directory to clear"
    assert ds4_build_user.processes_of(BUILD_UID) == []
