"""Tests of the STAND-IN ds4 engine (tests/standins/engine): the repository make_repo.py builds, and the
programs each release tag builds into. They need git, make and the CUDA compiler (nvcc --version only).
"""

import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import gguf
import numpy
import pytest

HERE = Path(__file__).resolve().parent
MAKE_REPO = HERE / "make_repo.py"
NVCC_DIR = Path("/usr/local/cuda/bin")
PROGRAMS = ("ds4", "ds4-server", "ds4-bench")
SMOKE = "What is the capital of France? Answer in one sentence."
STAMP = r"\d{4} \d\d:\d\d:\d\d "
TAGS = (
    "v0.5.6",
    "v0.6.3",
    "v0.6.5",
    "v0.6.5.1",
    "v0.6.6",
    "v0.6.7",
    "v0.6.5.2",
    "v0.6.5.3",
    "v0.6.8",
    "v0.6.9",
    "v0.7.0",
)
CUOBJDUMP = HERE.parent / "gpu" / "cuobjdump"

pytestmark = pytest.mark.skipif(
    not (NVCC_DIR / "nvcc").exists() or not shutil.which("git") or not shutil.which("make"),
    reason="needs git, make and /usr/local/cuda/bin/nvcc",
)


def clean_env(**extra: str) -> dict:
    """This machine's environment without anything that steers the engine or its build, plus `extra`."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DS4_", "GIT_")) and key not in ("GGUF_FILE", "NVCC", "CUDA_ARCH")
    }
    env["PATH"] = f"{NVCC_DIR}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(extra)
    return env


def run(argv, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", clean_env())
    return subprocess.run([str(arg) for arg in argv], capture_output=True, text=True, timeout=60, **kwargs)


def write_gguf(path: Path, tokens: list[str] | None) -> Path:
    writer = gguf.GGUFWriter(str(path), arch="deepseek2")
    writer.add_name("stand-in test model")
    if tokens is not None:
        writer.add_token_list(tokens)
    writer.add_tensor("token_embd.weight", numpy.zeros((4, 8), dtype=numpy.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http(method: str, url: str, payload: dict | None = None, accept: str | None = None, agent: str = ""):
    """(status, content type, body text) of one request; HTTP errors are answers too."""
    request = urllib.request.Request(url, method=method)
    if agent:
        request.add_header("User-Agent", agent)
    data = None
    if payload is not None:
        data = json.dumps(payload).encode()
        request.add_header("Content-Type", "application/json")
    if accept:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, data=data, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def payload(question: str) -> dict:
    """The installer's HTTP smoke request."""
    return {
        "model": "deepseek-v4-flash",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": question}],
    }


def chat(base: str, question: str) -> dict:
    status, _, body = http("POST", f"{base}/v1/chat/completions", payload(question))
    assert status == 200, body
    return json.loads(body)


class Engine:
    """A running engine program whose stderr is collected line by line."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen(
            [str(arg) for arg in argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self.cond = threading.Condition()
        threading.Thread(target=self._collect, daemon=True).start()

    def _collect(self):
        for line in self.proc.stderr:
            with self.cond:
                self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()

    def wait_for(self, text: str, timeout: float = 10) -> str:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for line in self.lines:
                    if text in line:
                        return line
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"{text!r} never logged; log so far:\n" + "\n".join(self.lines))
                self.cond.wait(min(remaining, 0.1))

    def wait(self, timeout: float = 10) -> int:
        return self.proc.wait(timeout=timeout)


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("engine-repo")
    result = run([sys.executable, MAKE_REPO, "--out", out])
    assert result.returncode == 0, result.stderr
    return out, json.loads((out / "ds4-tags.json").read_text())


@pytest.fixture(scope="module")
def build(repo, tmp_path_factory):
    """build(tag, *make_args) -> (clone, make result), each tag and arguments built once."""
    out, _ = repo
    built = {}

    def build_(tag: str, *make_args: str, env: dict | None = None):
        key = (tag, make_args, tuple(sorted((env or {}).items())))
        if key not in built:
            clone = tmp_path_factory.mktemp(f"ds4-{tag}") / "ds4"
            cloned = run(
                ["git", "clone", "-q", "--depth", "1", "--branch", tag, f"file://{out}/ds4.git", clone]
            )
            assert cloned.returncode == 0, cloned.stderr
            built[key] = clone, run(["make", *make_args, "-j4"], cwd=clone, env=clean_env(**(env or {})))
        return built[key]

    return build_


@pytest.fixture(scope="module")
def upstream(repo) -> dict[str, str]:
    """Upstream's untagged commits by name, oldest first."""
    out, _ = repo
    return json.loads((out / "ds4-upstream-commits.json").read_text())


@pytest.fixture(scope="module")
def build_upstream(repo, upstream, tmp_path_factory):
    """build_upstream(name) -> (clone, make cuda-spark result): the commit fetched by its id alone, as a
    provisioner pinning upstream fetches it, each built once."""
    out, _ = repo
    built = {}

    def build_(name: str):
        if name not in built:
            clone = tmp_path_factory.mktemp(f"upstream-{name}") / "ds4"
            for argv in (
                ["git", "init", "-q", clone],
                [
                    "git",
                    "-C",
                    clone,
                    "fetch",
                    "-q",
                    "--depth",
                    "1",
                    f"file://{out}/ds4-upstream.git",
                    upstream[name],
                ],
                ["git", "-C", clone, "checkout", "-q", "--detach", upstream[name]],
            ):
                done = run(argv)
                assert done.returncode == 0, done.stderr
            built[name] = clone, run(["make", "cuda-spark", "-j4"], cwd=clone)
        return built[name]

    return build_


@pytest.fixture(scope="module")
def upstream_good(build_upstream) -> Path:
    clone, result = build_upstream("first")
    assert result.returncode == 0, result.stdout + result.stderr
    return clone


@pytest.fixture(scope="module")
def good(build) -> Path:
    clone, result = build("v0.6.5", "cuda-spark")
    assert result.returncode == 0, result.stdout + result.stderr
    return clone


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("gguf")
    random_bytes = where / "random.gguf"
    random_bytes.write_bytes(random.Random(4).randbytes(4096))
    return {
        "base": write_gguf(where / "base-0731.gguf", ["<s>", "</s>", "Paris", "France"]),
        "drafter": write_gguf(where / "drafter-0731.gguf", ["<s>", "</s>"]),
        "no-tokenizer": write_gguf(where / "no-tokenizer.gguf", None),
        "random": random_bytes,
        "missing": where / "missing.gguf",
    }


@pytest.fixture
def engine_env(tmp_path) -> dict:
    """No load delay, no release check, and a lock file and hold directory of this test's own."""
    (tmp_path / "holds").mkdir()
    return clean_env(
        DS4_LOCK_FILE=str(tmp_path / "ds4.lock"),
        DS4_STANDIN_LOAD_DELAY="0",
        DS4_NO_UPDATE_CHECK="1",
        DS4_STANDIN_HOLD_DIR=str(tmp_path / "holds"),
    )


@pytest.fixture
def start():
    """start(argv, env) -> Engine; whatever is still running at the end of the test is killed."""
    engines: list[Engine] = []

    def start_(argv, env) -> Engine:
        engines.append(Engine(argv, env))
        return engines[-1]

    yield start_
    for engine in engines:
        if engine.proc.poll() is None:
            engine.proc.kill()
        engine.proc.wait(timeout=10)


def serve(start, clone: Path, model: Path, env: dict, *extra) -> tuple[Engine, str]:
    port = free_port()
    engine = start([clone / "ds4-server", "--cuda", "-m", model, "--port", port, *extra], env)
    line = engine.wait_for("listening on")
    assert re.fullmatch(f"{STAMP}ds4-server: listening on http://127.0.0.1:{port}", line)
    return engine, f"http://127.0.0.1:{port}"


def stats(base: str) -> dict:
    return json.loads(http("GET", f"{base}/v1/stats", accept="application/json")[2])


def held_request(base: str, name: str) -> tuple[threading.Thread, list]:
    """Ask a question the stand-in holds until the test releases `name`, and wait until the server counts
    it in flight. The thread leaves the reply, or the connection error, in the returned list."""
    outcome: list = []

    def ask():
        try:
            outcome.append(chat(base, f"[[standin-hold:{name}]] {SMOKE}"))
        except OSError as error:
            outcome.append(error)

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while stats(base)["server"]["requests_inflight"] != 1:
        assert time.monotonic() < deadline, "the held request never reached the server"
        time.sleep(0.05)
    return thread, outcome


def holds(base: str) -> dict:
    return json.loads(http("GET", f"{base}/standin/holds")[2])


def release(env: dict, name: str) -> None:
    (Path(env["DS4_STANDIN_HOLD_DIR"]) / name).touch()


# --- the repository ------------------------------------------------------------------------------------


def test_repository_has_one_commit_per_release_and_main_on_the_newest(repo, tmp_path):
    out, tags = repo
    git_dir = out / "ds4.git"
    assert list(tags) == list(TAGS)
    assert (git_dir / "git-daemon-export-ok").is_file()
    listed = run(["git", "ls-remote", git_dir]).stdout
    assert f"{tags[TAGS[-1]]}\trefs/heads/main" in listed
    assert run(["git", f"--git-dir={git_dir}", "rev-list", "--count", "main"]).stdout.strip() == str(
        len(TAGS)
    )
    flavours = {
        "v0.6.6": "wrong-answer",
        "v0.6.7": "build-broken",
        "v0.6.5.2": "slightly-slower",
        "v0.6.5.3": "slow-decode",
        "v0.6.8": "spark-drops-arch",
        "v0.6.9": "drops-arch",
    }
    for tag, commit in tags.items():
        assert run(["git", f"--git-dir={git_dir}", "rev-parse", f"{tag}^{{commit}}"]).stdout.strip() == commit
        release = run(["git", f"--git-dir={git_dir}", "show", f"{tag}:RELEASE"]).stdout
        assert f"version={tag}\n" in release
        assert f"flavour={flavours.get(tag, 'good')}\n" in release


def test_make_repo_gives_the_same_hashes_every_time(repo, tmp_path):
    out, tags = repo
    again = run([sys.executable, MAKE_REPO, "--out", out])
    assert again.returncode == 0, again.stderr
    assert "unchanged" in again.stdout
    elsewhere = run([sys.executable, MAKE_REPO, "--out", tmp_path / "other"])
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert "built" in elsewhere.stdout
    assert json.loads((tmp_path / "other" / "ds4-tags.json").read_text()) == tags
    assert json.loads((out / "ds4-tags.json").read_text()) == tags


def test_a_pinned_commit_can_be_fetched_by_its_id(repo, tmp_path):
    out, tags = repo
    clone = tmp_path / "pinned"
    assert run(["git", "init", "-q", clone]).returncode == 0
    fetched = run(
        ["git", "-C", clone, "fetch", "-q", "--depth", "1", f"file://{out}/ds4.git", tags["v0.6.3"]]
    )
    assert fetched.returncode == 0, fetched.stderr


def test_upstream_is_untagged_commits_on_main_with_a_broken_one_and_a_later_good_one(repo, upstream):
    out, tags = repo
    git_dir = out / "ds4-upstream.git"
    assert list(upstream) == ["first", "second", "broken", "fixed"]
    assert (git_dir / "git-daemon-export-ok").is_file()
    listed = run(["git", "ls-remote", git_dir]).stdout
    assert listed == f"{upstream['fixed']}\tHEAD\n{upstream['fixed']}\trefs/heads/main\n"
    history = run(["git", f"--git-dir={git_dir}", "rev-list", "--reverse", "main"]).stdout.split()
    assert history == list(upstream.values())
    assert not set(history) & set(tags.values()), "upstream's commits are its own"
    for name, commit in upstream.items():
        release = run(["git", f"--git-dir={git_dir}", "show", f"{commit}:RELEASE"]).stdout
        flavour = "build-broken" if name == "broken" else "good"
        assert f"flavour={flavour}\nlineage=upstream\n" in release


def test_each_lineage_s_source_shows_its_own_marks(repo, upstream):
    """What a provisioner reads of a commit's source (git grep, never run): only the fork's names /v1/stats;
    upstream's names --mtp-model and not /v1/stats."""
    out, tags = repo

    def marks(git_dir: Path, commit: str) -> set[str]:
        found = run(
            [
                "git",
                f"--git-dir={git_dir}",
                "grep",
                "-F",
                "-o",
                "-h",
                "-e",
                "/v1/stats",
                "-e",
                "--mtp-model",
                commit,
            ]
        )
        return set(found.stdout.split())

    for commit in upstream.values():
        assert marks(out / "ds4-upstream.git", commit) == {"--mtp-model"}
    assert "/v1/stats" in marks(out / "ds4.git", tags["v0.6.5"])


# --- building ------------------------------------------------------------------------------------------


def test_cuda_spark_builds_the_three_programs_for_sm_121a(good, build):
    _, result = build("v0.6.5", "cuda-spark")
    assert "nvcc --version" in result.stdout
    for program in PROGRAMS:
        assert os.access(good / program, os.X_OK)
        version = run([good / program, "--version"])
        assert version.returncode == 0
        assert version.stdout.startswith(f"{program} v0.6.5 (cuda sm_121a, CUDA ")
    assert run(["git", "-C", good, "status", "--porcelain"]).stdout == ""


def cubins(program: Path) -> str:
    """What the cuobjdump stand-in lists for a built program."""
    return run([CUOBJDUMP, "--list-elf", program]).stdout


def test_the_programs_carry_the_gpu_code_of_their_arch(good):
    for program in PROGRAMS:
        assert cubins(good / program) == "ELF file    1: ds4_cuda.sm_121a.cubin\n"


def test_each_release_commits_the_makefile_of_its_shape(repo):
    out, _ = repo
    shapes = {"v0.6.5": "spark-arch", "v0.6.8": "spark-empty-arch", "v0.6.9": "spark-empty-arch"}
    shapes["v0.7.0"] = "spark-alias"
    for tag, shape in shapes.items():
        committed = run(["git", f"--git-dir={out / 'ds4.git'}", "show", f"{tag}:Makefile"]).stdout
        assert committed == (HERE / "makefiles" / f"{shape}.mk").read_text()


def test_an_alias_of_cuda_generic_builds_for_the_gpu_present(build, tmp_path_factory):
    gpu = tmp_path_factory.mktemp("gpu")
    installed = run([sys.executable, HERE.parent / "gpu" / "install.py", "--root", gpu, "--persona", "gb10"])
    assert installed.returncode == 0, installed.stderr
    clone, result = build("v0.7.0", "cuda-spark", env={"PATH": f"{gpu}/usr/bin:{NVCC_DIR}:/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CUDA_ARCH=native" in result.stdout
    assert cubins(clone / "ds4-server") == "ELF file    1: ds4_cuda.sm_121.cubin\n"
    # Without a GPU, -arch=native fails the build, as nvcc does.
    clone, result = build("v0.7.0", "cuda-spark", env={"PATH": f"{NVCC_DIR}:/usr/bin:/bin"})
    assert result.returncode != 0 and "Could not find a GPU for -arch=native" in result.stderr


def test_a_gb10_build_without_the_spark_cache_names_the_faster_target_once_at_boot(
    build, good, start, models, engine_env
):
    generic, result = build("v0.6.8", "cuda", "CUDA_ARCH=sm_121")
    assert result.returncode == 0, result.stdout + result.stderr
    engine, _ = serve(start, generic, models["base"], engine_env)
    advice = [line for line in engine.lines if "make cuda-spark" in line]
    assert len(advice) == 1 and re.fullmatch(
        f"{STAMP}ds4-server: GB10 build without the Spark weight-read cache \\(generic make cuda\\); build "
        "with make cuda-spark for faster serving",
        advice[0],
    ), engine.lines
    # Built with cuda-spark (v0.6.5), for another GPU, or before v0.5.5: no such line.
    for clone in (good, build("v0.6.5.1", "cuda", "CUDA_ARCH=sm_90")[0]):
        other, _ = serve(start, clone, models["base"], dict(engine_env, DS4_LOCK_FILE=str(clone / "lock")))
        assert not any("make cuda-spark" in line for line in other.lines), other.lines


def test_v0_6_8_cuda_spark_drops_the_arch_as_the_real_source_does(build):
    clone, result = build("v0.6.8", "cuda-spark")
    assert result.returncode == 0, result.stdout + result.stderr
    # The real source's cuda-spark runs `$(MAKE) ... CUDA_ARCH=`: nvcc 13's default, sm_75.
    assert "CUDA_ARCH=\n" in result.stdout and "[-arch=(none), CUDA 13.0]" in result.stdout
    assert cubins(clone / "ds4-server") == "ELF file    1: ds4_cuda.sm_75.cubin\n"
    assert run([clone / "ds4-server", "--version"]).stdout.startswith("ds4-server v0.6.8 (cuda sm_75, ")
    named, result = build("v0.6.8", "cuda", "CUDA_ARCH=sm_121")
    assert result.returncode == 0, result.stdout + result.stderr
    assert cubins(named / "ds4-server") == "ELF file    1: ds4_cuda.sm_121.cubin\n"


def test_v0_6_9_drops_the_arch_it_is_given(build):
    clone, result = build("v0.6.9", "cuda", "CUDA_ARCH=sm_121")
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(cubins(clone / program) == "ELF file    1: ds4_cuda.sm_75.cubin\n" for program in PROGRAMS)


def test_cuda_builds_for_the_arch_it_is_given(build):
    clone, result = build("v0.6.5.1", "cuda", "CUDA_ARCH=sm_90")
    assert result.returncode == 0, result.stdout + result.stderr
    assert run([clone / "ds4-server", "--version"]).stdout.startswith("ds4-server v0.6.5.1 (cuda sm_90, ")


def test_cuda_refuses_an_empty_arch(build):
    clone, result = build("v0.6.3", "cuda")
    assert result.returncode != 0
    assert "CUDA_ARCH is empty" in result.stderr
    assert not any((clone / program).exists() for program in PROGRAMS)


def test_a_missing_nvcc_fails_the_build(build):
    clone, result = build("v0.6.3", "cuda-spark", env={"NVCC": "/nonexistent/cuda/bin/nvcc"})
    assert result.returncode != 0
    assert "/nonexistent/cuda/bin/nvcc" in result.stderr
    assert not any((clone / program).exists() for program in PROGRAMS)


def test_release_v0_6_7_fails_its_build(build):
    clone, result = build("v0.6.7", "cuda-spark")
    assert result.returncode != 0
    assert "error:" in result.stderr
    assert not any((clone / program).exists() for program in PROGRAMS)


def test_upstream_cuda_spark_builds_native_gb10_code_without_the_spark_cache(upstream_good, build_upstream):
    _, result = build_upstream("first")
    assert (
        "$(MAKE) -B" not in result.stdout and " -B ds4 ds4-server ds4-bench CUDA_ARCH=sm_121" in result.stdout
    )
    for program in PROGRAMS:
        assert cubins(upstream_good / program) == "ELF file    1: ds4_cuda.sm_121a.cubin\n"
    assert run(["git", "-C", upstream_good, "status", "--porcelain"]).stdout == ""


def test_upstream_s_broken_commit_fails_its_build_and_the_later_one_builds(build_upstream):
    clone, result = build_upstream("broken")
    assert result.returncode != 0
    assert re.search(r"^ds4_\w+\.py:1: error: ", result.stderr, re.M), result.stderr
    assert not any((clone / program).exists() for program in PROGRAMS)
    clone, result = build_upstream("fixed")
    assert result.returncode == 0, result.stderr
    assert all(os.access(clone / program, os.X_OK) for program in PROGRAMS)


# --- command line --------------------------------------------------------------------------------------


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_exits_0_on_every_release(build, good, program):
    old, result = build("v0.5.6", "cuda-spark")
    assert result.returncode == 0, result.stderr
    for clone in (old, good):
        helped = run([clone / program, "--help"])
        assert helped.returncode == 0
        assert helped.stdout.startswith(f"usage: {program} ")


def test_version_flag_exists_only_from_v0_6(build):
    old, result = build("v0.5.6", "cuda-spark")
    assert result.returncode == 0, result.stderr
    refused = run([old / "ds4-server", "--version"])
    assert refused.returncode == 2
    first, second = refused.stderr.splitlines()[:2]
    assert re.fullmatch(f"{STAMP}ds4-server: unknown option: --version", first)
    assert second.startswith("usage: ds4-server")
    assert run([old / "ds4-server", "--help"]).stdout.count("--version") == 0


def test_unknown_options_exit_2(good):
    for program in PROGRAMS:
        refused = run([good / program, "--frobnicate"])
        assert refused.returncode == 2
        assert re.match(f"{STAMP}{program}: unknown option: --frobnicate\n", refused.stderr)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("missing", "ds4: cannot open model '{path}': No such file or directory"),
        ("random", "ds4: model is not a GGUF file"),
        ("no-tokenizer", "ds4: GGUF tokenizer token table is missing or invalid"),
    ],
)
@pytest.mark.parametrize("program", ["ds4-server", "ds4"])
def test_a_bad_model_is_refused(good, models, engine_env, program, model, message):
    argv = [good / program, "--cuda", "-m", models[model], "-c", "4096"] + (
        ["-p", SMOKE] if program == "ds4" else []
    )
    refused = run(argv, env=engine_env)
    assert refused.returncode == 1
    assert re.search(f"^{STAMP}{re.escape(message.format(path=models[model]))}$", refused.stderr, re.M)


def test_upstream_s_help_lists_its_own_flags(upstream_good, good):
    helped = run([upstream_good / "ds4-server", "--help"])
    assert helped.returncode == 0
    assert re.search(r"^  --dspark +DSpark", helped.stdout, re.M), helped.stdout
    assert re.search(r"^  --mtp-model FILE +DSpark support GGUF", helped.stdout, re.M), helped.stdout
    assert "--check-update" not in helped.stdout and "--version" not in helped.stdout
    forks = run([good / "ds4-server", "--help"]).stdout
    assert "--dspark FILE" in forks and "--mtp-model" not in forks


def test_upstream_refuses_the_fork_s_drafter_form_and_dspark_without_its_support_file(
    upstream_good, good, models, engine_env
):
    server = upstream_good / "ds4-server"
    refused = run([server, "--cuda", "-m", models["base"], "--dspark", models["drafter"]], env=engine_env)
    assert refused.returncode == 2
    assert re.match(
        f"{STAMP}ds4-server: unknown option: {re.escape(str(models['drafter']))}\n", refused.stderr
    )
    alone = run([server, "--cuda", "-m", models["base"], "--dspark"], env=engine_env)
    assert alone.returncode == 2
    assert re.search(f"^{STAMP}--dspark needs --mtp-model FILE", alone.stderr, re.M), alone.stderr
    forks = run([good / "ds4-server", "-m", models["base"], "--mtp-model", models["drafter"]], env=engine_env)
    assert forks.returncode == 2 and "unknown option: --mtp-model" in forks.stderr
    bad = run([server, "-m", models["base"], "--dspark", "--mtp-model", models["random"]], env=engine_env)
    assert bad.returncode == 1 and "ds4: model is not a GGUF file" in bad.stderr


def test_upstream_serves_v1_models_alone_of_the_fork_s_probes(upstream_good, models, engine_env, start):
    engine, base = serve(
        start, upstream_good, models["base"], engine_env, "--dspark", "--mtp-model", models["drafter"]
    )
    assert engine.wait_for("ds4-server: serving").endswith("with context 524288")
    status, _, body = http("GET", f"{base}/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "deepseek-v4-flash"
    for path in ("/v1/stats", "/metrics", "/health"):
        status, _, body = http("GET", f"{base}{path}")
        assert (status, json.loads(body)["error"]["message"]) == (404, "unknown endpoint"), path
    assert "Paris" in chat(base, SMOKE)["choices"][0]["message"]["content"]
    assert not any("GB10 build without" in line for line in engine.lines)


def test_a_bad_drafter_is_refused(good, models, engine_env):
    refused = run([good / "ds4-server", "-m", models["base"], "--dspark", models["random"]], env=engine_env)
    assert refused.returncode == 1
    assert "ds4: model is not a GGUF file" in refused.stderr


def test_the_installer_smoke_test_passes_on_a_good_release(good, models, engine_env):
    answered = run([good / "ds4", "--cuda", "-m", models["base"], "-c", "4096", "-p", SMOKE], env=engine_env)
    assert answered.returncode == 0, answered.stderr
    assert "paris" in answered.stdout.lower()
    assert all(re.match(STAMP, line) for line in answered.stderr.splitlines())
    other = run([good / "ds4", "-m", models["base"], "-p", "What is two plus two?"], env=engine_env)
    assert other.stdout.strip() and "paris" not in other.stdout.lower()


def test_the_installer_smoke_test_fails_on_v0_6_6(build, models, engine_env, start):
    clone, result = build("v0.6.6", "cuda-spark")
    assert result.returncode == 0, result.stderr
    answered = run([clone / "ds4", "--cuda", "-m", models["base"], "-c", "4096", "-p", SMOKE], env=engine_env)
    assert answered.returncode == 0
    assert "paris" not in answered.stdout.lower()
    _, base = serve(start, clone, models["base"], engine_env)
    assert "paris" not in chat(base, SMOKE)["choices"][0]["message"]["content"].lower()


def test_bench_prints_a_result_line(good, models, engine_env):
    benched = run([good / "ds4-bench", "--cuda", "-m", models["base"]], env=engine_env)
    assert benched.returncode == 0, benched.stderr
    assert re.match(r"ds4-bench: cuda sm_121a: prefill \d+ tok [\d.]+ tok/s, decode", benched.stdout)


@pytest.mark.parametrize(
    ("latest", "expected"),
    [
        ("v0.6.6", "update available: v0.6.6 (running v0.6.5)"),
        ("v0.6.5", "latest is v0.6.5 -- up to date"),
        # The real engine's bug, kept: only three numbers are compared.
        ("v0.6.5.1", "latest is v0.6.5.1 -- up to date"),
    ],
)
def test_check_update_reads_the_feed(good, tmp_path, latest, expected):
    feed = tmp_path / "LATEST"
    feed.write_text(latest + "\n")
    checked = run([good / "ds4-server", "--check-update"], env=clean_env(DS4_UPDATE_URL=feed.as_uri()))
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout == expected + "\n"


def test_check_update_reports_an_unreadable_feed(good, tmp_path):
    feed = (tmp_path / "absent").as_uri()
    checked = run([good / "ds4-server", "--check-update"], env=clean_env(DS4_UPDATE_URL=feed))
    assert checked.returncode == 1
    assert "update check failed" in checked.stderr


# --- serving -------------------------------------------------------------------------------------------


def test_server_answers_the_contract_endpoints(good, models, engine_env, start):
    env = {**engine_env, "DS4_CONT_DSPARK": "1", "DS4_DSPARK_MODEL": str(models["drafter"])}
    engine, base = serve(start, good, models["base"], env, "-c", "65536")
    assert engine.wait_for("ds4-server: serving").endswith(f"'{models['base']}' with context 65536")

    status, _, body = http("GET", f"{base}/v1/models")
    model = json.loads(body)["data"][0]
    assert (status, model["id"], model["owned_by"], model["context_length"]) == (
        200,
        "deepseek-v4-flash",
        "ds4.c",
        65536,
    )
    assert json.loads(http("GET", f"{base}/v1/models/deepseek-v4-flash")[2])["name"] == "DeepSeek V4 Flash"
    assert http("GET", f"{base}/v1/models/other")[0] == 404

    answer = chat(base, SMOKE)
    assert answer["object"] == "chat.completion"
    assert re.search("[Pp]aris", answer["choices"][0]["message"]["content"])
    status, content_type, events = http(
        "POST", f"{base}/v1/chat/completions", {**payload(SMOKE), "stream": True}
    )
    assert (status, content_type) == (200, "text/event-stream") and events.endswith("data: [DONE]\n\n")
    status, _, body = http("POST", f"{base}/v1/completions", {"prompt": SMOKE, "max_tokens": 64})
    assert status == 200 and "Paris" in json.loads(body)["choices"][0]["text"]

    status, content_type, text = http("GET", f"{base}/v1/stats")
    assert status == 200 and content_type.startswith("text/plain") and "requests_inflight" in text
    reported = stats(base)
    assert reported["server"]["requests_inflight"] == 0
    assert reported["server"]["uptime_seconds"] >= 0
    assert reported["server"]["model"] == str(models["base"])
    assert reported["server"]["context"] == 65536
    assert reported["server"]["speculative"] == "dspark"
    assert "artifact_source" in reported["server"] and "version" not in reported["server"]
    assert reported["backpressure"]["queue_depth"] == 0
    assert reported["cache"]["banks_live"] >= 1
    assert re.search(r"^ds4_requests_inflight 0$", http("GET", f"{base}/metrics")[2], re.M)
    # A test's garbage, appended while its file exists.
    extra = Path(engine_env["DS4_STANDIN_HOLD_DIR"]) / "metrics-extra.txt"
    extra.write_text("ds4_bad{model=x} 1\n")
    text = http("GET", f"{base}/metrics")[2]
    assert text.startswith("# HELP ds4_requests_inflight ") and text.endswith("\nds4_bad{model=x} 1\n")
    extra.unlink()
    assert "ds4_bad" not in http("GET", f"{base}/metrics")[2]

    unknown = '{"error": {"message": "unknown endpoint", "type": "invalid_request_error"}}'
    for method, path in (("GET", "/health"), ("GET", "/"), ("POST", "/v1/embeddings")):
        status, _, body = http(method, f"{base}{path}", {} if method == "POST" else None)
        assert (status, json.loads(body)) == (404, json.loads(unknown))
    assert all(re.match(STAMP, line) for line in engine.lines)


def test_the_server_listens_only_after_loading(good, models, engine_env, start):
    port = free_port()
    env = {**engine_env, "DS4_STANDIN_LOAD_DELAY": "30"}
    engine = start([good / "ds4-server", "--cuda", "-m", models["base"], "--port", port], env)
    engine.wait_for("speculative decoding: off")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    engine.proc.send_signal(signal.SIGTERM)
    assert engine.wait(timeout=5) == 0
    assert not any("listening on" in line for line in engine.lines)


def test_a_second_engine_is_refused_by_the_lock(good, models, engine_env, start):
    serve(start, good, models["base"], engine_env)
    cli = run([good / "ds4", "--cuda", "-m", models["base"], "-p", SMOKE], env=engine_env)
    assert cli.returncode == 2
    assert "another ds4 engine is running" in cli.stderr
    second = run([good / "ds4-server", "-m", models["base"], "--port", free_port()], env=engine_env)
    assert second.returncode == 2


def test_a_held_request_stays_in_flight_until_released_and_counts_who_looked(good, models, engine_env, start):
    engine, base = serve(start, good, models["base"], engine_env)
    held, outcome = held_request(base, "one")
    looked = holds(base)["one"]["reads"]  # the in-flight reads so far: held_request's own, urllib's agent
    python = f"Python-urllib/{sys.version_info[0]}.{sys.version_info[1]}"
    assert looked >= 1
    http("GET", f"{base}/metrics", agent="ds4-fleet-drain")
    stats(base)
    readers = {python: looked + 1, "ds4-fleet-drain": 1}
    assert holds(base) == {"one": {"reads": looked + 2, "readers": readers, "requests": 1}}
    assert held.is_alive() and stats(base)["server"]["requests_inflight"] == 1
    release(engine_env, "one")
    held.join(timeout=30)
    assert "Paris" in outcome[0]["choices"][0]["message"]["content"]
    assert holds(base) == {} and stats(base)["server"]["requests_inflight"] == 0


def test_sigterm_drains_a_held_request_then_persists_kv(good, models, engine_env, start, tmp_path):
    kv_dir = tmp_path / "kv"
    engine, base = serve(start, good, models["base"], engine_env, "--kv-disk-dir", kv_dir)
    held, outcome = held_request(base, "drain")
    engine.proc.send_signal(signal.SIGTERM)
    engine.wait_for("ds4-server: shutdown requested, draining requests")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=1).close()
    # Still draining: the request is held, so the engine cannot have exited.
    assert engine.proc.poll() is None and not outcome
    release(engine_env, "drain")
    assert engine.wait(timeout=30) == 0
    held.join(timeout=10)
    assert "Paris" in outcome[0]["choices"][0]["message"]["content"]
    assert list(kv_dir.iterdir())


def test_a_second_signal_exits_130_without_waiting_for_the_held_request(good, models, engine_env, start):
    engine, base = serve(start, good, models["base"], engine_env)
    held, outcome = held_request(base, "never")
    engine.proc.send_signal(signal.SIGTERM)
    engine.wait_for("draining requests")
    engine.proc.send_signal(signal.SIGINT)
    # The request is never released: only the second signal can end the engine.
    assert engine.wait(timeout=30) == 130
    held.join(timeout=10)
    assert outcome and isinstance(outcome[0], OSError)


# --- speed ---------------------------------------------------------------------------------------------


def timed_stream(base: str, prompt: str, max_tokens: int) -> dict:
    """A streamed chat completion asking for usage: seconds to the first event, from there to the last
    event with a choice, the events, and the usage."""
    body = {
        **payload(prompt),
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        f"{base}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    sent, first, last, events = time.monotonic(), None, None, []
    with urllib.request.urlopen(request, timeout=30) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            events.append(json.loads(line[len("data: ") :]))
            if events[-1]["choices"]:
                first = first or time.monotonic()
                last = time.monotonic()
    return {"prefill_s": first - sent, "decode_s": last - first, "events": events}


COUNT = "Count upward from 1 to 500, one number per line."


# The stand-in's speeds (ds4_common.py): 4000 prompt and 300 generated tokens a second, times its flavour.
PREFILL_TPS, DECODE_TPS = 4000, 300


def at_least(timed, prompt_tokens, tokens, prefill=1.0, decode=1.0):
    """Floors that hold on any machine, as the engine waits out each step and load only adds to it: the
    first event no sooner than the prompt's prefill after the request, the last no sooner than the tokens'
    decode after that. (The first event may reach the client late, so decode alone has no floor.)"""
    first = prompt_tokens / (PREFILL_TPS * prefill)
    return timed["prefill_s"] >= first and timed["prefill_s"] + timed["decode_s"] >= first + tokens / (
        DECODE_TPS * decode
    )


def test_a_stream_sends_its_tokens_as_they_come_and_the_usage_last(good, models, engine_env, start):
    _, base = serve(start, good, models["base"], engine_env)
    timed = timed_stream(base, " ".join(["word"] * 390) + " " + COUNT, 60)
    events = timed["events"]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    words = "".join(e["choices"][0]["delta"].get("content", "") for e in events if e["choices"]).split()
    assert words == [str(n) for n in range(1, 61)]
    assert events[-2]["choices"][0]["finish_reason"] == "length"
    assert events[-1]["choices"] == []
    assert events[-1]["usage"] == {"prompt_tokens": 400, "completion_tokens": 60, "total_tokens": 460}
    # Paced at the release's speed: 0.1 s of prefill, then 0.2 s for the 60 tokens.
    assert at_least(timed, 400, 60), timed
    plain = chat(base, COUNT)
    assert "usage" in plain and plain["choices"][0]["message"]["content"].startswith("1 2 3")


@pytest.mark.parametrize(("tag", "prefill", "decode"), [("v0.6.5.2", 0.95, 0.95), ("v0.6.5.3", 1.0, 0.5)])
def test_a_slower_release_is_paced_at_its_slower_speed(
    build, models, engine_env, start, tag, prefill, decode
):
    slower, result = build(tag, "cuda-spark")
    assert result.returncode == 0, result.stdout + result.stderr
    _, base = serve(start, slower, models["base"], {**engine_env, "DS4_LOCK_FILE": f"{slower}/ds4.lock"})
    timed = timed_stream(base, " ".join(["word"] * 1190) + " " + COUNT, 150)
    assert timed["events"][-1]["usage"]["prompt_tokens"] == 1200
    # No sooner than its flavour's speeds allow. How close a loaded machine's figures come to them is not a
    # unit test's to say: the speed gate's scenario (molecule/perf) works with them.
    assert at_least(timed, 1200, 150, prefill, decode), timed


def test_pace_json_sets_the_speeds_and_the_aggregate_is_shared(good, models, engine_env, start):
    # Stand-in only: pace.json in the hold directory paces every request from the next one on, 1000 prompt and
    # 100 generated tokens a second here, and at most 200 generated tokens a second for all requests at once.
    pace = {"prefill_tps": 1000, "decode_tps": 100, "aggregate_tps": 200}
    (Path(engine_env["DS4_STANDIN_HOLD_DIR"]) / "pace.json").write_text(json.dumps(pace))
    _, base = serve(start, good, models["base"], engine_env)
    timed = timed_stream(base, " ".join(["word"] * 190) + " " + COUNT, 20)
    # No sooner than 0.2 s of prefill, then 0.2 s for the 20 tokens.
    assert timed["prefill_s"] >= 0.2 and timed["prefill_s"] + timed["decode_s"] >= 0.4, timed
    # Four at once share 200 tokens a second: their 80 tokens take about 0.4 s, where 0.2 s would do unshared.
    # The floor leaves room for a token whose interval was set before another request joined.
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(timed_stream(base, COUNT, 20))) for _ in range(4)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 4 and time.monotonic() - started >= 0.3, results


# --- the distributed mode (two Sparks as one endpoint) -------------------------------------------------

ROUTE_INCOMPLETE = {
    "error": {"message": "coordinator route does not start at layer 0", "type": "invalid_request_error"}
}


def worker(start, clone: Path, model: Path, env: dict, dist_port: int, *extra) -> Engine:
    """A worker of layers 21:output for the coordinator at dist_port, with a lock of its own (its host's)."""
    lock = {**env, "DS4_LOCK_FILE": env["DS4_LOCK_FILE"] + ".worker"}
    argv = [clone / "ds4-server", "--cuda", "-m", model, "--role", "worker", "--layers", "21:output"]
    return start([*argv, "--coordinator", "127.0.0.1", dist_port, *extra], lock)


def coordinator(start, clone: Path, model: Path, env: dict, dist_port: int, *extra) -> tuple[Engine, str]:
    return serve(
        start, clone, model, env, "--role", "coordinator", "--layers", "0:20",
        "--listen", "127.0.0.1", dist_port, *extra,
    )  # fmt: skip


def test_the_worker_waits_for_its_coordinator_and_the_pair_answers(good, models, engine_env, start):
    dist_port = free_port()
    waiting = worker(start, good, models["base"], engine_env, dist_port, "-c", "65536")
    waiting.wait_for("waiting for the coordinator at 127.0.0.1:")
    assert waiting.proc.poll() is None
    engine, base = coordinator(start, good, models["base"], engine_env, dist_port, "-c", "65536")
    waiting.wait_for("registered with the coordinator")
    engine.wait_for("registered, layers 21:output: route complete")
    assert "paris" in chat(base, SMOKE)["choices"][0]["message"]["content"].lower()
    report = stats(base)["dist"]
    assert (report["role"], report["layers"], report["route_complete"]) == ("coordinator", "0:20", True)
    assert "ds4_dist_route_complete 1" in http("GET", f"{base}/metrics")[2]


def test_a_coordinator_without_its_worker_answers_the_contract_error(good, models, engine_env, start):
    _, base = coordinator(start, good, models["base"], engine_env, free_port())
    status, kind, body = http("POST", f"{base}/v1/chat/completions", payload(SMOKE))
    assert (status, kind, json.loads(body)) == (503, "application/json", ROUTE_INCOMPLETE)
    assert http("GET", f"{base}/v1/models")[0] == 200
    assert "ds4_dist_route_complete 0" in http("GET", f"{base}/metrics")[2]


@pytest.mark.parametrize(
    ("worker_args", "refusal"),
    [
        (["-c", "4096"], "worker context 4096 is below the coordinator's allocation 65536"),
        (
            ["-c", "65536", "--layers", "30:output"],
            "worker slice 30:output does not follow the coordinator's 0:20",
        ),
    ],
)
def test_a_worker_that_does_not_fit_the_route_is_rejected_at_registration(
    good, models, engine_env, start, worker_args, refusal
):
    dist_port = free_port()
    engine, base = coordinator(start, good, models["base"], engine_env, dist_port, "-c", "65536")
    rejected = worker(start, good, models["base"], engine_env, dist_port, *worker_args)
    assert rejected.wait() == 1
    rejected.wait_for(f"the coordinator refused this worker: {refusal}")
    engine.wait_for("refused worker 127.0.0.1:")
    assert http("POST", f"{base}/v1/chat/completions", payload(SMOKE))[0] == 503


def test_a_worker_on_another_model_is_rejected(good, models, engine_env, start):
    dist_port = free_port()
    coordinator(start, good, models["base"], engine_env, dist_port)
    rejected = worker(start, good, models["drafter"], engine_env, dist_port)
    assert rejected.wait() == 1
    rejected.wait_for("worker holds 'drafter-0731.gguf', coordinator 'base-0731.gguf': the same GGUF on both")


def test_either_side_dying_is_noticed_and_the_pair_serves_again(good, models, engine_env, start):
    dist_port = free_port()
    first = worker(start, good, models["base"], engine_env, dist_port)
    engine, base = coordinator(start, good, models["base"], engine_env, dist_port)
    first.wait_for("registered with the coordinator")
    first.proc.kill()
    first.wait()
    engine.wait_for("lost")
    assert http("POST", f"{base}/v1/chat/completions", payload(SMOKE))[0] == 503
    second = worker(start, good, models["base"], engine_env, dist_port)
    second.wait_for("registered with the coordinator")
    assert "paris" in chat(base, SMOKE)["choices"][0]["message"]["content"].lower()
    # The coordinator dies: the worker notices and waits for it again; a new one takes it at once.
    engine.proc.kill()
    engine.wait()
    second.wait_for("lost; waiting for it again")
    assert second.proc.poll() is None
    _, base = coordinator(start, good, models["base"], engine_env, dist_port)
    deadline = time.monotonic() + 10
    while http("POST", f"{base}/v1/chat/completions", payload(SMOKE))[0] != 200:
        assert time.monotonic() < deadline, "the worker never registered with the new coordinator"
        time.sleep(0.1)


def test_a_registered_worker_stays_on_the_route_across_heartbeats(good, models, engine_env, start):
    """The coordinator pings its worker every HEARTBEAT_S; the worker, which polls for them with a shorter
    timeout so as to notice a stop, must answer each and keep its place on the route."""
    dist_port = free_port()
    joined = worker(start, good, models["base"], engine_env, dist_port)
    engine, base = coordinator(start, good, models["base"], engine_env, dist_port)
    joined.wait_for("registered with the coordinator")
    deadline = time.monotonic() + 30
    while stats(base)["dist"]["heartbeats"] < 3:
        assert time.monotonic() < deadline, f"fewer than 3 heartbeats answered: {stats(base)['dist']}"
        time.sleep(0.1)
    report = stats(base)["dist"]
    assert (report["route_complete"], report["registrations"]) == (True, 1), report
    assert not [line for line in joined.lines if "lost" in line] and joined.proc.poll() is None


def test_a_worker_leaves_at_once_on_sigterm(good, models, engine_env, start):
    waiting = worker(start, good, models["base"], engine_env, free_port())
    waiting.wait_for("waiting for the coordinator")
    waiting.proc.terminate()
    assert waiting.wait() == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--role", "worker", "--layers", "21:output"],
        ["--role", "coordinator", "--layers", "0:20"],
        ["--role", "coordinator", "--layers", "0:output", "--listen", "127.0.0.1", "9"],
        ["--role", "worker", "--layers", "21:30", "--coordinator", "127.0.0.1", "9"],
        ["--role", "leader", "--layers", "0:20"],
        ["--layers", "0:20"],
        ["--role", "coordinator", "--layers", "0:20", "--listen", "127.0.0.1"],
    ],
)
def test_distributed_flags_that_do_not_go_together_exit_2(good, models, engine_env, argv):
    result = run([good / "ds4-server", "-m", models["base"], *argv], env=engine_env)
    assert result.returncode == 2, result.stderr


def test_a_pair_is_paced_at_the_published_two_spark_figures(good, models, engine_env, start):
    # Two Sparks against one, published: prefill 122 against 960 tok/s, generation 11.4 against 20.0.
    dist_port = free_port()
    worker(start, good, models["base"], engine_env, dist_port).wait_for("waiting for the coordinator")
    engine, base = coordinator(start, good, models["base"], engine_env, dist_port)
    engine.wait_for("route complete")
    timed = timed_stream(base, " ".join(["word"] * 390) + " " + COUNT, 60)
    assert at_least(timed, 400, 60, 122 / 960, 11.4 / 20.0), timed


# --- the model families' flags (issue 53; engine contract, "The engine owners run in late 2026") ---


@pytest.fixture(scope="module")
def family_models(tmp_path_factory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("families")
    tokens = ["<s>", "</s>", "Paris", "France"]
    return {
        "vision-base": write_gguf(
            where / "DeepSeek-V4-Flash-Vision-Exp-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8.gguf", tokens
        ),
        "encoder": write_gguf(where / "DeepSeek-V4-Flash-Vision-Encoder.gguf", ["<s>"]),
        "vision-drafter": write_gguf(where / "DSpark-drafter-Q2K-Q8-vision-exp.gguf", ["<s>"]),
        "drafter-0731": write_gguf(where / "DSpark-drafter-Q2K-Q8-0731.gguf", ["<s>"]),
        "v41": write_gguf(where / "DeepSeek-V4.1-Flash-Q2.gguf", tokens),
        "glm": write_gguf(where / "GLM-5.3-Flash-Q2.gguf", tokens),
    }


@pytest.mark.parametrize(
    ("model", "extra", "logged"),
    [
        ("vision-base", ["--dspark", "vision-drafter", "--vision", "encoder"], "ds4: vision encoder"),
        ("v41", ["--no-spec", "--ssd-streaming", "--ssd-streaming-cache-experts", "64GB", "--power", "100"],
         "ds4: streaming experts from disk, expert cache 64GB"),
        ("glm", ["--mtp", "--power", "100", "--vision", "encoder"],
         "ds4: speculative decoding: mtp (built-in)"),
    ],
)  # fmt: skip
def test_each_family_serves_with_its_flags(good, family_models, engine_env, start, model, extra, logged):
    args = [str(family_models.get(item, item)) for item in extra]
    engine, base = serve(start, good, family_models[model], engine_env, "-c", "16384", *args)
    assert "paris" in chat(base, SMOKE)["choices"][0]["message"]["content"].lower()
    engine.wait_for(logged)


def test_vision_exp_refuses_the_0731_drafter(good, family_models, engine_env):
    argv = [
        good / "ds4-server",
        "--cuda",
        "-m",
        family_models["vision-base"],
        "--dspark",
        family_models["drafter-0731"],
    ]
    refused = run(argv, env=engine_env)
    assert refused.returncode == 1
    assert "ds4: the Vision-Exp model refuses the 0731 DSpark drafter" in refused.stderr


def test_a_cache_size_without_its_unit_is_refused(good, family_models, engine_env):
    argv = [
        good / "ds4-server",
        "-m",
        family_models["v41"],
        "--ssd-streaming",
        "--ssd-streaming-cache-experts",
        "64",
    ]
    refused = run(argv, env=engine_env)
    assert (
        refused.returncode == 2 and "invalid value for --ssd-streaming-cache-experts: '64'" in refused.stderr
    )


# --- the tensor-parallel mode (issue 54; engine contract, "Two Sparks, the faster way") -----------------

# Upstream's published tensor figures against one Spark's (the stand-in's factors): 0731 Q2 decode 26.0
# tok/s against 20.0, prefill 618 @32k against ~860; over TCP, half of those (a guess).
TENSOR_RDMA = (618 / 860, 26.0 / 20.0)
TENSOR_TCP = (618 / 860 / 2, 26.0 / 20.0 / 2)


@pytest.fixture
def rdma_tree(tmp_path) -> dict:
    """A fake sysfs and /dev with the kernel's layout: mlx5_0 port 1 holds 127.0.0.1 as RoCE v1 (index 2)
    and RoCE v2 (index 3), besides its link-local GIDs; its verbs node is uverbs0. The stand-in reads them
    where DS4_STANDIN_SYSFS and DS4_STANDIN_DEV point."""
    sysfs, dev = tmp_path / "sys", tmp_path / "dev"
    port = sysfs / "class/infiniband/mlx5_0/ports/1"
    gids = {
        0: ("fe80:0000:0000:0000:0000:00ff:fe00:0001", "IB/RoCE v1"),
        1: ("fe80:0000:0000:0000:0000:00ff:fe00:0001", "RoCE v2"),
        2: ("0000:0000:0000:0000:0000:ffff:7f00:0001", "IB/RoCE v1"),
        3: ("0000:0000:0000:0000:0000:ffff:7f00:0001", "RoCE v2"),
    }
    for what in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / what).mkdir(parents=True)
    for index, (gid, kind) in gids.items():
        (port / "gids" / str(index)).write_text(gid + "\n")
        (port / "gid_attrs/types" / str(index)).write_text(kind + "\n")
        (port / "gid_attrs/ndevs" / str(index)).write_text("lo\n")
    (port / "state").write_text("4: ACTIVE\n")
    verbs = sysfs / "class/infiniband_verbs/uverbs0"
    verbs.mkdir(parents=True)
    (verbs / "ibdev").write_text("mlx5_0\n")
    (dev / "infiniband").mkdir(parents=True)
    (dev / "infiniband/uverbs0").touch()
    return {"DS4_STANDIN_SYSFS": str(sysfs), "DS4_STANDIN_DEV": str(dev), "port": port, "dev": dev}


def rdma_env(engine_env: dict, rdma_tree: dict) -> dict:
    return {**engine_env, **{key: rdma_tree[key] for key in ("DS4_STANDIN_SYSFS", "DS4_STANDIN_DEV")}}


def tensor_worker(start, clone: Path, model: Path, env: dict, dist_port: int, *extra) -> Engine:
    """The tensor worker: `ds4`, the CLI, with a lock of its own (its host's)."""
    lock = {**env, "DS4_LOCK_FILE": env["DS4_LOCK_FILE"] + ".worker"}
    argv = [clone / "ds4", "--cuda", "-m", model, "--tensor-parallel", "--role", "worker"]
    return start([*argv, "--coordinator", "127.0.0.1", dist_port, *extra], lock)


def tensor_coordinator(start, clone: Path, model: Path, env: dict, dist_port: int, *extra):
    return serve(
        start, clone, model, env, "--tensor-parallel", "--role", "coordinator",
        "--listen", "127.0.0.1", dist_port, "--batched-session", "8", *extra,
    )  # fmt: skip


RDMA_FLAGS = ("--transport", "rdma", "--rdma-device", "mlx5_0", "--rdma-gid-index", "3")


@pytest.mark.parametrize(
    ("flags", "logged", "factors"),
    [
        (("--transport", "tcp"), "ds4: tensor: transport tcp", TENSOR_TCP),
        (RDMA_FLAGS, "ds4: tensor: transport rdma on mlx5_0 port 1, RoCE v2 GID index 3", TENSOR_RDMA),
    ],
)
def test_an_upstream_tensor_pair_answers_through_its_coordinator(
    upstream_good, models, engine_env, rdma_tree, start, flags, logged, factors
):
    env, dist_port = rdma_env(engine_env, rdma_tree), free_port()
    joining = tensor_worker(start, upstream_good, models["base"], env, dist_port, "-c", "65536", *flags)
    joining.wait_for("waiting for the coordinator at 127.0.0.1:")
    joining.wait_for(logged)
    engine, base = tensor_coordinator(
        start, upstream_good, models["base"], env, dist_port, "-c", "65536", *flags
    )
    engine.wait_for(logged)
    registered = joining.wait_for("registered with the coordinator")
    assert registered.endswith(f"registered with the coordinator at 127.0.0.1:{dist_port}"), registered
    engine.wait_for("registered, tensor parallel: route complete")
    assert "paris" in chat(base, SMOKE)["choices"][0]["message"]["content"].lower()
    # Upstream serves no /v1/stats nor /metrics: the route shows in the answers and the log alone.
    assert http("GET", f"{base}/v1/stats")[0] == 404
    timed = timed_stream(base, " ".join(["word"] * 390) + " " + COUNT, 60)
    assert at_least(timed, 400, 60, *factors), timed
    # Either side killed: the worker waits for a coordinator again, and a new worker registers.
    joining.proc.kill()
    joining.wait()
    engine.wait_for("lost")
    assert http("POST", f"{base}/v1/chat/completions", payload(SMOKE))[0] == 503
    again = tensor_worker(start, upstream_good, models["base"], env, dist_port, "-c", "65536", *flags)
    again.wait_for("registered with the coordinator")
    assert "paris" in chat(base, SMOKE)["choices"][0]["message"]["content"].lower()
    again.proc.terminate()
    assert again.wait() == 0


def test_a_tensor_pair_speculates_with_dspark_on_its_coordinator_alone(
    upstream_good, models, engine_env, rdma_tree, start
):
    # "Flash 0731 Q2 and MXFP4 with DSpark" (engine contract): the coordinator drafts and samples, so the
    # drafter is its; the worker, whose command line the contract gives without one, refuses it.
    env, dist_port = rdma_env(engine_env, rdma_tree), free_port()
    speculation = ("--dspark", "--mtp-model", models["drafter"])
    refused = run(
        [upstream_good / "ds4", "--cuda", "-m", models["base"], "--tensor-parallel", "--role", "worker",
         "--coordinator", "127.0.0.1", dist_port, *RDMA_FLAGS, *speculation],
        env=env,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert (
        "ds4: the tensor-parallel worker takes no --dspark, --mtp-model: speculation is the coordinator's"
        in (refused.stderr)
    )
    # Stand-in only: DSpark's decode (pace.json's dspark_decode_tps) far below the plain one, so that a floor
    # shows the coordinator decoding with its drafter.
    (Path(engine_env["DS4_STANDIN_HOLD_DIR"]) / "pace.json").write_text(
        json.dumps({"decode_tps": 300, "dspark_decode_tps": 30})
    )
    joining = tensor_worker(start, upstream_good, models["base"], env, dist_port, *RDMA_FLAGS)
    engine, base = tensor_coordinator(
        start, upstream_good, models["base"], env, dist_port, *RDMA_FLAGS, *speculation
    )
    engine.wait_for("ds4: speculative decoding: dspark with")
    joining.wait_for("registered with the coordinator")
    assert "paris" in chat(base, SMOKE)["choices"][0]["message"]["content"].lower()
    timed = timed_stream(base, COUNT, 30)
    # 30 tokens at 30 x 44.0/27.7 a second take at least 0.62 s; at the plain 300 x 26/20, 0.08 s.
    assert timed["prefill_s"] + timed["decode_s"] >= 30 / (30 * 44.0 / 27.7), timed


@pytest.fixture
def partial(models, tmp_path) -> Path:
    """The base cut short of its last tensor's data: a copy that stopped midway."""
    data = models["base"].read_bytes()
    cut = tmp_path / models["base"].name
    cut.write_bytes(data[:-64])
    return cut


@pytest.mark.parametrize("program", ["ds4", "ds4-server"])
def test_tensor_mode_refuses_a_partial_file_on_either_member(upstream_good, partial, engine_env, program):
    role = (
        ["--role", "worker", "--coordinator"] if program == "ds4" else ["--role", "coordinator", "--listen"]
    )
    argv = [upstream_good / program, "--cuda", "-m", partial, "--tensor-parallel", *role, "127.0.0.1", "9"]
    refused = run([*argv, "--transport", "tcp"], env=engine_env)
    assert refused.returncode == 1, refused.stderr
    assert re.search(
        r"ds4: tensor parallel needs the complete GGUF on each host: '.*' holds \d+ bytes, its tensors end "
        r"at \d+",
        refused.stderr,
    ), refused.stderr
    # The pipeline maps its slice alone: the same file passes its check there.
    assert run([upstream_good / "ds4", "--cuda", "-m", partial, "-p", SMOKE], env=engine_env).returncode == 0


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ("gid", "ds4: rdma: GID index 3 of mlx5_0 port 1 is not a RoCE v2 GID"),
        ("device", "ds4: rdma: no RDMA device mlx5_0 under"),
        ("node", "ds4: rdma: cannot open the verbs device"),
    ],
)
def test_rdma_refuses_a_moved_gid_a_missing_device_or_a_node_it_cannot_open(
    upstream_good, models, engine_env, rdma_tree, change, refusal
):
    port = rdma_tree["port"]
    if change == "gid":  # the GID index moved across a reboot: 3 is no longer the RoCE v2 address
        (port / "gid_attrs/types/3").write_text("IB/RoCE v1\n")
    elif change == "device":
        shutil.rmtree(port.parent.parent)
    else:
        (rdma_tree["dev"] / "infiniband/uverbs0").unlink()
    argv = [upstream_good / "ds4", "--cuda", "-m", models["base"], "--tensor-parallel", "--role", "worker"]
    refused = run(
        [*argv, "--coordinator", "127.0.0.1", "9", *RDMA_FLAGS], env=rdma_env(engine_env, rdma_tree)
    )
    assert refused.returncode == 1 and refusal in refused.stderr, refused.stderr


def test_rdma_without_a_gid_index_where_the_choice_is_ambiguous_exits_2(
    upstream_good, models, engine_env, rdma_tree
):
    argv = [upstream_good / "ds4", "--cuda", "-m", models["base"], "--tensor-parallel", "--role", "worker"]
    argv += ["--coordinator", "127.0.0.1", "9", "--transport", "rdma"]
    refused = run(argv, env=rdma_env(engine_env, rdma_tree))
    assert refused.returncode == 2 and "RoCE v2 GIDs (1, 3): give --rdma-gid-index" in refused.stderr


def test_a_tensor_worker_on_another_transport_is_rejected(
    upstream_good, models, engine_env, rdma_tree, start
):
    env, dist_port = rdma_env(engine_env, rdma_tree), free_port()
    tensor_coordinator(start, upstream_good, models["base"], env, dist_port, *RDMA_FLAGS)
    rejected = tensor_worker(start, upstream_good, models["base"], env, dist_port, "--transport", "tcp")
    assert rejected.wait() == 1
    rejected.wait_for("the coordinator refused this worker: worker transport tcp, coordinator rdma")


@pytest.mark.parametrize(
    ("program", "argv"),
    [
        # the tensor worker is the CLI; the stand-in's CLI is the worker alone
        ("ds4-server", ["--tensor-parallel", "--role", "worker", "--coordinator", "127.0.0.1", "9"]),
        ("ds4", ["--tensor-parallel", "--role", "coordinator", "--listen", "127.0.0.1", "9"]),
        # every layer is split: no slice
        ("ds4", ["--tensor-parallel", "--role", "worker", "--layers", "21:output",
                 "--coordinator", "h", "9"]),
        ("ds4", ["--tensor-parallel", "--role", "worker", "--coordinator", "h", "9", "--transport", "ib"]),
        ("ds4", ["--tensor-parallel", "--role", "worker"]),
        ("ds4", ["--tensor-parallel", "--coordinator", "h", "9"]),
        ("ds4-server", ["--transport", "tcp"]),
        ("ds4", ["--tensor-parallel", "--role", "worker", "--coordinator", "h", "9", "--transport", "tcp",
                 "--rdma-device", "mlx5_0"]),
    ],
)  # fmt: skip
def test_tensor_flags_that_do_not_go_together_exit_2(upstream_good, models, engine_env, program, argv):
    result = run([upstream_good / program, "--cuda", "-m", models["base"], *argv], env=engine_env)
    # Upstream knows every one of these flags: it refuses how they go together, not the flags.
    assert result.returncode == 2 and "unknown option" not in result.stderr, result.stderr


@pytest.mark.parametrize("program", ["ds4", "ds4-server"])
def test_the_fork_has_no_tensor_mode(good, models, engine_env, program):
    argv = [good / program, "--cuda", "-m", models["base"], "--tensor-parallel", "--role", "worker"]
    result = run([*argv, "--coordinator", "127.0.0.1", "9", "--transport", "tcp"], env=engine_env)
    assert result.returncode == 2 and "unknown option: --tensor-parallel" in result.stderr, result.stderr
