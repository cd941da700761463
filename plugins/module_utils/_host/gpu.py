"""What the GPU and the CUDA toolkit of a host are, from the text their tools print: nvidia-smi's query,
`nvcc --version`, the toolkit's version.json, and /proc/meminfo for a unified-memory part.

Pure functions over text; ds4_host_facts.gather_host_facts runs the tools. Formats were read off real
tools: an H200 (driver 580.159.04, CUDA 13.0) and public reports of DGX Spark (GB10) units, whose
nvidia-smi reports no memory of its own (see tests/unit/fixtures/).
"""

from __future__ import annotations

import json
import re

# The one nvidia-smi query the facts need, in the form that is easiest to parse.
GPU_QUERY_FIELDS = ("index", "name", "compute_cap", "driver_version", "memory.total")
GPU_QUERY_ARGS = ("--query-gpu=" + ",".join(GPU_QUERY_FIELDS), "--format=csv,noheader,nounits")

# What nvidia-smi prints for a value a part does not report: a GB10 prints `[N/A]` for memory.total;
# older drivers and other tools word it `Not Supported`.
NOT_REPORTED = frozenset({"", "n/a", "[n/a]", "not supported", "[not supported]"})

MIB = 1024 * 1024


class HostFactsError(ValueError):
    """A tool printed something these parsers cannot read; the message quotes it."""


def _not_reported(value: str) -> bool:
    return value.strip().lower() in NOT_REPORTED


def _reported(value: str, pattern: str, problem: str) -> re.Match | None:
    """The match of a value nvidia-smi reported; None when it did not; HostFactsError(problem) otherwise."""
    if _not_reported(value):
        return None
    match = re.fullmatch(pattern, value.strip())
    if not match:
        raise HostFactsError(problem)
    return match


def parse_compute_cap(value: str) -> tuple[int, int] | None:
    """'12.1' -> (12, 1); None when not reported. Anything else raises HostFactsError."""
    match = _reported(
        value, r"(\d{1,2})\.(\d)", f"compute capability {value!r} is not of the form MAJOR.MINOR"
    )
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def parse_mib(value: str) -> int | None:
    """nvidia-smi memory, with or without its unit ('143771', '143771 MiB') -> int; None if not reported."""
    match = _reported(value, r"(\d+)(?: MiB)?", f"memory value {value!r} is not a number of MiB")
    return None if match is None else int(match.group(1))


def parse_gpu_query(text: str) -> list[dict]:
    """Parse `nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total
    --format=csv,noheader,nounits`, one GPU a line, into a list of dicts."""
    devices = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split(",")]
        if len(parts) < len(GPU_QUERY_FIELDS) or not parts[0].isdigit():
            raise HostFactsError(
                f"nvidia-smi output line {number} is not 'index, name, compute_cap, driver_version, "
                f"memory.total': {line!r}"
            )
        # A product name holding a comma would split in two: the last three fields are fixed.
        name = ", ".join(parts[1:-3])
        try:
            cap = parse_compute_cap(parts[-3])
            memory_mib = parse_mib(parts[-1])
        except HostFactsError as exc:
            raise HostFactsError(f"nvidia-smi output line {number} ({line!r}): {exc}") from None
        devices.append(
            {
                "index": int(parts[0]),
                "name": name,
                "compute_cap": None if cap is None else f"{cap[0]}.{cap[1]}",
                "compute_cap_major": None if cap is None else cap[0],
                "compute_cap_minor": None if cap is None else cap[1],
                "driver_version": None if _not_reported(parts[-2]) else parts[-2],
                "memory_total_mib": memory_mib,
            }
        )
    return devices


def parse_nvcc_version(text: str) -> dict:
    """`nvcc --version` -> {'version': '13.0', 'major': 13, 'minor': 0, 'build': '13.0.88'}."""
    match = re.search(r"release (\d+)\.(\d+), V(\d+(?:\.\d+)*)", text)
    if not match:
        raise HostFactsError(f"nvcc --version printed no 'release X.Y, VX.Y.Z' line: {text.strip()[:200]!r}")
    major, minor = int(match.group(1)), int(match.group(2))
    return {"version": f"{major}.{minor}", "major": major, "minor": minor, "build": match.group(3)}


def parse_cuda_version_json(text: str) -> dict:
    """The toolkit's version.json -> {'version': '13.0', 'major': 13, 'minor': 0, 'full': '13.0.2'}."""
    try:
        full = json.loads(text)["cuda"]["version"]
    except (ValueError, KeyError, TypeError):
        raise HostFactsError(f"version.json has no cuda.version: {text.strip()[:200]!r}") from None
    match = re.match(r"(\d+)\.(\d+)", str(full))
    if not match:
        raise HostFactsError(f"version.json's cuda.version {full!r} is not of the form X.Y[.Z]")
    major, minor = int(match.group(1)), int(match.group(2))
    return {"version": f"{major}.{minor}", "major": major, "minor": minor, "full": str(full)}


def cuda_facts(
    nvcc_path: str | None, nvcc_text: str | None, version_json_path: str, version_json_text: str | None
) -> tuple[dict, list[str]]:
    """Which CUDA toolkit the host has, from nvcc (it is what builds the engine) or else version.json.

    Either source may be missing (pass None). Returns (facts, warnings).
    """
    warnings = []
    nvcc = version_json = None
    if nvcc_text is not None:
        try:
            nvcc = parse_nvcc_version(nvcc_text)
        except HostFactsError as exc:
            warnings.append(str(exc))
    if version_json_text is not None:
        try:
            version_json = parse_cuda_version_json(version_json_text)
        except HostFactsError as exc:
            warnings.append(f"{version_json_path}: {exc}")
    if nvcc:
        chosen, source = nvcc, "nvcc"
    elif version_json:
        chosen, source = version_json, "version.json"
    else:
        chosen, source = None, None
    if nvcc and version_json and nvcc["version"] != version_json["version"]:
        warnings.append(
            f"nvcc ({nvcc_path}) is CUDA {nvcc['version']} but {version_json_path} says "
            f"{version_json['full']}; the facts follow nvcc"
        )
    facts = {
        "present": chosen is not None,
        "version": chosen and chosen["version"],
        "major": chosen and chosen["major"],
        "minor": chosen and chosen["minor"],
        "source": source,
        "nvcc_path": nvcc_path,
        "nvcc_version": nvcc and nvcc["build"],
        "version_json_path": version_json_path if version_json_text is not None else None,
        "version_json_version": version_json and version_json["full"],
    }
    return facts, warnings


# What a site sets where a Spark's memory is not to be read from the Spark (ds4_common's defaults).
MEMORY_VAR = "ds4_spark_memory_bytes"


def parse_meminfo_total(text: str) -> int:
    """/proc/meminfo -> MemTotal in bytes."""
    match = re.search(r"^MemTotal:\s+(\d+) kB$", text, re.MULTILINE)
    if not match:
        raise HostFactsError("/proc/meminfo has no 'MemTotal: N kB' line")
    return int(match.group(1)) * 1024


def spark_memory(host: str, memory_bytes: int | None, meminfo: str | None) -> tuple[int | None, str | None]:
    """The memory a Spark's model is fitted in: `memory_bytes` (ds4_spark_memory_bytes) where the site set it,
    else the MemTotal of the Spark's /proc/meminfo text (None or "" when it could not be read). Returns
    (bytes, None), or (None, why) naming the setting that would decide it when neither gives a figure."""
    if memory_bytes is not None:
        return int(memory_bytes), None
    try:
        return parse_meminfo_total(meminfo or ""), None
    except HostFactsError as exc:
        reason = str(exc) if meminfo else "/proc/meminfo could not be read"
        return None, (
            f"{MEMORY_VAR} is not set, so {host}'s memory is read from /proc/meminfo, and {reason}: set "
            f"{MEMORY_VAR} to the memory the Spark has for the engine, in bytes"
        )


def gpu_memory(device: dict, host_memory_bytes: int | None) -> dict:
    """The memory the engine can count on for DEVICE: its own, or on a unified-memory part (GB10, which
    reports none) the host's total, flagged as unified."""
    if device["memory_total_mib"] is not None:
        return {
            "memory_bytes": device["memory_total_mib"] * MIB,
            "memory_unified": False,
            "memory_source": "nvidia-smi",
        }
    return {"memory_bytes": host_memory_bytes, "memory_unified": True, "memory_source": "meminfo"}


def gpu_facts(
    nvidia_smi_path: str | None, rc: int | None, stdout: str, stderr: str, host_memory_bytes: int | None
) -> dict:
    """GPU facts from the query's result; a missing tool or a failing driver is a fact, not an error.
    Output that cannot be read raises HostFactsError: no decision should rest on a guess about the GPU."""
    facts: dict = {
        "present": False,
        "nvidia_smi": nvidia_smi_path,
        "error": None,
        "count": 0,
        "devices": [],
        "name": None,
        "compute_cap": None,
        "driver_version": None,
        "memory_bytes": None,
        "memory_unified": False,
        "memory_source": None,
    }
    if nvidia_smi_path is None:
        facts["error"] = "nvidia-smi not found"
        return facts
    if rc != 0:
        # nvidia-smi prints its own failures (no driver, no device) on stdout.
        facts["error"] = f"nvidia-smi exited {rc}: {(stdout.strip() or stderr.strip())[:300]}"
        return facts
    devices = [dict(device, **gpu_memory(device, host_memory_bytes)) for device in parse_gpu_query(stdout)]
    facts["devices"] = devices
    facts["count"] = len(devices)
    if not devices:
        facts["error"] = "nvidia-smi listed no GPU"
    else:
        first = devices[0]
        facts["present"] = True
        for key in (
            "name",
            "compute_cap",
            "driver_version",
            "memory_bytes",
            "memory_unified",
            "memory_source",
        ):
            facts[key] = first[key]
    return facts
