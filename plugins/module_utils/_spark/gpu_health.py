"""GPU health: how hot, how loaded and how throttled each GPU is, read from `nvidia-smi` (gpu_command) and
parsed into base units (parse_gpus), for the textfile (the watchdog) and for verify.yml (ds4_verify).

Standard library only: the role installs this file beside ds4-watchdog.
"""

from __future__ import annotations

import math
from typing import Any

# GPU health, read by the watchdog on each run: `nvidia-smi` with GPU_FIELDS, in this order.
THROTTLE_REASONS = ("hw_thermal_slowdown", "sw_thermal_slowdown", "sw_power_cap", "hw_power_brake_slowdown")
GPU_FIELDS = (
    "index",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.max.sm",
    "clocks_event_reasons.active",
    *(f"clocks_event_reasons.{reason}" for reason in THROTTLE_REASONS),
)
# With `nounits`: degrees C, W, MHz (as the real tool printed them on an H200, driver 580).
_GPU_SCALES = (
    ("temperature_celsius", 1.0),
    ("power_draw_watts", 1.0),
    ("power_limit_watts", 1.0),
    ("sm_clock_hertz", 1e6),
    ("sm_clock_max_hertz", 1e6),
)


def gpu_command() -> list[str]:
    return ["nvidia-smi", "--query-gpu=" + ",".join(GPU_FIELDS), "--format=csv,noheader,nounits"]


def parse_gpus(text: str) -> list[dict]:
    """Each GPU of gpu_command's output: {"gpu": its index, temperature_celsius, power_draw_watts,
    power_limit_watts, sm_clock_hertz, sm_clock_max_hertz, "clocks_event_reasons": the active reasons'
    bit mask, "reasons": {reason: 1 active, 0 not}}.

    A field the GPU does not report (`[N/A]`, `[Not Supported]`, anything that is no number or state) is
    None, never 0: a GB10 has no power limit to report. A line without every field is no GPU.
    """
    gpus = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != len(GPU_FIELDS) or not fields[0].isdigit():
            continue
        gpu: dict[str, Any] = {"gpu": fields[0]}
        for (key, scale), value in zip(_GPU_SCALES, fields[1:6], strict=True):
            number = _float(value)
            gpu[key] = None if number is None else number * scale
        try:
            gpu["clocks_event_reasons"] = int(fields[6], 16) if fields[6].lower().startswith("0x") else None
        except ValueError:
            gpu["clocks_event_reasons"] = None
        states = {"Active": 1, "Not Active": 0}
        gpu["reasons"] = {
            reason: states.get(value) for reason, value in zip(THROTTLE_REASONS, fields[7:], strict=True)
        }
        gpus.append(gpu)
    return gpus


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None
