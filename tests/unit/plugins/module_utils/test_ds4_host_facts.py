"""Host facts over what real tools printed: a real H200 (captured), DGX Spark units (public reports),
missing tools and garbled output; then the module itself, run by Ansible, bare and over the GPU stand-ins."""

import json
import os
import shutil
import socket
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_host_facts import (
    HostFactsError,
    cuda_facts,
    disk_free,
    find_gguf_files,
    find_stray_servers,
    find_weight_files,
    gather_host_facts,
    gpu_facts,
    parse_cuda_version_json,
    parse_gpu_query,
    parse_meminfo_total,
    parse_nvcc_version,
    parse_systemd_version,
    port_holder,
    read_git_clone,
)

REPO = Path(__file__).resolve().parents[4]
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
H200 = FIXTURES / "h200"
GB10 = FIXTURES / "gb10"
STANDIN_INSTALL = REPO / "tests" / "standins" / "gpu" / "install.py"
MIB = 1024 * 1024
GB10_MEMTOTAL = 128501256192  # leptonai/gpud#1170: the sysinfo total of a real GB10

# The real layout of a toolkit's version.json (runfile installs; the H200 machine had none).
VERSION_JSON_13 = """{
   "cuda" : {
      "name" : "CUDA SDK",
      "version" : "13.0.2"
   },
   "cuda_nvcc" : {
      "name" : "CUDA NVCC",
      "version" : "13.0.88"
   }
}
"""
NVCC_12_9 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.9, V12.9.86\n"


def text(folder, name):
    return (folder / f"{name}.stdout").read_text()


def test_h200_query_as_captured():
    assert parse_gpu_query(text(H200, "smi_facts_query")) == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "compute_cap": "9.0",
            "compute_cap_major": 9,
            "compute_cap_minor": 0,
            "driver_version": "580.159.04",
            "memory_total_mib": 143771,
        }
    ]


def test_gb10_reports_no_memory():
    (device,) = parse_gpu_query(text(GB10, "smi_facts_query"))
    assert (device["name"], device["compute_cap"], device["memory_total_mib"]) == (
        "NVIDIA GB10",
        "12.1",
        None,
    )


@pytest.mark.parametrize("memory", ["[N/A]", "N/A", "Not Supported", "[Not Supported]"])
def test_memory_not_reported_in_any_wording(memory):
    (device,) = parse_gpu_query(f"0, NVIDIA GB10, 12.1, 580.95.05, {memory}\n")
    assert device["memory_total_mib"] is None


def test_units_names_with_commas_and_several_gpus():
    devices = parse_gpu_query(
        "0, NVIDIA H200, 9.0, 580.159.04, 143771 MiB\n\n1, Odd, Name, 12.0, 580.95.05, 97887\n"
    )
    assert [(d["index"], d["name"], d["memory_total_mib"]) for d in devices] == [
        (0, "NVIDIA H200", 143771),
        (1, "Odd, Name", 97887),
    ]
    assert parse_gpu_query("") == []


@pytest.mark.parametrize(
    "line, says",
    [
        ("No devices were found", "line 1 is not 'index, name"),
        ("NVIDIA H200, 9.0, 580.159.04, 143771", "line 1 is not 'index, name"),
        ("0, NVIDIA H200, nine, 580.159.04, 143771", "compute capability 'nine'"),
        ("0, NVIDIA H200, 9.0, 580.159.04, lots", "memory value 'lots'"),
    ],
)
def test_garbled_lines_are_named(line, says):
    with pytest.raises(HostFactsError, match=says) as caught:
        parse_gpu_query(line + "\n")
    assert line in str(caught.value)


def test_nvcc_version_real_and_12_9():
    assert parse_nvcc_version(text(H200, "nvcc_version")) == {
        "version": "13.0",
        "major": 13,
        "minor": 0,
        "build": "13.0.88",
    }
    assert parse_nvcc_version(NVCC_12_9)["version"] == "12.9"
    with pytest.raises(HostFactsError, match="no 'release X.Y"):
        parse_nvcc_version("nvcc: command not understood\n")


def test_version_json():
    assert parse_cuda_version_json(VERSION_JSON_13) == {
        "version": "13.0",
        "major": 13,
        "minor": 0,
        "full": "13.0.2",
    }
    for garbled in ("{", '{"cuda": {}}', '{"cuda": {"version": "thirteen"}}', "[]"):
        with pytest.raises(HostFactsError):
            parse_cuda_version_json(garbled)


def test_cuda_from_nvcc_when_no_version_json_as_on_the_h200():
    facts, warnings = cuda_facts(
        "/usr/local/cuda/bin/nvcc", text(H200, "nvcc_version"), "/usr/local/cuda/version.json", None
    )
    assert facts == {
        "present": True,
        "version": "13.0",
        "major": 13,
        "minor": 0,
        "source": "nvcc",
        "nvcc_path": "/usr/local/cuda/bin/nvcc",
        "nvcc_version": "13.0.88",
        "version_json_path": None,
        "version_json_version": None,
    }
    assert warnings == []


def test_cuda_from_version_json_without_nvcc_and_from_neither():
    facts, _ = cuda_facts(None, None, "/usr/local/cuda/version.json", VERSION_JSON_13)
    assert (facts["present"], facts["version"], facts["source"], facts["nvcc_path"]) == (
        True,
        "13.0",
        "version.json",
        None,
    )
    assert facts["version_json_version"] == "13.0.2"
    facts, warnings = cuda_facts(None, None, "/usr/local/cuda/version.json", None)
    assert (facts["present"], facts["version"], facts["major"], facts["source"]) == (False, None, None, None)
    assert warnings == []


def test_cuda_disagreement_and_garbled_version_json_are_warnings():
    facts, warnings = cuda_facts("/x/nvcc", NVCC_12_9, "/x/version.json", VERSION_JSON_13)
    assert facts["version"] == "12.9"
    assert warnings == ["nvcc (/x/nvcc) is CUDA 12.9 but /x/version.json says 13.0.2; the facts follow nvcc"]
    facts, warnings = cuda_facts("/x/nvcc", NVCC_12_9, "/x/version.json", "{garbled")
    assert facts["version"] == "12.9" and "/x/version.json" in warnings[0]


def test_meminfo():
    assert parse_meminfo_total(text(H200, "meminfo_head")) == 131981020 * 1024
    assert parse_meminfo_total(text(GB10, "meminfo_head")) == GB10_MEMTOTAL
    with pytest.raises(HostFactsError):
        parse_meminfo_total("MemFree: 1 kB\n")


def test_gb10_gpu_memory_is_the_hosts_flagged_unified():
    facts = gpu_facts("/usr/bin/nvidia-smi", 0, text(GB10, "smi_facts_query"), "", GB10_MEMTOTAL)
    assert facts["present"] and facts["name"] == "NVIDIA GB10" and facts["compute_cap"] == "12.1"
    assert (facts["memory_bytes"], facts["memory_unified"], facts["memory_source"]) == (
        GB10_MEMTOTAL,
        True,
        "meminfo",
    )
    assert facts["devices"][0]["memory_total_mib"] is None


def test_h200_gpu_memory_is_its_own():
    facts = gpu_facts("/usr/bin/nvidia-smi", 0, text(H200, "smi_facts_query"), "", 131981020 * 1024)
    assert (facts["compute_cap"], facts["driver_version"]) == ("9.0", "580.159.04")
    assert (facts["memory_bytes"], facts["memory_unified"], facts["memory_source"]) == (
        143771 * MIB,
        False,
        "nvidia-smi",
    )


def test_missing_tool_failing_driver_and_no_gpu_are_facts():
    assert gpu_facts(None, None, "", "", 1)["error"] == "nvidia-smi not found"
    failed = gpu_facts("/usr/bin/nvidia-smi", 6, "No devices were found\n", "", 1)
    assert not failed["present"] and failed["error"] == "nvidia-smi exited 6: No devices were found"
    assert gpu_facts("/usr/bin/nvidia-smi", 0, "\n", "", 1)["error"] == "nvidia-smi listed no GPU"


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


def write_loose_object(git_dir, sha, kind, body):
    path = git_dir / "objects" / sha[:2] / sha[2:]
    path.parent.mkdir(parents=True)
    path.write_bytes(zlib.compress(f"{kind} {len(body)}\0".encode() + body))


def test_clone_head_and_tags_without_git(tmp_path):
    commit, tag_object = "d92d93ad" + "0" * 32, "7" * 40
    git_dir = tmp_path / "ds4" / ".git"
    (git_dir / "refs" / "tags").mkdir(parents=True)
    # A shallow clone of a tag: HEAD detached, tags packed (annotated ones peeled) or loose.
    (git_dir / "HEAD").write_text(commit + "\n")
    (git_dir / "packed-refs").write_text(
        f"# pack-refs with: peeled fully-peeled sorted\n{tag_object} refs/tags/v0.6.3\n^{commit}\n"
        f"{'1' * 40} refs/tags/v0.5.6\n"
    )
    (git_dir / "refs" / "tags" / "v0.6.3.1").write_text("2" * 40 + "\n")
    write_loose_object(git_dir, "2" * 40, "tag", f"object {commit}\ntype commit\ntag v0.6.3.1\n".encode())
    (git_dir / "refs" / "tags" / "light").write_text(commit + "\n")
    facts = read_git_clone(str(tmp_path / "ds4"))
    assert facts == {
        "path": str(tmp_path / "ds4"),
        "present": True,
        "commit": commit,
        "ref": None,
        "tags": ["light", "v0.6.3", "v0.6.3.1"],
    }
    assert read_git_clone(str(tmp_path / "absent"))["present"] is False


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_clone_read_as_git_reads_it(tmp_path):
    def git(*args):
        return subprocess.run(
            ["git", "-C", str(tmp_path / "ds4"), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    subprocess.run(["git", "init", "-q", "-b", "main", str(tmp_path / "ds4")], check=True)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first")
    git("-c", "user.name=t", "-c", "user.email=t@t", "tag", "-a", "v0.6.5", "-m", "release")
    facts = read_git_clone(str(tmp_path / "ds4"))
    assert (facts["commit"], facts["ref"], facts["tags"]) == (
        git("rev-parse", "HEAD"),
        "refs/heads/main",
        ["v0.6.5"],
    )
    git("pack-refs", "--all")
    assert read_git_clone(str(tmp_path / "ds4"))["tags"] == ["v0.6.5"]


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


def fake_process(proc, pid, comm, cmdline, cgroup, sockets=()):
    folder = proc / str(pid)
    (folder / "fd").mkdir(parents=True)
    (folder / "comm").write_text(comm + "\n")
    (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline) + b"\0")
    (folder / "cgroup").write_text(cgroup + "\n")
    for number, inode in enumerate(sockets, 3):
        os.symlink(f"socket:[{inode}]", folder / "fd" / str(number))


TCP_HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
)


def fake_proc(tmp_path):
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(
        TCP_HEADER
        + "   0: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000  0 5429 1 0"
        + " 100 0 0 10 0\n"
        + "   1: 0100007F:B6DC 0100007F:1FA3 06 00000000:00000000 03:00000D18 00000000     0  0 0 3 0\n"
    )
    (proc / "net" / "tcp6").write_text(
        TCP_HEADER
        + "   0: 00000000000000000000000000000000:1F41 00000000000000000000000000000000:0000 0A"
        + " 00000000:00000000 00:00000000 00000000     0        0 7777 1 0 100 0 0 10 0\n"
    )
    (proc / "meminfo").write_text(text(GB10, "meminfo_head"))
    fake_process(proc, 100, "ds4-server", ["/home/nvidia/code/ds4/ds4-server", "--cuda", "--port", "8000"],
                 "0::/user.slice/user-1000.slice/session-2.scope", sockets=[5429])  # fmt: skip
    fake_process(proc, 200, "ds4-server", ["/opt/ds4/current/ds4-server"], "0::/system.slice/ds4.service")
    fake_process(proc, 300, "bash", ["-bash"], "0::/user.slice")
    return proc


def test_stray_servers_are_those_outside_the_unit(tmp_path):
    assert find_stray_servers(str(fake_proc(tmp_path))) == [
        {
            "pid": 100,
            "cmdline": ["/home/nvidia/code/ds4/ds4-server", "--cuda", "--port", "8000"],
            "cgroup": "0::/user.slice/user-1000.slice/session-2.scope",
        }
    ]


def test_port_holder_from_proc_net_tcp(tmp_path):
    proc = str(fake_proc(tmp_path))
    assert port_holder(8000, proc) == {
        "number": 8000,
        "in_use": True,
        "pid": 100,
        "comm": "ds4-server",
        "cmdline": ["/home/nvidia/code/ds4/ds4-server", "--cuda", "--port", "8000"],
        "in_service": False,
    }
    # Listening over IPv6 with an owner this reader cannot see: in use, holder unknown.
    hidden = port_holder(8001, proc)
    assert (hidden["in_use"], hidden["pid"]) == (True, None)
    assert port_holder(8002, proc)["in_use"] is False


def test_port_holder_on_this_machine():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        facts = port_holder(listener.getsockname()[1])
    assert (facts["in_use"], facts["pid"]) == (True, os.getpid())


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
    (home / "code" / "ds4" / ".git").mkdir(parents=True)
    (home / "code" / "ds4" / ".git" / "HEAD").write_text("d92d93ad" + "0" * 32 + "\n")
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
    assert shell["clone"]["commit"] == "d92d93ad" + "0" * 32


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
