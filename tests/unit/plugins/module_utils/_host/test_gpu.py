"""GPU and CUDA facts over what real tools printed: a real H200 (captured), DGX Spark units (public
reports), missing tools and garbled output (module_utils/_host/gpu.py)."""

from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._host.gpu import (
    HostFactsError,
    cuda_facts,
    gpu_facts,
    parse_cuda_version_json,
    parse_gpu_query,
    parse_meminfo_total,
    parse_nvcc_version,
    spark_memory,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"
H200 = FIXTURES / "h200"
GB10 = FIXTURES / "gb10"
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


def test_the_spark_memory_is_the_setting_else_the_meminfo_total():
    gb10 = "MemTotal:       125489508 kB\nMemFree:         7789944 kB\n"
    assert spark_memory("spark01", None, gb10) == (128501256192, None)
    assert spark_memory("spark01", 4 * 1024**3, None) == (4 * 1024**3, None)


@pytest.mark.parametrize(
    "meminfo, why",
    [
        (None, "could not be read"),
        ("", "could not be read"),
        ("MemTotal: 12 MB\n", "no 'MemTotal: N kB' line"),
    ],
)
def test_a_meminfo_without_a_total_names_the_setting(meminfo, why):
    memory, problem = spark_memory("spark01", None, meminfo)
    assert memory is None
    assert problem.startswith(
        "ds4_spark_memory_bytes is not set, so spark01's memory is read from /proc/meminfo"
    )
    assert why in problem and problem.endswith(
        "set ds4_spark_memory_bytes to the memory the Spark has for the engine, in bytes"
    )
