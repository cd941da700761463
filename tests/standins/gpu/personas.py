"""The machines the GPU stand-ins can play, and where each one's output comes from.

A persona is what install.py writes to ROOT/etc/ds4-standin/gpu.json: the field table of the driver
(every name `--query-gpu` accepts and the header it prints), the GPUs' field values, the summary table,
and the nvcc version report; plus the toolkit's version.json where that machine has one.

Sources:
- h200: read off a real H200 (driver 580.159.04, CUDA 13.0) by capture_real.py; byte for byte.
- gb10: public reports of real DGX Spark units.
  * csv memory fields print `[N/A]`, with or without `nounits`:
    https://github.com/marimo-team/marimo/pull/6822 (`0, NVIDIA GB10, [N/A], [N/A], [N/A]`, driver 580.95.05)
    https://github.com/unslothai/unsloth/pull/10703 (`index, name, memory.total [MiB], memory.free [MiB]` /
    `0, NVIDIA GB10, [N/A], [N/A]`)
  * the summary table, `Not Supported` under Memory-Usage, bus 0000000F:01:00.0:
    https://github.com/NVIDIA/k8s-device-plugin/issues/1482 (driver 580.95.05, CUDA 13.0),
    https://github.com/snowflakedb/ArcticTraining/pull/345 (driver 580.126.09), and NVIDIA's own
    https://docs.nvidia.com/dgx/dgx-spark/known-issues.html#nvidia-smi-reports-memory-usage-not-supported
  * the UUID and the 128,501,256,192 B the host reports as total memory:
    https://github.com/leptonai/gpud/pull/1170
  * nvcc: public probes of Spark units print `release 13.0, V13.0.88`, the compiler read on the H200,
    whose full report is used. Public notes place V13.0.88 in the CUDA 13.0.2 runfile
    (cuda_13.0.2_580.95.05_linux.run), hence version.json's 13.0.2 beside driver 580.95.05.
- gb10-cuda12: the same Spark with a CUDA 12.9.1 toolkit; nvcc's report as public logs print it
  (`Built on Tue_May_27_02:21:03_PDT_2025`, `V12.9.86`, `compiler.36037853_0`), version.json's SDK
  version `12.9.20250531` as a public build script checks it.
- rtx-pro-6000: name and compute capability as public `--query-gpu=name,compute_cap` output prints them;
  memory 97887 MiB. Its summary table is COMPOSED in the 580 layout (long names end in `...`), not read.
Fields no source shows for a persona print `[N/A]`: a guess, and a visible one.
"""

import json
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"

NVCC_13_0 = (
    "nvcc: NVIDIA (R) Cuda compiler driver\n"
    "Copyright (c) 2005-2025 NVIDIA Corporation\n"
    "Built on Wed_Aug_20_01:58:59_PM_PDT_2025\n"
    "Cuda compilation tools, release 13.0, V13.0.88\n"
    "Build cuda_13.0.r13.0/compiler.36424714_0\n"
)
NVCC_12_9 = (
    "nvcc: NVIDIA (R) Cuda compiler driver\n"
    "Copyright (c) 2005-2025 NVIDIA Corporation\n"
    "Built on Tue_May_27_02:21:03_PDT_2025\n"
    "Cuda compilation tools, release 12.9, V12.9.86\n"
    "Build cuda_12.9.r12.9/compiler.36037853_0\n"
)

# version.json components, sorted as the real file is. The SDK and NVCC versions match the nvcc
# reports above; the other components' numbers are those of the same release's packages.
VERSION_JSON_13_0 = {
    "cuda": ("CUDA SDK", "13.0.2"),
    "cuda_cccl": ("CUDA C++ Core Compute Libraries", "13.0.85"),
    "cuda_crt": ("CUDA crt Compiler for CUDA applications", "13.0.88"),
    "cuda_cudart": ("CUDA Runtime (cudart)", "13.0.96"),
    "cuda_cupti": ("CUPTI", "13.0.85"),
    "cuda_cuxxfilt": ("CUDA cu++ filt", "13.0.85"),
    "cuda_nvcc": ("CUDA NVCC", "13.0.88"),
    "cuda_nvvm": ("CUDA NVVM", "13.0.88"),
    "nvidia_driver": ("NVIDIA Linux Driver", "580.95.05"),
}
VERSION_JSON_12_9 = {
    "cuda": ("CUDA SDK", "12.9.20250531"),
    "cuda_cccl": ("CUDA C++ Core Compute Libraries", "12.9.27"),
    "cuda_cudart": ("CUDA Runtime (cudart)", "12.9.79"),
    "cuda_cupti": ("CUPTI", "12.9.79"),
    "cuda_cuxxfilt": ("CUDA cu++ filt", "12.9.82"),
    "cuda_nvcc": ("CUDA NVCC", "12.9.86"),
    "nvidia_driver": ("NVIDIA Linux Driver", "575.57.08"),
}

GB10_VALUES = {
    "index": "0",
    "count": "1",
    "name": "NVIDIA GB10",
    "uuid": "GPU-2dee1e25-b3b5-007e-2b55-79f2d0f2ebe5",
    "pci.bus_id": "0000000F:01:00.0",
    "pci.domain": "0x000F",
    "pci.bus": "0x01",
    "pci.device": "0x00",
    "compute_cap": "12.1",
    "driver_version": "580.95.05",
    "memory.total": "[N/A]",
    "memory.used": "[N/A]",
    "memory.free": "[N/A]",
    "memory.reserved": "[N/A]",
    "persistence_mode": "Enabled",
    "pstate": "P8",
    "temperature.gpu": "40",
    "utilization.gpu": "0 %",
    "compute_mode": "Default",
    "fan.speed": "[N/A]",
    # GPU health, as the watchdog reads it. Power draw and the SM clock are reported (public DCGM and
    # llama.cpp reports of GB10 units: 15-36 W, ~2.4 GHz under load); the power limit is not. The idle
    # figures, the maximum clock and the reasons' layout (as the H200 prints them) are guesses.
    "power.draw": "11.70 W",
    "power.limit": "[N/A]",
    "clocks.current.sm": "208 MHz",
    "clocks.max.sm": "2418 MHz",
    "clocks_event_reasons.active": "0x0000000000000001",
    "clocks_event_reasons.gpu_idle": "Active",
    "clocks_event_reasons.sw_power_cap": "Not Active",
    "clocks_event_reasons.hw_slowdown": "Not Active",
    "clocks_event_reasons.hw_thermal_slowdown": "Not Active",
    "clocks_event_reasons.hw_power_brake_slowdown": "Not Active",
    "clocks_event_reasons.sw_thermal_slowdown": "Not Active",
}
RTX_PRO_6000_VALUES = {
    "index": "0",
    "count": "1",
    "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
    "uuid": "GPU-6f0e3c1a-52b4-4d8e-9a71-0c2d5e8b4f19",
    "pci.bus_id": "00000000:01:00.0",
    "compute_cap": "12.0",
    "driver_version": "580.95.05",
    "memory.total": "97887 MiB",
    "memory.used": "0 MiB",
    "memory.free": "97339 MiB",
    "memory.reserved": "548 MiB",
    "persistence_mode": "Disabled",
    "pstate": "P8",
    "temperature.gpu": "32",
    "utilization.gpu": "0 %",
    "compute_mode": "Default",
    "fan.speed": "30 %",
}


def version_json_text(components):
    """The real file's layout: three-space indent, `"key" : value`, one object per component."""
    blocks = [
        f'   "{key}" : {{\n      "name" : "{name}",\n      "version" : "{version}"\n   }}'
        for key, (name, version) in components.items()
    ]
    return "{\n" + ",\n".join(blocks) + "\n}\n"


def _read(name):
    return (DATA / name).read_text()


def _persona(name, driver, values, table, nvcc, version_json):
    return {
        "persona": name,
        "driver_version": driver,
        # The real --version prints NVML's version as the driver's first two numbers (580.159.04 -> 580.159).
        "nvml_version": ".".join(driver.split(".")[:2]),
        "cuda_driver_version": "13.0",
        "fields": json.loads(_read("fields-580.json")),
        "gpus": [values],
        "table": table,
        "nvcc_version": nvcc,
        "version_json": version_json_text(version_json) if version_json else None,
    }


def build(name):
    """The persona file's content for NAME, or None for `none` (no GPU, no CUDA)."""
    if name == "none":
        return None
    if name == "h200":
        values = json.loads(_read("h200-values.json"))
        return _persona(name, values["driver_version"], values, _read("h200-table.txt"), NVCC_13_0, None)
    if name == "gb10":
        return _persona(name, "580.95.05", GB10_VALUES, _read("gb10-table.txt"), NVCC_13_0, VERSION_JSON_13_0)
    if name == "gb10-cuda12":
        return _persona(name, "580.95.05", GB10_VALUES, _read("gb10-table.txt"), NVCC_12_9, VERSION_JSON_12_9)
    if name == "rtx-pro-6000":
        return _persona(
            name,
            "580.95.05",
            RTX_PRO_6000_VALUES,
            _read("rtx-pro-6000-table.txt"),
            NVCC_13_0,
            VERSION_JSON_13_0,
        )
    raise ValueError(f"unknown GPU persona {name!r}; known: {', '.join(NAMES)}")


NAMES = ("gb10", "h200", "rtx-pro-6000", "gb10-cuda12", "none")
