"""The preflight on sandbox Sparks of each GPU persona, as an operator would see it.

The refusals are the point, so each case is a nested `ansible-playbook` run of preflight.yml against one
host, whose return code, printed refusal (`fatal: ... => {json}`), [WARNING] lines and recap are asserted
exactly. The runs go at once, between two listings of every host's files, which must be equal: the
preflight changes nothing, refused, forced or in check mode.
"""

import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import testinfra

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = Path(__file__).resolve().parents[1] / "preflight.yml"
PREFIX = "mol-preflight-"
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
# Only Ansible's own temporary folder and the kernel's and logs' trees may differ after the runs.
SKIPPED = ["/proc", "/sys", "/dev", "/run", "/tmp", "/var/tmp", "/var/log", "/root/.ansible"]
LISTING = (
    "find / \\( "
    + " -o ".join(f"-path {p}" for p in SKIPPED)
    + " \\) -prune -o \\( -type d -printf '%y %m %p\\n' \\) -o \\( -printf '%y %m %s %T@ %p\\n' \\)"
)


class Run:
    """One nested ansible-playbook run against one host: what the operator saw."""

    def __init__(self, host, proc):
        self.host, self.rc, self.stdout, self.stderr = host, proc.returncode, proc.stdout, proc.stderr

    def result(self, prefix):
        """The JSON printed after `PREFIX => ` (the result format is json, one line)."""
        lines = [line for line in self.stdout.splitlines() if line.startswith(prefix + " => ")]
        assert len(lines) == 1, self.output()
        return json.loads(lines[0].split(" => ", 1)[1])

    def failure(self):
        return self.result(f"fatal: [{self.host}]: FAILED!")

    def build_target(self):
        return self.result(f"ok: [{self.host}]")["ansible_facts.ds4_build_target"]

    def warnings(self):
        mark = "[WARNING]: "
        return [line[len(mark) :] for line in self.stderr.splitlines() if line.startswith(mark)]

    def recap(self):
        match = re.search(rf"^{self.host}\s+: (.*)$", self.stdout, re.MULTILINE)
        assert match, self.output()
        return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", match.group(1))}

    def output(self):
        return f"rc={self.rc}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


def nested_run(host, extra_vars, args):
    inventory = os.environ.get("MOLECULE_INVENTORY_FILE")
    assert inventory, "MOLECULE_INVENTORY_FILE is unset: run these tests through `molecule verify`"
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        ANSIBLE_ROLES_PATH=str(REPO / "roles"),
        # One line of JSON per result, so the tests read exactly what the operator reads.
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
        ANSIBLE_CALLBACK_FORMAT_PRETTY="false",
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
    )
    argv = ["ansible-playbook", "-i", inventory, str(PLAYBOOK), "-l", host, "-e", json.dumps(extra_vars)]
    argv += args
    proc = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=1800)
    return Run(host, proc)


def listing(name):
    return testinfra.get_host(f"podman://{PREFIX}{name}").check_output(LISTING)


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
        testinfra.get_host(f"podman://{PREFIX}fulldisk").check_output(
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
    assert run.rc != 0, run.output()
    expected = REFUSED[case] or [disk_refusal()]
    failure = run.failure()
    assert failure["msg"] == "; ".join(expected), run.output()
    assert failure["preflight"]["errors"] == expected
    # The one refusal printed, and no forced warning where force changes nothing.
    assert f"[ERROR]: Task failed: Module failed: {expected[0]}" in run.stdout
    assert run.warnings() == []
    # The facts were read, the judgement failed, nothing changed (ok counts argument checks too).
    recap = run.recap()
    assert (recap["changed"], recap["failed"], recap["unreachable"]) == (0, 1, 0), run.output()


FORCED = {
    "h200 forced": (H200, H200_BUILD),
    "cuda12 forced": (CUDA12, SPARK_BUILD),
    "arch forced": (ARCH, SPARK_BUILD),
}


@pytest.mark.parametrize("case", FORCED)
def test_force_passes_the_hardware_cases_with_a_warning(runs, case):
    run = runs["runs"][case]
    refusal, build = FORCED[case]
    assert run.rc == 0, run.output()
    assert run.warnings() == [refusal.rsplit("; ", 1)[0] + "; going on because ds4_force is true"]
    assert run.build_target() == build
    assert run.recap()["changed"] == 0


def test_check_mode_passes_and_names_the_spark_build(runs):
    run = runs["runs"]["spark01 in check mode"]
    assert run.rc == 0, run.output()
    assert run.warnings() == []
    assert run.build_target() == SPARK_BUILD
    assert run.recap()["changed"] == 0 and run.recap()["failed"] == 0


def test_nothing_on_the_host_changed(host, runs):
    name = host.backend.name.removeprefix(PREFIX)
    assert runs["before"][name] == runs["after"][name]
    assert not host.file("/opt/ds4").exists
    assert not host.file("/var/lib/ds4/gguf").exists
    assert host.run("systemctl list-unit-files 'ds4*' --no-legend").stdout.strip() == ""
