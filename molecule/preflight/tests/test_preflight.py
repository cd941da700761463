"""The preflight on sandbox Sparks of each GPU persona, as an operator would see it.

The refusals are the point, so each case is a nested `ansible-playbook` run of preflight.yml against one
host (molecule/shared/nested.py), whose exit status, refusal, warnings and recap, read back from its jsonl
events, are asserted exactly. The runs go at once, between two listings of every host's files, which must
be equal: the preflight changes nothing, refused, forced or in check mode.
"""

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from nested import play
from spark import container, sandbox_host

PLAYBOOK = Path(__file__).resolve().parents[1] / "preflight.yml"
# The role's task that judges the host, and the playbook's that shows the build it names.
JUDGE = "Refuse the host unless it can build and run the engine, and name the build for its GPU"
SHOW_BUILD = "Show the build the later roles will use"
HOSTS = ["spark01", "h200", "cuda12", "nogpu", "fulldisk"]
GIB = 1 << 30
WEIGHTS_BYTES = 67108864  # ds4_weights_space_bytes of the sandbox (inventory/sandbox/group_vars/all.yml)

H200 = (
    "GPU compute capability is 9.0 (NVIDIA H200); wanted one of 12.1 (ds4_accepted_compute_caps); "
    "set ds4_force: true to build for it anyway"
)
CUDA12 = (
    "CUDA version is 12.9 (/usr/local/cuda/bin/nvcc); wanted 13.x (ds4_cuda_major); "
    "set ds4_force: true to build with it anyway"
)
ARCH = (
    "CPU architecture is x86_64; wanted one of aarch64 (ds4_accepted_archs); "
    "set ds4_force: true to build for it anyway"
)
NO_GPU = (
    "GPU is absent (nvidia-smi not found); wanted an NVIDIA GPU, compute capability one of 12.1 "
    "(ds4_accepted_compute_caps); install the NVIDIA driver, or set ds4_force: true and ds4_cuda_arch "
    "to build without one"
)
NO_NVCC = (
    "CUDA compiler nvcc is absent (not in /usr/local/cuda/bin nor on PATH); wanted nvcc of CUDA 13.x "
    "(ds4_cuda_major); install the CUDA 13 toolkit, or set ds4_cuda_home to the folder it is in "
    "(ds4_force does not skip this check)"
)
SPARK_BUILD = {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
H200_BUILD = {"arch": "sm_90", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_90"]}
ONLY_AARCH64 = {"ds4_accepted_archs": ["aarch64"]}
FORCE = {"ds4_force": True}

# id: host, extra vars, extra arguments
RUNS = {
    "h200": ("h200", {}, []),
    "cuda12": ("cuda12", {}, []),
    "arch": ("spark01", ONLY_AARCH64, []),
    "nogpu": ("nogpu", {}, []),
    "fulldisk": ("fulldisk", {}, []),
    "h200 forced": ("h200", FORCE, []),
    "cuda12 forced": ("cuda12", FORCE, []),
    "arch forced": ("spark01", {**ONLY_AARCH64, **FORCE}, []),
    "nogpu forced": ("nogpu", FORCE, []),
    "fulldisk forced": ("fulldisk", FORCE, []),
    "spark01 in check mode": ("spark01", {}, ["--check"]),
}
# Only Ansible's own temporary folder, the kernel's and logs' trees, and the sandbox image's own cache of the
# modules' compiled code (tests/sandbox/zip_bytecode_cache.py, not on a real Spark) may differ after the runs.
SKIPPED = [
    "/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp", "/var/log", "/root/.ansible",
    "/var/cache/ds4-sandbox-zip-bytecode",
]  # fmt: skip
LISTING = (
    "find / \\( "
    + " -o ".join(f"-path {p}" for p in SKIPPED)
    + " \\) -prune -o \\( -type d -printf '%y %m %p\\n' \\) -o \\( -printf '%y %m %s %T@ %p\\n' \\)"
)


def nested_run(host, extra_vars, args):
    """preflight.yml against HOST alone, with the repository's ansible.cfg: a nested.Run."""
    return play(PLAYBOOK, "-l", host, "-e", json.dumps(extra_vars), *args)


def listing(name):
    return sandbox_host(name).check_output(LISTING)


@pytest.fixture(scope="module")
def runs():
    """Every case at once, between a listing of every host's files before and after."""
    with ThreadPoolExecutor(max_workers=6) as pool:
        before = dict(zip(HOSTS, pool.map(listing, HOSTS), strict=True))
        futures = {case: pool.submit(nested_run, *spec) for case, spec in RUNS.items()}
        done = {case: future.result() for case, future in futures.items()}
        after = dict(zip(HOSTS, pool.map(listing, HOSTS), strict=True))
    return {"runs": done, "before": before, "after": after}


def disk_refusal():
    """The refusal for the fulldisk host, from what its weights filesystem (a 16 MiB tmpfs) has free."""
    free = int(
        sandbox_host("fulldisk").check_output(
            "python3 -c 'import os; s = os.statvfs(\"/var/lib/ds4\"); print(s.f_bavail * s.f_frsize)'"
        )
    )
    assert free == 16 * 1024 * 1024

    def describe(count):
        return f"{count:,} bytes ({count / GIB:.2f} GiB)"

    return (
        f"Free space on the filesystem of ds4_gguf_dir /var/lib/ds4/gguf (checked at /var/lib/ds4) is "
        f"{describe(free)}; wanted {describe(WEIGHTS_BYTES)} for the weights (ds4_weights_space_bytes); "
        f"short by {describe(WEIGHTS_BYTES - free)}; free space there or move ds4_gguf_dir to a larger "
        "filesystem (ds4_force does not skip this check)"
    )


REFUSED = {
    "h200": [H200],
    "cuda12": [CUDA12],
    "arch": [ARCH],
    "nogpu": [NO_GPU, NO_NVCC],
    "fulldisk": None,  # from the host's own free space
    "nogpu forced": [NO_GPU, NO_NVCC],
    "fulldisk forced": None,
}


@pytest.mark.parametrize("case", REFUSED)
def test_refused_with_its_message(runs, case):
    run = runs["runs"][case]
    host = RUNS[case][0]
    assert run.rc != 0, run
    expected = REFUSED[case] or [disk_refusal()]
    # The one refusal, by the preflight's judgement of the host, and no forced warning where force changes
    # nothing.
    assert [(failure.host, failure.name) for failure in run.failures()] == [(host, JUDGE)], run
    failure = run.result(JUDGE, host)
    assert failure.msg == "; ".join(expected), run
    assert failure.data["preflight"]["errors"] == expected
    assert run.warnings() == []
    # The facts were read, the judgement failed, nothing changed (ok counts argument checks too).
    assert (run.changed(host), run.failed(host), run.unreachable(host)) == (0, 1, 0), run


FORCED = {
    "h200 forced": (H200, H200_BUILD),
    "cuda12 forced": (CUDA12, SPARK_BUILD),
    "arch forced": (ARCH, SPARK_BUILD),
}


@pytest.mark.parametrize("case", FORCED)
def test_force_passes_the_hardware_cases_with_a_warning(runs, case):
    run = runs["runs"][case]
    host = RUNS[case][0]
    refusal, build = FORCED[case]
    assert run.rc == 0, run
    assert run.warnings() == [refusal.rsplit("; ", 1)[0] + "; going on because ds4_force is true"]
    assert run.result(SHOW_BUILD, host).data["ansible_facts.ds4_build_target"] == build
    assert run.changed(host) == 0


def test_check_mode_passes_and_names_the_spark_build(runs):
    run = runs["runs"]["spark01 in check mode"]
    assert run.rc == 0, run
    assert run.warnings() == []
    assert run.result(SHOW_BUILD, "spark01").data["ansible_facts.ds4_build_target"] == SPARK_BUILD
    assert run.changed("spark01") == 0 and run.failed("spark01") == 0


def test_nothing_on_the_host_changed(host, runs):
    name = host.backend.get_hostname().removeprefix(container(""))
    assert runs["before"][name] == runs["after"][name]
    assert not host.file("/opt/ds4").exists
    assert not host.file("/var/lib/ds4/gguf").exists
    assert host.run("systemctl list-unit-files 'ds4*' --no-legend").stdout.strip() == ""
