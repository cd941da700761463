"""The engine role on a sandbox Spark: after converge, v0.5.6 and v0.6.5 are built side by side.

Each test starts from converge's state (the two releases, no current or previous link) and leaves it so:
the links are taken away after each test, and a test that builds or removes a release puts the releases
back as they were, so that any one passes alone and in any order. Runs that must be refused or must fail
are nested `ansible-playbook` runs of build.yml (molecule/shared/nested.py), whose exit status and results
are asserted, so that they fail the scenario only when the expectation is wrong.
"""

import json
from pathlib import Path

import pytest
from nested import play as nested_play
from waits import wait_for

SCENARIO = Path(__file__).resolve().parents[1]
PROJECT = SCENARIO.parents[1]
# The forge serves the stand-in repository built from this file's sibling; its tag -> commit map.
TAGS = json.loads((PROJECT / ".sandbox" / "forge" / "git" / "ds4-tags.json").read_text())
REPO = "git://forge/ds4.git"
# Upstream's stand-in: untagged commits on main (first, second, broken, fixed), served beside the fork's.
UPSTREAM_REPO = "git://forge/ds4-upstream.git"
UPSTREAM = json.loads((PROJECT / ".sandbox" / "forge" / "git" / "ds4-upstream-commits.json").read_text())
ROOT = "/opt/ds4"
RELEASES = f"{ROOT}/releases"
LOGS = "/var/log/ds4"
# A GB10 is built as the engine's authors build it, where the release's Makefile allows; else the fallback.
SPARK = {"arch": "sm_121", "make_target": "cuda-spark", "make_args": []}
FALLBACK = {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
SPARK_REASON = "the Spark target: its Makefile's cuda-spark builds for sm_121a, the GB10's"
WHY = "Say why the Spark is built without the Spark target"
START = "Build the release beside the others, unless its stamp already matches"
WAIT = "Wait for the build, printing its progress"
PROGRAMS = ("ds4", "ds4-server", "ds4-bench")


def play(*args, playbook="build.yml"):
    """Run a playbook of this scenario on its Spark, with Molecule's settings: a nested.Run."""
    return nested_play(SCENARIO / playbook, *args, project_config=False)


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


def failure(run):
    """The task that failed, the only one: (its name, its result)."""
    failed = run.failures("spark01")
    assert len(failed) == 1, run
    return failed[0].name, failed[0].data


@pytest.fixture(autouse=True)
def as_converge_left_it(host):
    """After each test: no current or previous link, as converge left the Spark (the engine role only reads
    them), and the releases it built (none with these) back as they were."""
    releases = set(host.check_output(f"ls {RELEASES}").split())
    yield
    host.check_output(f"rm -f {ROOT}/current {ROOT}/previous")
    for tag in set(host.check_output(f"ls {RELEASES}").split()) - releases:
        host.check_output(f"rm -rf {RELEASES}/{tag} {LOGS}/build-{tag}.log {LOGS}/.build-{tag}.progress.json")


@pytest.mark.parametrize(
    ("tag", "version_output"), [("v0.5.6", None), ("v0.6.5", "ds4-server v0.6.5 (cuda sm_121a, CUDA 13.0)")]
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
    # Built with cuda-spark, read from the release's Makefile: the arch-specific sm_121a code.
    assert (built["make_target"], built["make_target_reason"]) == ("cuda-spark", SPARK_REASON)
    assert built["make_command"].startswith("/usr/bin/make cuda-spark -j")
    assert built["sass_archs"] == {program: ["sm_121a"] for program in PROGRAMS}
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
    run = play(playbook="converge.yml")
    assert run.rc == 0 and run.changed("spark01") == 0, run
    assert all(result.data["results"][0]["built"] is False for result in run.of("spark01", WAIT)), run
    # Every build rewrites its log before make starts: unchanged logs mean no make ran.
    assert mtimes(host, *watched) == before


def test_check_mode_reports_the_build_and_builds_nothing(host):
    run = play("--check", "-e", "ds4_release=v0.6.3")
    assert run.rc == 0, run
    said = run.result("Say what this run does with the engine releases").msg
    assert said.startswith(f"v0.6.3 (commit {TAGS['v0.6.3']}, make cuda-spark, CUDA 13.0): build, ")
    assert run.result(WHY).skipped
    assert run.result(START).changed is True
    assert not host.file(f"{RELEASES}/v0.6.3").exists and not host.file(f"{LOGS}/build-v0.6.3.log").exists


def test_a_failed_build_leaves_the_running_release_intact_and_reports_the_log(host):
    activate(host, "v0.6.5", "v0.5.6")
    before = {tag: stamp(host, tag) for tag in ("v0.5.6", "v0.6.5")}
    host.check_output("mkdir -p /root/code/ds4 && echo clone > /root/code/ds4/marker")
    run = play("-e", "ds4_release=v0.6.7")
    assert run.rc != 0, run
    task, result = failure(run)
    assert task == WAIT
    log = f"{LOGS}/build-v0.6.7.log"
    assert result["results"][0]["log_path"] == log
    message = result["msg"]
    assert message.startswith(
        f"engine release v0.6.7: building release v0.6.7 (commit {TAGS['v0.6.7']}) failed: "
        "`/usr/bin/make cuda-spark -j"
    ), message
    lines = host.file(log).content_string.splitlines()
    step = next(n for n, line in enumerate(lines, 1) if line.startswith("== $ /usr/bin/make cuda-spark"))
    assert f"the failed step starts at line {step} of the build log {log}." in message
    assert "lines of the build log:\n" in message
    assert "error: this release does not build" in message.split(log, 1)[1]
    assert host.file(log).contains("error: this release does not build")
    assert not host.file(f"{RELEASES}/v0.6.7").exists and hidden(host) == []
    assert {tag: stamp(host, tag) for tag in before} == before
    assert host.file(f"{ROOT}/current").linked_to == f"{RELEASES}/v0.6.5"
    assert host.run(f"{ROOT}/current/ds4-server --version").stdout.startswith("ds4-server v0.6.5 ")
    # The shell installer's clone is never touched.
    assert host.file("/root/code/ds4/marker").content_string == "clone\n"


def test_a_tag_resolving_to_another_commit_is_refused_before_any_build(host):
    run = play("-e", "ds4_release=v0.6.5.1", "-e", f"ds4_release_commit={TAGS['v0.6.5']}")
    assert run.rc != 0, run
    task, result = failure(run)
    assert task == "Resolve the release tag and plan the build"
    assert result["msg"].startswith(
        f"release tag v0.6.5.1 in {REPO} resolves to commit {TAGS['v0.6.5.1']}, "
        f"not to ds4_release_commit {TAGS['v0.6.5']}: refusing to build it"
    )
    assert not host.file(f"{LOGS}/build-v0.6.5.1.log").exists
    assert not host.file(f"{RELEASES}/v0.6.5.1").exists and hidden(host) == []


def test_an_unknown_tag_is_named_with_the_repository(host):
    run = play("-e", "ds4_release=v0.9.9")
    assert run.rc != 0, run
    assert failure(run)[1]["msg"] == (
        f"release tag v0.9.9 (ds4_release) does not exist in {REPO} (ds4_engine_repo)"
    )


def test_the_running_release_is_never_rebuilt_in_place(host):
    activate(host, "v0.6.5", "v0.5.6")
    before = stamp(host, "v0.6.5")
    run = play("-e", "ds4_release=v0.6.5", "-e", "ds4_cuda_arch=sm_120")
    assert run.rc != 0, run
    task, result = failure(run)
    assert task == "Resolve the release tag and plan the build"
    assert result["msg"].startswith("release v0.6.5 is the running release (current) and must be rebuilt")
    assert stamp(host, "v0.6.5") == before


@pytest.fixture
def v056_kept_aside(host):
    """v0.5.6 as converge built it, put back after the test that lets the role remove it."""
    aside = "/root/v0.5.6-aside"
    host.check_output(
        f"rm -rf {aside} && mkdir {aside} && cp -a {RELEASES}/v0.5.6 {LOGS}/build-v0.5.6.log {aside}/"
    )
    yield
    host.check_output(
        f"rm -rf {RELEASES}/v0.5.6 && cp -a {aside}/v0.5.6 {RELEASES}/"
        f" && cp -a {aside}/build-v0.5.6.log {LOGS}/ && rm -rf {aside}"
    )


def test_old_releases_go_but_never_the_running_or_the_rollback_one(host, v056_kept_aside):
    activate(host, "v0.6.5", "v0.5.6")
    run = play("-e", "ds4_release=v0.6.5.1", "-e", "ds4_releases_keep=2")
    assert run.rc == 0, run
    # v0.5.6 is beyond the newest two, but it is the rollback release.
    assert host.check_output(f"ls {RELEASES}").split() == ["v0.5.6", "v0.6.5", "v0.6.5.1"]
    assert stamp(host, "v0.6.5.1")["commit"] == TAGS["v0.6.5.1"]
    activate(host, "v0.6.5")
    built = mtimes(host, f"{LOGS}/build-v0.6.5.1.log")
    run = play("-e", "ds4_release=v0.6.5.1", "-e", "ds4_releases_keep=2")
    assert run.rc == 0 and run.changed("spark01") == 1, run
    assert host.check_output(f"ls {RELEASES}").split() == ["v0.6.5", "v0.6.5.1"]
    assert not host.file(f"{LOGS}/build-v0.5.6.log").exists
    assert mtimes(host, f"{LOGS}/build-v0.6.5.1.log") == built


def test_a_release_whose_spark_target_passes_an_empty_arch_is_built_with_the_fallback_and_says_so(host):
    # v0.6.8's cuda-spark passes an empty arch, as the real source's does: read from its Makefile before the
    # build, the role builds make cuda CUDA_ARCH=sm_121 and says why, in the run, the stamp and status.yml.
    run = play("-e", "ds4_release=v0.6.8")
    assert run.rc == 0, run
    said = run.result("Say what this run does with the engine releases").msg
    assert said.startswith(
        f"v0.6.8 (commit {TAGS['v0.6.8']}, make cuda CUDA_ARCH=sm_121, CUDA 13.0): build"
    ), said
    reason = (
        "built without the Spark target, with make cuda CUDA_ARCH=sm_121, because its Makefile's cuda-spark "
        "passes an empty CUDA_ARCH: nvcc would build for its own default arch, with no native GB10 code"
    )
    why = run.result(WHY).msg
    assert why.startswith(f"v0.6.8: {reason}") and "\n" not in why, why
    # Said once, before the build.
    order = [result.name for result in run.of("spark01")]
    assert order.index(WHY) < order.index(START)
    built = stamp(host, "v0.6.8")
    assert built["build_target"] == FALLBACK and "make cuda CUDA_ARCH=sm_121 " in built["make_command"]
    assert built["make_target"] == "cuda" and built["make_target_reason"].startswith(reason)
    assert built["sass_archs"] == {program: ["sm_121"] for program in PROGRAMS}
    log = host.file(f"{LOGS}/build-v0.6.8.log").content_string
    assert f"== make cuda: {reason}" in log
    for program in PROGRAMS:
        assert f"/usr/local/cuda/bin/cuobjdump --list-elf {RELEASES}/.build-v0.6.8/{program}\n" in log
        assert "ELF file    1: ds4_cuda.sm_121.cubin" in log
    # The last progress record the wait printed from names the build's last step.
    progress = json.loads(host.file(f"{LOGS}/.build-v0.6.8.progress.json").content_string)
    assert progress["state"] == "building" and progress["message"].startswith("building v0.6.8, ")
    assert run.result(WAIT).data["results"][0]["built"] is True
    # status.yml, with v0.6.8 running: its note says so, with the reason.
    activate(host, "v0.6.8", "v0.6.5")
    status = nested_play(PROJECT / "playbooks" / "status.yml", "-e", "ds4_target_hosts=all")
    assert status.rc == 0, status
    note = "spark01: the running release was built without the Spark target (make cuda CUDA_ARCH=sm_121): "
    assert any(line.startswith(note + reason) for line in status.said_lines()), status.said_lines()
    # The engine built so names the faster target once at boot, as the fork's does.
    booted = served(host, "v0.6.8")
    advice = [line for line in booted["log"] if "make cuda-spark" in line]
    assert len(advice) == 1 and advice[0].endswith("build with make cuda-spark for faster serving"), advice


TINY_GGUF = (
    "import struct, sys\n"
    "def s(b): return struct.pack('<Q', len(b)) + b\n"
    "tokens = [b'<s>', b'</s>', b'Paris']\n"
    "kv = s(b'tokenizer.ggml.tokens') + struct.pack('<II', 9, 8) + struct.pack('<Q', len(tokens))\n"
    "kv += b''.join(s(t) for t in tokens)\n"
    "open(sys.argv[1], 'wb').write(b'GGUF' + struct.pack('<IQQ', 3, 0, 1) + kv)\n"
)


def served(host, tag, probes=()):
    """Start RELEASES/TAG/ds4-server on a tiny model, ask /v1/models (and the HTTP status of each of
    PROBES), stop it: {log lines, models, codes}."""
    model, log, port = "/root/tiny.gguf", f"/root/served-{tag}.log", 18581
    host.check_output(f'python3 -c "{TINY_GGUF}" {model}')
    pid = host.check_output(
        f"DS4_STANDIN_LOAD_DELAY=0 DS4_NO_UPDATE_CHECK=1 DS4_LOCK_FILE=/root/served.lock setsid "
        f"{RELEASES}/{tag}/ds4-server --cuda -m {model} --port {port} > {log} 2>&1 < /dev/null & echo $!"
    )
    try:
        wait_for(f"{tag}'s ds4-server listening", lambda: host.file(log).contains("listening on"))
        models = json.loads(host.check_output(f"curl -sf http://127.0.0.1:{port}/v1/models"))
        codes = {
            path: host.check_output(f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}{path}")
            for path in probes
        }
    finally:
        host.run(f"kill {pid}; while kill -0 {pid} 2>/dev/null; do sleep 0.1; done")
    return {"log": host.file(log).content_string.splitlines(), "models": models, "codes": codes}


def test_the_spark_target_s_build_serves_and_names_no_faster_target(host):
    booted = served(host, "v0.6.5")
    assert booted["models"]["data"][0]["id"] == "deepseek-v4-flash"
    assert any("ds4-server v0.6.5 (cuda sm_121a, CUDA 13.0) starting" in line for line in booted["log"])
    assert not any("make cuda-spark" in line for line in booted["log"]), booted["log"]


def test_a_changed_target_rebuilds_the_release_beside_the_running_one_then_nothing(host, v056_kept_aside):
    # v0.5.6, built with cuda-spark by converge and put back after, beside the running v0.6.5.
    activate(host, "v0.6.5")
    chosen = ["-e", "ds4_release=v0.5.6", "-e", '{"ds4_engine_make_targets": {"sm_121": "cuda"}}']
    run = play(*chosen)
    assert run.rc == 0, run
    assert run.result(WHY).msg == "v0.5.6: ds4_engine_make_targets names cuda for sm_121"
    assert run.result(WAIT).data["results"][0]["built"] is True
    rebuilt = stamp(host, "v0.5.6")
    assert rebuilt["build_target"] == FALLBACK
    assert rebuilt["make_target_reason"] == "ds4_engine_make_targets names cuda for sm_121"
    assert host.file(f"{ROOT}/current").linked_to == f"{RELEASES}/v0.6.5" and hidden(host) == []
    again = play(*chosen)
    assert again.rc == 0 and again.changed("spark01") == 0, again
    assert again.result(WAIT).data["results"][0]["built"] is False
    # The running release, built with cuda-spark, is kept as built and the run says so: never rebuilt.
    before = stamp(host, "v0.6.5")
    kept = play("-e", "ds4_release=v0.6.5", "-e", '{"ds4_engine_make_targets": {"sm_121": "cuda"}}')
    assert kept.rc == 0 and kept.changed("spark01") == 0, kept
    assert (
        "kept as built (make cuda-spark), not rebuilt with make cuda CUDA_ARCH=sm_121: it is the running"
        in (kept.result("Say what this run does with the engine releases").msg)
    )
    assert stamp(host, "v0.6.5") == before


def test_a_target_the_makefile_lacks_or_an_unknown_one_is_refused_before_anything(host):
    run = play("-e", "ds4_release=v0.6.3", "-e", '{"ds4_engine_make_targets": {"sm_121": "cuda-generic"}}')
    assert run.rc != 0, run
    task, result = failure(run)
    assert task == "Resolve the release tag and plan the build"
    assert (
        "ds4_engine_make_targets names cuda-generic for sm_121, but the release's Makefile has no "
        in (result["msg"])
    )
    run = play("-e", "ds4_release=v0.6.3", "-e", '{"ds4_engine_make_targets": {"sm_121": "all"}}')
    assert run.rc != 0 and "ds4_engine_make_targets must be a mapping of CUDA arch" in failure(run)[1]["msg"]
    assert not host.file(f"{RELEASES}/v0.6.3").exists and not host.file(f"{LOGS}/build-v0.6.3.log").exists


def test_a_release_whose_makefile_drops_the_arch_is_refused_and_the_running_one_stays(host):
    activate(host, "v0.6.5", "v0.5.6")
    before = {tag: stamp(host, tag) for tag in ("v0.5.6", "v0.6.5")}
    run = play("-e", "ds4_release=v0.6.9")
    assert run.rc != 0, run
    task, result = failure(run)
    assert task == WAIT
    message = result["msg"]
    assert message.startswith(
        f"engine release v0.6.9: building release v0.6.9 (commit {TAGS['v0.6.9']}) failed: the built ds4 "
        "holds no native code (SASS) for sm_121: `cuobjdump --list-elf` lists cubins for sm_75 only."
    ), message
    # What was found, in the build log's tail the message carries.
    assert "ELF file    1: ds4_cuda.sm_75.cubin" in message.split("lines of the build log:\n", 1)[1]
    assert not host.file(f"{RELEASES}/v0.6.9").exists and hidden(host) == []
    assert {tag: stamp(host, tag) for tag in before} == before
    assert host.file(f"{ROOT}/current").linked_to == f"{RELEASES}/v0.6.5"
    assert host.run(f"{ROOT}/current/ds4-server --version").stdout.startswith("ds4-server v0.6.5 ")


def test_a_release_pinned_by_commit_alone_is_built_beside_refused_and_failed_as_a_tag_is(host):
    """The fork's history pinned by commit, no tag named: its name carries the commit, its lineage is held
    to its source, a commit the forge lacks and one that does not build change nothing."""
    commit = TAGS["v0.6.3"]
    name = f"sandbox-g{commit[:12]}"
    pinned = (
        "-e",
        f"ds4_release={name}",
        "-e",
        f"ds4_release_commit={commit}",
        "-e",
        "ds4_engine_branch=main",
    )
    activate(host, "v0.6.5", "v0.5.6")
    # 1. A commit release follows upstream unless told: the fork's source (it serves /v1/stats) is refused.
    run = play(*pinned)
    task, result = failure(run)
    assert task == "Resolve the release tag and plan the build"
    assert result["msg"].startswith(
        f"ds4_engine_lineage makes release {name} (commit {commit}) upstream's, but its source at that "
        "commit is fork's"
    ), result["msg"]
    assert not host.file(f"{RELEASES}/{name}").exists and not host.file(f"{LOGS}/build-{name}.log").exists
    # 2. Declared the fork's: built beside the running release, named by its commit everywhere.
    run = play(*pinned, "-e", "ds4_engine_lineage=fork")
    assert run.rc == 0, run
    said = run.result("Say what this run does with the engine releases").msg
    assert said.startswith(f"{name} (commit {commit}, pinned by commit, main is "), said
    assert " commits ahead, at " in said.split("main is ", 1)[1]
    built = stamp(host, name)
    assert (built["release"], built["commit"], built["lineage"], built["branch"]) == (
        name,
        commit,
        "fork",
        "main",
    )
    assert host.check_output(f"git -C {RELEASES}/{name} rev-parse HEAD") == commit
    assert host.file(f"{ROOT}/current").linked_to == f"{RELEASES}/v0.6.5"
    # 3. Again: nothing to do.
    run = play(*pinned, "-e", "ds4_engine_lineage=fork")
    assert run.rc == 0 and all(r.data["results"][0]["built"] is False for r in run.of("spark01", WAIT)), run
    # 4. A commit the forge does not hold: refused before anything changes.
    absent = "0" * 40
    run = play(
        "-e",
        f"ds4_release=g{absent[:12]}",
        "-e",
        f"ds4_release_commit={absent}",
        "-e",
        "ds4_engine_lineage=fork",
    )
    task, result = failure(run)
    assert task == "Resolve the release tag and plan the build"
    assert result["msg"].startswith(
        f"commit {absent} (ds4_release_commit) is not in {REPO} (ds4_engine_repo)"
    )
    assert not host.file(f"{RELEASES}/g{absent[:12]}").exists and hidden(host) == []
    # 5. A commit that does not build: the running release serves on; the commit and the log line are named.
    broken = TAGS["v0.6.7"]
    run = play(
        "-e",
        f"ds4_release=g{broken[:12]}",
        "-e",
        f"ds4_release_commit={broken}",
        "-e",
        "ds4_engine_lineage=fork",
    )
    task, result = failure(run)
    assert task == WAIT and f"building release g{broken[:12]} (commit {broken}) failed: " in result["msg"]
    assert "the failed step starts at line " in result["msg"]
    assert not host.file(f"{RELEASES}/g{broken[:12]}").exists and hidden(host) == []
    assert host.file(f"{ROOT}/current").linked_to == f"{RELEASES}/v0.6.5"


def upstream_pin(commit_name):
    """Upstream at one commit of its main, the lineage implied by the commit: (release name, -e args)."""
    commit = UPSTREAM[commit_name]
    name = f"g{commit[:12]}"
    return name, (
        "-e", f"ds4_engine_repo={UPSTREAM_REPO}",
        "-e", "ds4_engine_branch=main",
        "-e", f"ds4_release={name}",
        "-e", f"ds4_release_commit={commit}",
    )  # fmt: skip


def test_upstream_pinned_by_commit_builds_serves_its_own_way_and_a_broken_commit_changes_nothing(host):
    """Issue 52: the untagged upstream stand-in at a commit, its lineage implied and read from its source;
    its built server serves /v1/models and none of the fork's probes; a later commit built beside it; a
    commit whose build fails leaves both, naming the commit and the build log's line; again, nothing."""
    first, pinned = upstream_pin("first")
    activate(host, "v0.6.5", "v0.5.6")
    # 1. Built for the GB10 with upstream's cuda-spark; the plan says how far main has moved past the pin.
    run = play(*pinned)
    assert run.rc == 0, run
    said = run.result("Say what this run does with the engine releases").msg
    assert said.startswith(
        f"{first} (commit {UPSTREAM['first']}, pinned by commit, main is 3 commits ahead, at "
        f"{UPSTREAM['fixed'][:12]}, make cuda-spark, CUDA 13.0)"
    ), said
    built = stamp(host, first)
    assert (built["commit"], built["lineage"], built["make_target"]) == (
        UPSTREAM["first"],
        "upstream",
        "cuda-spark",
    )
    assert "--mtp-model FILE" in host.check_output(f"{RELEASES}/{first}/ds4-server --help")
    assert host.file(f"{ROOT}/current").linked_to == f"{RELEASES}/v0.6.5"

    # 2. It serves as upstream does: /v1/models, and 404 where the fork serves its counts.
    booted = served(host, first, ("/v1/stats", "/metrics", "/health"))
    assert booted["models"]["data"][0]["id"] == "deepseek-v4-flash"
    assert booted["codes"] == {"/v1/stats": "404", "/metrics": "404", "/health": "404"}

    # 3. The later commit, beside it.
    second, pinned_second = upstream_pin("second")
    run = play(*pinned_second)
    assert run.rc == 0, run
    assert (
        stamp(host, second)["commit"] == UPSTREAM["second"]
        and stamp(host, first)["commit"] == UPSTREAM["first"]
    )

    # 4. A commit whose build fails: nothing else touched, the commit and the build log's line named.
    broken, pinned_broken = upstream_pin("broken")
    run = play(*pinned_broken)
    task, result = failure(run)
    assert task == WAIT, (task, result)
    assert f"building release {broken} (commit {UPSTREAM['broken']}) failed: " in result["msg"], result["msg"]
    assert "the failed step starts at line " in result["msg"], result["msg"]
    assert f"of the build log {LOGS}/build-{broken}.log" in result["msg"], result["msg"]
    assert not host.file(f"{RELEASES}/{broken}").exists and hidden(host) == []
    assert host.file(f"{ROOT}/current").linked_to == f"{RELEASES}/v0.6.5"
    assert {stamp(host, name)["commit"] for name in (first, second)} == {
        UPSTREAM["first"],
        UPSTREAM["second"],
    }

    # 5. The later commit again: nothing built, nothing changed.
    run = play(*pinned_second)
    assert run.rc == 0 and run.changed("spark01") == 0, run
    assert all(r.data["results"][0]["built"] is False for r in run.of("spark01", WAIT)), run
