"""Host facts gathered (module_utils/_host/facts.py): disks, systemd, the weights already there, every
fact at once over what real tools printed; then the module itself, run by Ansible, bare and over the GPU
stand-ins. Each concern's own parsers are tested beside: test_ds4_gpu_facts.py, test_ds4_git_checkout.py,
test_ds4_processes.py."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._host.facts import (
    HostFactsError,
    disk_free,
    find_gguf_files,
    find_weight_files,
    gather_host_facts,
    parse_systemd_version,
)
from ansible_collections.ds4.fleet.plugins.module_utils._host.gpu import parse_meminfo_total
from fake_proc import fake_proc, fake_ss

REPO = Path(__file__).resolve().parents[5]
FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
H200 = FIXTURES / "h200"
GB10 = FIXTURES / "gb10"
STANDIN_INSTALL = REPO / "tests" / "standins" / "gpu" / "install.py"
MIB = 1024 * 1024
GB10_MEMTOTAL = 128501256192  # leptonai/gpud#1170: the sysinfo total of a real GB10


def text(folder, name):
    return (folder / f"{name}.stdout").read_text()


def test_disk_free_walks_up_to_an_existing_folder(tmp_path):
    facts = disk_free(str(tmp_path / "not" / "yet"))
    stats = os.statvfs(tmp_path)
    assert facts["checked_path"] == str(tmp_path)
    assert facts["free_bytes"] == stats.f_bavail * stats.f_frsize
    assert facts["device"] == os.stat(tmp_path).st_dev


def test_systemd_version():
    assert parse_systemd_version("systemd 252 (252.38-1~deb12u1)\n+PAM +AUDIT\n") == 252
    # The H200 machine (a container) has no systemctl: its capture is empty.
    assert parse_systemd_version(text(H200, "systemctl_version")) is None


def test_gguf_files(tmp_path):
    (tmp_path / "DSpark-drafter-Q2K-Q8-0731.gguf").write_bytes(b"x" * 10)
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deeper.gguf").write_text("")
    assert find_gguf_files(str(tmp_path)) == [
        {
            "name": "DSpark-drafter-Q2K-Q8-0731.gguf",
            "path": str(tmp_path / "DSpark-drafter-Q2K-Q8-0731.gguf"),
            "size": 10,
        }
    ]
    assert find_gguf_files(str(tmp_path / "absent")) == []


def test_weight_files_finished_and_partial(tmp_path):
    (tmp_path / "DSpark-drafter-Q2K-Q8-0731.gguf").write_bytes(b"x" * 10)
    (tmp_path / "DSpark-drafter-Q2K-Q8-0731.gguf.part").write_bytes(b"x" * 3)
    (tmp_path / ".DSpark-drafter-Q2K-Q8-0731.gguf.verified.json").write_text("{}")
    (tmp_path / "folder.gguf").mkdir()
    assert find_weight_files(str(tmp_path)) == [
        {"name": "DSpark-drafter-Q2K-Q8-0731.gguf", "size": 10},
        {"name": "DSpark-drafter-Q2K-Q8-0731.gguf.part", "size": 3},
    ]
    assert find_weight_files(str(tmp_path / "absent")) == []


def fake_runner(folder, nvidia_smi_rc=0, nvidia_smi_out=None):
    calls = []

    def run(argv):
        calls.append(argv)
        if argv[0].endswith("nvidia-smi"):
            return (
                nvidia_smi_rc,
                nvidia_smi_out if nvidia_smi_out is not None else text(folder, "smi_facts_query"),
                "",
            )
        if argv[0].endswith("nvcc"):
            return 0, text(folder, "nvcc_version"), ""
        if argv[0].endswith("/ss"):
            return fake_ss(argv)
        return 0, "systemd 255 (255.4-1ubuntu8)\n", ""

    return run, calls


def find_all(name, opt_dirs):
    return os.path.join(opt_dirs[0] if opt_dirs else "/usr/bin", name)


def gather(tmp_path, run, find_bin=find_all):
    return gather_host_facts(
        run,
        find_bin,
        home=str(tmp_path / "home"),
        gguf_dir=str(tmp_path / "gguf"),
        install_root=str(tmp_path / "opt" / "ds4"),
        port=8000,
        cuda_home=str(tmp_path / "cuda"),
        proc_root=str(fake_proc(tmp_path)),
    )


def test_gather_on_a_gb10(tmp_path):
    run, calls = fake_runner(GB10)
    facts = gather(tmp_path, run)
    assert sorted(facts) == [
        "arch",
        "cuda",
        "disk",
        "gpu",
        "memory",
        "port",
        "shell_install",
        "systemd",
        "warnings",
    ]
    assert calls[0] == [
        "/usr/bin/nvidia-smi",
        "--query-gpu=index,name,compute_cap,driver_version,memory.total",
        "--format=csv,noheader,nounits",
    ]
    assert (facts["gpu"]["compute_cap"], facts["gpu"]["memory_bytes"], facts["gpu"]["memory_unified"]) == (
        "12.1",
        GB10_MEMTOTAL,
        True,
    )
    assert (facts["cuda"]["version"], facts["cuda"]["nvcc_path"]) == (
        "13.0",
        str(tmp_path / "cuda" / "bin" / "nvcc"),
    )
    assert facts["memory"] == {"total_bytes": GB10_MEMTOTAL}
    assert facts["systemd"] == {"present": True, "version": 255}
    assert facts["disk"]["same_filesystem"] is True
    assert [s["pid"] for s in facts["shell_install"]["servers"]] == [100]
    assert facts["port"]["pid"] == 100 and facts["warnings"] == []


def test_gather_names_the_filesystem_that_holds_the_gguf_dir(tmp_path):
    # A streamed family is refused from a network filesystem (issue 53): the facts say which one holds it.
    proc = fake_proc(tmp_path)
    (proc / "self").mkdir()
    (proc / "self" / "mountinfo").write_text(
        "27 1 259:2 / / rw - ext4 /dev/nvme0n1p2 rw\n"
        f"31 27 0:50 / {tmp_path} rw - nfs4 nas:/gguf rw,vers=4.2\n"
    )
    run, _ = fake_runner(GB10)
    facts = gather_host_facts(
        run, find_all, home=str(tmp_path / "home"), gguf_dir=str(tmp_path / "gguf"),
        install_root=str(tmp_path / "opt" / "ds4"), port=8000, cuda_home=str(tmp_path / "cuda"),
        proc_root=str(proc),
    )  # fmt: skip
    assert facts["disk"]["gguf_dir"]["mount"] == {
        "mount_point": str(tmp_path),
        "fstype": "nfs4",
        "source": "nas:/gguf",
        "device": "0:50",
        # No block device: the kernel's /sys says nothing of a disk.
        "rotational": None,
    }
    # A local disk that spins, as the kernel's /sys says (a fake one here).
    (proc / "self" / "mountinfo").write_text(f"27 1 8:17 / {tmp_path} rw - ext4 /dev/sdb1 rw\n")
    sys = tmp_path / "sys"
    (sys / "devices" / "sdb" / "queue").mkdir(parents=True)
    (sys / "devices" / "sdb" / "queue" / "rotational").write_text("1\n")
    (sys / "devices" / "sdb" / "sdb1").mkdir()
    (sys / "devices" / "sdb" / "sdb1" / "partition").write_text("1\n")
    (sys / "dev" / "block").mkdir(parents=True)
    (sys / "dev" / "block" / "8:17").symlink_to(sys / "devices" / "sdb" / "sdb1")
    facts = gather_host_facts(
        run, find_all, home=str(tmp_path / "home"), gguf_dir=str(tmp_path / "gguf"),
        install_root=str(tmp_path / "opt" / "ds4"), port=8000, cuda_home=str(tmp_path / "cuda"),
        proc_root=str(proc), sys_root=str(sys),
    )  # fmt: skip
    assert facts["disk"]["gguf_dir"]["mount"]["rotational"] is True
    # Without a mount table the preflight can only warn.
    (tmp_path / "bare").mkdir()
    assert gather(tmp_path / "bare", run)["disk"]["gguf_dir"]["mount"] is None


def test_gather_on_the_h200(tmp_path):
    run, _ = fake_runner(H200)
    facts = gather(tmp_path, run)
    assert (facts["gpu"]["name"], facts["gpu"]["compute_cap"], facts["cuda"]["version"]) == (
        "NVIDIA H200",
        "9.0",
        "13.0",
    )
    assert facts["gpu"]["memory_unified"] is False


def test_gather_without_tools(tmp_path):
    run, calls = fake_runner(GB10)
    facts = gather(tmp_path, run, find_bin=lambda name, opt_dirs: None)
    assert calls == []
    assert (facts["gpu"]["present"], facts["gpu"]["error"]) == (False, "nvidia-smi not found")
    assert facts["cuda"]["present"] is False and facts["systemd"] == {"present": False, "version": None}


def test_gather_refuses_garbled_nvidia_smi(tmp_path):
    run, _ = fake_runner(GB10, nvidia_smi_out="NVIDIA GB10 is having a bad day\n")
    with pytest.raises(HostFactsError, match="bad day"):
        gather(tmp_path, run)


def run_module(args, path_prefix=None):
    """Run the module through `ansible localhost` as an operator would; return ds4_host_facts.
    Ad-hoc output is `localhost | SUCCESS => {...}`, in JSON with ansible-core's own callback."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    if path_prefix:
        env["PATH"] = f"{path_prefix}{os.pathsep}{env['PATH']}"
    # The ansible beside this Python (the project's venv), else the one on PATH.
    ansible = shutil.which("ansible", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    result = subprocess.run(
        [ansible, "localhost", "-m", "ds4.fleet.ds4_host_facts", "-a", args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    status, _, body = result.stdout.partition(" => ")
    assert status == "localhost | SUCCESS", result.stdout
    host = json.loads(body)
    assert host["changed"] is False
    return host["ansible_facts"]["ds4_host_facts"]


def shape(value):
    """Keys all the way down (a list counts as one value: the real run's lists were mostly empty)."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    return None


def test_module_as_run_on_the_real_h200(tmp_path):
    # `ansible localhost -m ds4.fleet.ds4_host_facts -a gguf_dir=/tmp/x` on the H200 machine, real tools.
    real = json.loads((H200 / "ds4_host_facts.json").read_text())
    assert (real["gpu"]["name"], real["gpu"]["compute_cap"], real["gpu"]["memory_unified"]) == (
        "NVIDIA H200",
        "9.0",
        False,
    )
    assert (real["cuda"]["version"], real["cuda"]["source"], real["cuda"]["version_json_path"]) == (
        "13.0",
        "nvcc",
        None,
    )
    run, _ = fake_runner(H200)
    gathered = gather(tmp_path, run)
    # Added after the capture: the weights already in ds4_gguf_dir (none in /tmp/x there).
    assert gathered["disk"]["gguf_dir"].pop("files") == []
    # And the filesystem that holds it (issue 53): the fake /proc has no mount table.
    assert gathered["disk"]["gguf_dir"].pop("mount") is None
    assert shape(gathered) == shape(real)


def test_module_on_this_machine():
    facts = run_module("gguf_dir=/tmp/x")
    assert facts["gpu"]["present"] is (shutil.which("nvidia-smi") is not None)
    assert facts["disk"]["gguf_dir"]["path"] == "/tmp/x"
    assert facts["memory"]["total_bytes"] == parse_meminfo_total(Path("/proc/meminfo").read_text())


def install_standins(root, persona):
    subprocess.run(
        [sys.executable, str(STANDIN_INSTALL), "--root", str(root), "--persona", persona], check=True
    )


def test_module_over_the_gb10_standins(tmp_path):
    root, home = tmp_path / "root", tmp_path / "home"
    install_standins(root, "gb10")
    (home / "gguf").mkdir(parents=True)
    (home / "gguf" / "DSpark-drafter-Q2K-Q8-0731.gguf").write_bytes(b"x" * 42)
    # The installer's clone, at a commit git names.
    clone = home / "code" / "ds4"
    clone.mkdir(parents=True)
    git = [shutil.which("git"), "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "installed"], check=True)
    commit = subprocess.check_output([*git, "rev-parse", "HEAD"], text=True).strip()
    facts = run_module(
        f"gguf_dir={tmp_path}/gguf home={home} cuda_home={root}/usr/local/cuda port=1",
        path_prefix=root / "usr" / "bin",
    )
    gpu, cuda = facts["gpu"], facts["cuda"]
    assert (gpu["name"], gpu["compute_cap"], gpu["driver_version"]) == ("NVIDIA GB10", "12.1", "580.95.05")
    assert gpu["nvidia_smi"] == str(root / "usr" / "bin" / "nvidia-smi")
    assert (gpu["memory_unified"], gpu["memory_source"]) == (True, "meminfo")
    assert gpu["memory_bytes"] == facts["memory"]["total_bytes"] > 0
    assert (cuda["version"], cuda["source"], cuda["nvcc_version"], cuda["version_json_version"]) == (
        "13.0",
        "nvcc",
        "13.0.88",
        "13.0.2",
    )
    shell = facts["shell_install"]
    assert [(f["name"], f["size"]) for f in shell["gguf_files"]] == [("DSpark-drafter-Q2K-Q8-0731.gguf", 42)]
    assert (shell["clone"]["present"], shell["clone"]["commit"]) == (True, commit)


def test_module_over_the_h200_and_no_gpu_standins(tmp_path):
    root = tmp_path / "root"
    install_standins(root, "h200")
    args = f"gguf_dir={tmp_path}/gguf home={tmp_path} cuda_home={root}/usr/local/cuda"
    facts = run_module(args, path_prefix=root / "usr" / "bin")
    assert (facts["gpu"]["compute_cap"], facts["gpu"]["memory_bytes"], facts["cuda"]["version"]) == (
        "9.0",
        143771 * MIB,
        "13.0",
    )
    if shutil.which("nvidia-smi") is None:
        install_standins(root, "none")
        facts = run_module(args, path_prefix=root / "usr" / "bin")
        assert (facts["gpu"]["present"], facts["gpu"]["error"]) == (False, "nvidia-smi not found")
