"""The engine role on a sandbox Spark: after converge, v0.5.6 and v0.6.5 are built side by side.

The tests run in file order and build on each other's state. Runs that must be refused or must fail are
nested `ansible-playbook` runs of build.yml, whose exit status and messages are asserted, so that they
fail the scenario only when the expectation is wrong.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1]
PROJECT = SCENARIO.parents[1]
# The forge serves the stand-in repository built from this file's sibling; its tag -> commit map.
TAGS = json.loads((PROJECT / ".sandbox" / "forge" / "git" / "ds4-tags.json").read_text())
REPO = "git://forge/ds4.git"
ROOT = "/opt/ds4"
RELEASES = f"{ROOT}/releases"
LOGS = "/var/log/ds4"
SPARK = {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
START = "Build the release beside the others, unless its stamp already matches"
WAIT = "Wait for the build, printing its progress"
PROGRAMS = ("ds4", "ds4-server", "ds4-bench")


def play(*args, playbook="build.yml"):
    """Run a playbook of this scenario on its Spark (-v, so that every result is printed); (exit status,
    results by task name, output)."""
    ansible = shutil.which(
        "ansible-playbook", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    # Molecule forces colour on, which would wrap every status word in escape codes.
    env = {key: value for key, value in os.environ.items() if key != "ANSIBLE_FORCE_COLOR"}
    env.update(ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [ansible, "-v", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(SCENARIO / playbook), *args],
        env=env,
        # One stream, in order: a failed result may go to stderr (Molecule's display_failed_stderr).
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # A guard against a hang, not an expectation of speed: a loaded 2-core machine has taken minutes.
        timeout=1800,
    )
    output = proc.stdout
    # With the JSON result format a host's result follows ` => ` (per item: ` => (item=...) => `).
    results, task, decoder = {}, None, json.JSONDecoder()
    for match in re.finditer(
        r"^TASK \[(?:[^\]]* : )?([^\]]*)\]|^(\w+): \[spark01\][^\n]*? => (\{)", output, re.M
    ):
        if match.group(1) is not None:
            task = match.group(1)
        elif " => (item=" not in match.group(0):
            # The callback drops `failed` from the result; the line's status word keeps it.
            result = decoder.raw_decode(output, match.start(3))[0]
            results[task] = dict(result, failed=match.group(2) == "fatal")
    return proc.returncode, results, output


def recap_changed(output):
    line = next(line for line in output.splitlines() if line.startswith("spark01 ") and "changed=" in line)
    return int(line.split("changed=")[1].split()[0])


def stamp(host, tag):
    return json.loads(host.file(f"{RELEASES}/{tag}/.ds4-build.json").content_string)


def mtimes(host, *paths):
    return host.check_output("stat -c '%n %.9Y' " + " ".join(paths))


def hidden(host):
    names = host.check_output(f"ls -A {RELEASES}").split()
    return [name for name in names if name.startswith(".") and name != ".build.lock"]


def activate(host, current, previous=None):
    """What the activation step will do; the engine role only reads these links."""
    host.check_output(f"ln -sfn releases/{current} {ROOT}/current")
    host.check_output(
        f"rm -f {ROOT}/previous" + (f" && ln -sfn releases/{previous} {ROOT}/previous" if previous else "")
    )


def failure(results):
    failed = [(task, result) for task, result in results.items() if result.get("failed")]
    assert len(failed) == 1, results
    return failed[0]


@pytest.mark.parametrize(
    ("tag", "version_output"), [("v0.5.6", None), ("v0.6.5", "ds4-server v0.6.5 (cuda sm_121, CUDA 13.0)")]
)
def test_two_releases_side_by_side_with_their_stamps(host, tag, version_output):
    built = stamp(host, tag)
    assert {key: built[key] for key in ("release", "commit", "build_target", "cuda_version")} == {
        "release": tag,
        "commit": TAGS[tag],
        "build_target": SPARK,
        "cuda_version": "13.0",
    }
    # v0.5.6 has no --version: recorded as absent, and the build still passed.
    assert built["version_output"] == version_output
    assert built["engine_repo"] == REPO and built["built_at"].endswith("Z")
    for program in PROGRAMS:
        path = host.file(f"{RELEASES}/{tag}/{program}")
        assert path.is_file and path.mode == 0o755 and path.user == "root"
        assert host.run(f"{RELEASES}/{tag}/{program} --help").rc == 0
    assert host.file(f"{LOGS}/build-{tag}.log").contains("checks passed")
    assert hidden(host) == []


def test_a_rerun_changes_nothing_and_runs_no_make(host):
    watched = [f"{RELEASES}/{tag}/.ds4-build.json" for tag in ("v0.5.6", "v0.6.5")]
    watched += [f"{LOGS}/build-{tag}.log" for tag in ("v0.5.6", "v0.6.5")]
    before = mtimes(host, *watched)
    rc, results, output = play(playbook="converge.yml")
    assert rc == 0 and recap_changed(output) == 0, output
    assert results[WAIT]["results"][0]["built"] is False
    # Every build rewrites its log before make starts: unchanged logs mean no make ran.
    assert mtimes(host, *watched) == before


def test_check_mode_reports_the_build_and_builds_nothing(host):
    rc, results, output = play("--check", "-e", "ds4_release=v0.6.3")
    assert rc == 0, output
    said = results["Say what this run does with the engine releases"]["msg"]
    assert said.startswith(
        f"v0.6.3 (commit {TAGS['v0.6.3']}, make cuda CUDA_ARCH=sm_121, CUDA 13.0): build, "
    )
    assert results[START]["changed"] is True
    assert not host.file(f"{RELEASES}/v0.6.3").exists and not host.file(f"{LOGS}/build-v0.6.3.log").exists


def test_a_failed_build_leaves_the_running_release_intact_and_reports_the_log(host):
    activate(host, "v0.6.5", "v0.5.6")
    before = {tag: stamp(host, tag) for tag in ("v0.5.6", "v0.6.5")}
    host.check_output("mkdir -p /root/code/ds4 && echo clone > /root/code/ds4/marker")
    rc, results, output = play("-e", "ds4_release=v0.6.7")
    assert rc != 0, output
    task, result = failure(results)
    assert task == WAIT
    log = f"{LOGS}/build-v0.6.7.log"
    assert result["results"][0]["log_path"] == log
    message = result["msg"]
    assert message.startswith(
        "engine release v0.6.7: building release v0.6.7 failed: `/usr/bin/make cuda CUDA_ARCH=sm_121 -j"
    ), message
    assert f"lines of the build log {log}:\n" in message
    assert "error: this release does not build" in message.split(log, 1)[1]
    assert host.file(log).contains("error: this release does not build")
    assert not host.file(f"{RELEASES}/v0.6.7").exists and hidden(host) == []
    assert {tag: stamp(host, tag) for tag in before} == before
    assert host.file(f"{ROOT}/current").linked_to == f"{RELEASES}/v0.6.5"
    assert host.run(f"{ROOT}/current/ds4-server --version").stdout.startswith("ds4-server v0.6.5 ")
    # The shell installer's clone is never touched.
    assert host.file("/root/code/ds4/marker").content_string == "clone\n"


def test_a_tag_resolving_to_another_commit_is_refused_before_any_build(host):
    rc, results, output = play("-e", "ds4_release=v0.6.5.1", "-e", f"ds4_release_commit={TAGS['v0.6.5']}")
    assert rc != 0, output
    task, result = failure(results)
    assert task == "Resolve the release tag and plan the build"
    assert result["msg"].startswith(
        f"release tag v0.6.5.1 in {REPO} resolves to commit {TAGS['v0.6.5.1']}, "
        f"not to ds4_release_commit {TAGS['v0.6.5']}: refusing to build it"
    )
    assert not host.file(f"{LOGS}/build-v0.6.5.1.log").exists
    assert not host.file(f"{RELEASES}/v0.6.5.1").exists and hidden(host) == []


def test_an_unknown_tag_is_named_with_the_repository(host):
    rc, results, output = play("-e", "ds4_release=v0.9.9")
    assert rc != 0, output
    assert failure(results)[1]["msg"] == (
        f"release tag v0.9.9 (ds4_release) does not exist in {REPO} (ds4_engine_repo)"
    )


def test_the_running_release_is_never_rebuilt_in_place(host):
    before = stamp(host, "v0.6.5")
    rc, results, output = play("-e", "ds4_release=v0.6.5", "-e", "ds4_cuda_arch=sm_120")
    assert rc != 0, output
    task, result = failure(results)
    assert task == "Resolve the release tag and plan the build"
    assert result["msg"].startswith("release v0.6.5 is the running release (current) and must be rebuilt")
    assert stamp(host, "v0.6.5") == before


def test_old_releases_go_but_never_the_running_or_the_rollback_one(host):
    activate(host, "v0.6.5", "v0.5.6")
    rc, _, output = play("-e", "ds4_release=v0.6.5.1", "-e", "ds4_releases_keep=2")
    assert rc == 0, output
    # v0.5.6 is beyond the newest two, but it is the rollback release.
    assert host.check_output(f"ls {RELEASES}").split() == ["v0.5.6", "v0.6.5", "v0.6.5.1"]
    assert stamp(host, "v0.6.5.1")["commit"] == TAGS["v0.6.5.1"]
    activate(host, "v0.6.5")
    built = mtimes(host, f"{LOGS}/build-v0.6.5.1.log")
    rc, results, output = play("-e", "ds4_release=v0.6.5.1", "-e", "ds4_releases_keep=2")
    assert rc == 0 and recap_changed(output) == 1, output
    assert host.check_output(f"ls {RELEASES}").split() == ["v0.6.5", "v0.6.5.1"]
    assert not host.file(f"{LOGS}/build-v0.5.6.log").exists
    assert mtimes(host, f"{LOGS}/build-v0.6.5.1.log") == built


def test_each_build_records_the_gpu_code_it_carries(host):
    # v0.6.8's cuda-spark drops the arch, as the real source's does; the role never relies on it.
    rc, results, output = play("-e", "ds4_release=v0.6.8")
    assert rc == 0, output
    built = stamp(host, "v0.6.8")
    assert built["build_target"] == SPARK and "make cuda CUDA_ARCH=sm_121 " in built["make_command"]
    assert built["sass_archs"] == {program: ["sm_121"] for program in PROGRAMS}
    log = host.file(f"{LOGS}/build-v0.6.8.log").content_string
    for program in PROGRAMS:
        assert f"/usr/local/cuda/bin/cuobjdump --list-elf {RELEASES}/.build-v0.6.8/{program}\n" in log
        assert "ELF file    1: ds4_cuda.sm_121.cubin" in log
    # The last progress record the wait printed from names the build's last step.
    progress = json.loads(host.file(f"{LOGS}/.build-v0.6.8.progress.json").content_string)
    assert progress["state"] == "building" and progress["message"].startswith("building v0.6.8, ")
    assert results[WAIT]["results"][0]["built"] is True


def test_a_release_whose_makefile_drops_the_arch_is_refused_and_the_running_one_stays(host):
    activate(host, "v0.6.5", "v0.6.5.1")
    before = {tag: stamp(host, tag) for tag in ("v0.6.5", "v0.6.5.1", "v0.6.8")}
    rc, results, output = play("-e", "ds4_release=v0.6.9")
    assert rc != 0, output
    task, result = failure(results)
    assert task == WAIT
    message = result["msg"]
    assert message.startswith(
        "engine release v0.6.9: building release v0.6.9 failed: the built ds4 holds no native code (SASS) "
        "for sm_121: `cuobjdump --list-elf` lists cubins for sm_75 only."
    ), message
    # What was found, in the build log's tail the message carries.
    assert "ELF file    1: ds4_cuda.sm_75.cubin" in message.split(f"{LOGS}/build-v0.6.9.log:\n", 1)[1]
    assert not host.file(f"{RELEASES}/v0.6.9").exists and hidden(host) == []
    assert {tag: stamp(host, tag) for tag in before} == before
    assert host.file(f"{ROOT}/current").linked_to == f"{RELEASES}/v0.6.5"
    assert host.run(f"{ROOT}/current/ds4-server --version").stdout.startswith("ds4-server v0.6.5 ")
