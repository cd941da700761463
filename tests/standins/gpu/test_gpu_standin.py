"""The GPU stand-ins print what the real tools print: the H200 persona byte for byte against the
capture from a real H200, the GB10 persona against public reports of real Sparks."""

import json
import os
import re
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent.parent / "unit" / "fixtures"
H200 = FIXTURES / "h200"
GB10 = FIXTURES / "gb10"
CAPTURES = json.loads((H200 / "commands.json").read_text())
# The summary's clock line and the help text are not imitated byte for byte (see test_h200_summary_table).
NOT_BYTE_FOR_BYTE = {"smi_full", "smi_help_query_gpu"}
SMI_CAPTURES = sorted(
    n for n, c in CAPTURES.items() if c["argv"][0] == "nvidia-smi" and n not in NOT_BYTE_FOR_BYTE
)
CLOCK_LINE = re.compile(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}       ")


def install(root, persona):
    subprocess.run(
        [sys.executable, str(HERE / "install.py"), "--root", str(root), "--persona", persona],
        check=True,
        capture_output=True,
    )


def run(root, tool, *args):
    path = {
        "nvidia-smi": "usr/bin/nvidia-smi",
        "nvidia-modprobe": "usr/bin/nvidia-modprobe",
        "nvcc": "usr/local/cuda/bin/nvcc",
        "cuobjdump": "usr/local/cuda/bin/cuobjdump",
    }[tool]
    env = dict(os.environ, LC_ALL="C", DS4_STANDIN_DEV_DIR=str(root / "dev"))
    return subprocess.run([str(root / path), *args], capture_output=True, env=env)


def fixture(folder, name, suffix=".stdout"):
    return (folder / (name + suffix)).read_bytes()


@pytest.fixture
def root(tmp_path):
    return tmp_path / "root"


@pytest.fixture
def h200(root):
    install(root, "h200")
    return root


@pytest.mark.parametrize("name", SMI_CAPTURES)
def test_h200_matches_the_real_capture(h200, name):
    result = run(h200, "nvidia-smi", *CAPTURES[name]["argv"][1:])
    assert result.stdout == fixture(H200, name)
    assert result.stderr == fixture(H200, name, ".stderr")
    assert result.returncode == int(fixture(H200, name, ".rc"))


def test_h200_every_field_header_and_value(h200):
    real = json.loads((H200 / "smi_fields.json").read_text())
    # Each field was read at its own moment: values that moved between aliases (power, clocks) or with
    # the clock (timestamp) cannot be compared, their headers can.
    by_header = {}
    for field in real.values():
        by_header.setdefault(field["header"], set()).add(field["value"])
    # One query of every field at once (no value holds ", ", so the columns split cleanly).
    result = run(h200, "nvidia-smi", "--query-gpu=" + ",".join(real), "--format=csv")
    headers, values = (line.split(", ") for line in result.stdout.decode().splitlines())
    assert len(headers) == len(values) == len(real)
    for (name, field), header, value in zip(real.items(), headers, values, strict=True):
        assert header == field["header"], name
        if name != "timestamp" and len(by_header[field["header"]]) == 1:
            assert value == field["value"], name


def test_h200_summary_table(h200):
    real = fixture(H200, "smi_full").decode()
    result = run(h200, "nvidia-smi").stdout.decode()
    assert CLOCK_LINE.fullmatch(real.splitlines()[0])
    assert CLOCK_LINE.fullmatch(result.splitlines()[0])
    assert result.split("\n", 1)[1] == real.split("\n", 1)[1]


def test_h200_nvcc_and_no_version_json(h200):
    result = run(h200, "nvcc", "--version")
    assert result.stdout == fixture(H200, "nvcc_version")
    assert result.returncode == 0
    # The real H200 machine has no version.json (see cuda_version_json.rc): neither has the persona.
    assert int(fixture(H200, "cuda_version_json", ".rc")) == 1
    assert not (h200 / "usr/local/cuda/version.json").exists()


@pytest.mark.parametrize(
    "name, args",
    [
        ("smi_memory_query_nounits", ["--query-gpu=index,name,memory.total,memory.used,memory.free",
                                      "--format=csv,noheader,nounits"]),
        ("smi_memory_query", ["--query-gpu=index,name,memory.total,memory.free", "--format=csv"]),
        ("smi_query_header", ["--query-gpu=name,compute_cap,driver_version,memory.total", "--format=csv"]),
        ("smi_facts_query", ["--query-gpu=index,name,compute_cap,driver_version,memory.total",
                             "--format=csv,noheader,nounits"]),
        ("smi_list", ["-L"]),
    ],
)  # fmt: skip
def test_gb10_matches_public_reports(root, name, args):
    install(root, "gb10")
    result = run(root, "nvidia-smi", *args)
    assert result.stdout == fixture(GB10, name)
    assert result.returncode == 0


def test_gb10_summary_says_memory_not_supported(root):
    install(root, "gb10")
    result = run(root, "nvidia-smi").stdout.decode()
    real = fixture(GB10, "smi_full").decode()
    assert result.split("\n", 1)[1] == real.split("\n", 1)[1]
    assert "| Not Supported          |" in result


def test_gb10_installer_query_and_toolkit(root):
    install(root, "gb10")
    out = run(root, "nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader").stdout
    assert out == b"NVIDIA GB10, 12.1\n"
    assert run(root, "nvcc", "--version").stdout == fixture(GB10, "nvcc_version")
    version = json.loads((root / "usr/local/cuda/version.json").read_text())
    assert version["cuda"] == {"name": "CUDA SDK", "version": "13.0.2"}
    assert (
        (root / "usr/local/cuda/version.json")
        .read_text()
        .startswith('{\n   "cuda" : {\n      "name" : "CUDA SDK",\n')
    )


HEALTH = (
    "--query-gpu=index,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.max.sm,"
    "clocks_event_reasons.active,clocks_event_reasons.hw_thermal_slowdown,"
    "clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.sw_power_cap,"
    "clocks_event_reasons.hw_power_brake_slowdown"
)


def test_gb10_reports_its_health_and_a_throttled_gpu_when_told(root):
    install(root, "gb10")
    out = run(root, "nvidia-smi", HEALTH, "--format=csv,noheader,nounits").stdout
    idle = b"0, 40, 11.70, [N/A], 208, 2418, 0x0000000000000001, "
    assert out == idle + b"Not Active, Not Active, Not Active, Not Active\n"
    (root / "etc/ds4-standin/gpu-throttle").write_text("hw_thermal_slowdown\nsw_power_cap\n")
    out = run(root, "nvidia-smi", HEALTH, "--format=csv,noheader,nounits").stdout
    hot = b"0, 96, 11.70, [N/A], 1209, 2418, 0x000000000000004C, "
    assert out == hot + b"Active, Not Active, Active, Not Active\n"
    (root / "etc/ds4-standin/gpu-throttle").write_text("overclocked\n")
    result = run(root, "nvidia-smi", HEALTH, "--format=csv")
    assert result.returncode == 1 and b"unknown reasons: overclocked" in result.stderr
    install(root, "none")
    assert not (root / "etc/ds4-standin").exists()


def test_the_compute_processes_are_none_until_the_stand_in_is_told_of_some(root):
    install(root, "gb10")
    apps = "--query-compute-apps=pid,process_name,used_memory"
    assert run(root, "nvidia-smi", apps, "--format=csv,noheader,nounits").stdout == b""
    (root / "etc/ds4-standin/gpu-apps").write_text("4242 python3 2048\n")
    assert run(root, "nvidia-smi", apps, "--format=csv,noheader,nounits").stdout == b"4242, python3, 2048\n"
    assert run(root, "nvidia-smi", apps, "--format=csv").stdout == (
        b"pid, process_name, used_gpu_memory [MiB]\n4242, python3, 2048 MiB\n"
    )
    result = run(root, "nvidia-smi", "--query-compute-apps=pid,bogus", "--format=csv")
    assert result.returncode == 2 and b'Field "bogus" is not a valid field to query.' in result.stdout
    install(root, "none")
    assert not (root / "etc/ds4-standin").exists()


def test_h200_health_reads_as_the_real_one_did(h200):
    # As the real H200 printed it (2026-12-02, driver 580.159.04), but for its temperature and power.
    out = run(h200, "nvidia-smi", HEALTH, "--format=csv,noheader,nounits").stdout.decode()
    assert re.fullmatch(
        r"0, \d+, \d+\.\d\d, 700\.00, 345, 1980, 0x0000000000000001, Not Active, Not Active, Not Active, "
        r"Not Active\n",
        out,
    ), out


def test_invalid_field_is_refused_as_the_real_tool_does(root):
    install(root, "gb10")
    result = run(root, "nvidia-smi", "--query-gpu=name,bogus_field", "--format=csv")
    assert result.stdout == fixture(H200, "smi_invalid_field")
    assert result.returncode == 2


def test_other_personas(root):
    install(root, "rtx-pro-6000")
    out = run(
        root, "nvidia-smi", "--query-gpu=name,compute_cap,memory.total", "--format=csv,noheader,nounits"
    )
    assert out.stdout == b"NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 12.0, 97887\n"
    install(root, "gb10-cuda12")
    assert b"release 12.9, V12.9.86" in run(root, "nvcc", "--version").stdout
    assert json.loads((root / "usr/local/cuda/version.json").read_text())["cuda"]["version"].startswith(
        "12.9."
    )
    assert run(root, "nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader").stdout == b"12.1\n"


def test_switching_and_none_leave_nothing_behind(root):
    install(root, "gb10")
    install(root, "h200")
    assert not (root / "usr/local/cuda/version.json").exists()
    assert b"NVIDIA H200" in run(root, "nvidia-smi", "-L").stdout
    install(root, "none")
    left = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    assert left == ["etc", "usr", "usr/bin", "usr/local"]


def test_nvcc_refuses_to_compile(root):
    install(root, "gb10")
    result = run(root, "nvcc")
    assert result.returncode == 1
    assert (
        result.stderr == b"nvcc fatal   : No input files specified; use option --help for more information\n"
    )
    assert run(root, "nvcc", "-o", "x", "x.cu").returncode == 1


def test_installer_never_overwrites_a_real_tool(root):
    real = root / "usr/local/cuda/bin/nvcc"
    real.parent.mkdir(parents=True)
    real.write_bytes(b"\x7fELF a real compiler")
    result = subprocess.run(
        [sys.executable, str(HERE / "install.py"), "--root", str(root), "--persona", "gb10"],
        capture_output=True,
    )
    assert result.returncode != 0
    assert b"not a ds4 stand-in" in result.stderr
    assert real.read_bytes() == b"\x7fELF a real compiler"
    assert not (root / "usr/bin/nvidia-smi").exists()


def program(path, fatbin):
    """A program as the stand-in engine's link.py makes it: a zipapp carrying what nvcc would embed."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("__main__.py", "print('a stand-in engine program')\n")
        if fatbin is not None:
            archive.writestr(".nv_fatbin.json", json.dumps(fatbin))
    return path


def test_cuobjdump_lists_the_cubins_and_ptx_the_linker_recorded(root, tmp_path):
    install(root, "gb10")
    server = program(tmp_path / "ds4-server", {"elf": ["sm_121"], "ptx": ["sm_121"]})
    listed = run(root, "cuobjdump", "--list-elf", str(server))
    assert (listed.returncode, listed.stdout, listed.stderr) == (
        0,
        b"ELF file    1: ds4_cuda.sm_121.cubin\n",
        b"",
    )
    assert run(root, "cuobjdump", "-lptx", str(server)).stdout == b"PTX file    1: ds4_cuda.sm_121.ptx\n"
    several = program(tmp_path / "ds4", {"elf": ["sm_90", "sm_121"], "ptx": []})
    assert run(root, "cuobjdump", "--list-elf", str(several)).stdout == (
        b"ELF file    1: ds4_cuda.sm_90.cubin\nELF file    2: ds4_cuda.sm_121.cubin\n"
    )


def test_cuobjdump_on_files_without_gpu_code_and_its_refusals(root, tmp_path):
    install(root, "gb10")
    plain = program(tmp_path / "plain", None)
    result = run(root, "cuobjdump", "--list-elf", str(plain))
    assert (result.returncode, result.stdout) == (255, b"")
    assert result.stderr == f"cuobjdump info    : File '{plain}' does not contain device code\n".encode()
    missing = run(root, "cuobjdump", "--list-elf", str(tmp_path / "missing"))
    assert missing.returncode == 1 and b"Could not open input file" in missing.stderr
    assert run(root, "cuobjdump", "--bogus", str(plain)).returncode == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="making device nodes needs root (CAP_MKNOD)")
def test_nvidia_modprobe_makes_the_driver_device_nodes(root):
    install(root, "gb10")
    (root / "dev").mkdir()
    assert run(root, "nvidia-modprobe", "-c=0").returncode == 0
    assert sorted(p.name for p in (root / "dev").iterdir()) == ["nvidia0", "nvidiactl"]
    assert run(root, "nvidia-modprobe", "-u", "-c=0").returncode == 0
    nodes = {p.name: p.stat() for p in (root / "dev").iterdir()}
    assert sorted(nodes) == ["nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidiactl"]
    assert all(stat.S_ISCHR(node.st_mode) and stat.S_IMODE(node.st_mode) == 0o666 for node in nodes.values())
    assert (os.major(nodes["nvidia0"].st_rdev), os.minor(nodes["nvidia0"].st_rdev)) == (195, 0)
    assert (os.major(nodes["nvidiactl"].st_rdev), os.minor(nodes["nvidiactl"].st_rdev)) == (195, 255)
    # Again: the nodes are there, nothing changes.
    assert run(root, "nvidia-modprobe", "-u", "-c=0").returncode == 0
    refused = run(root, "nvidia-modprobe", "--frobnicate")
    assert refused.returncode == 1 and b"unrecognized option" in refused.stderr


def test_none_removes_the_toolkit_tools_too(root):
    install(root, "gb10")
    assert (root / "usr/local/cuda/bin/cuobjdump").exists() and (root / "usr/bin/nvidia-modprobe").exists()
    install(root, "none")
    assert (
        not (root / "usr/local/cuda/bin/cuobjdump").exists()
        and not (root / "usr/bin/nvidia-modprobe").exists()
    )
