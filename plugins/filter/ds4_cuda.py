"""Filters on CUDA builds; the rule itself lives in module_utils/_engine/cuda_arch.py.

- `compute_cap | ds4.fleet.cuda_build_target(override=None)` -> the engine build for that GPU:
  `'12.1'` (GB10) -> `{"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}`,
  `'9.0'` -> `{"arch": "sm_90", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_90"]}`.
  `override` (`sm_120`, `sm_90a`) builds for that arch instead; compute_cap may then be null. The
  plan (ds4_release_plan) then reads the release's Makefile for a GB10's target
  (module_utils/_engine/make_target.py).
- `stamp | ds4.fleet.spark_target_note` -> `built without the Spark target (make cuda CUDA_ARCH=sm_121)` for
  a build stamp of a GB10 built without cuda-spark, else `` (the unit's description shows it).
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.module_utils._engine.cuda_arch import (
    cuda_build_target as _build_target,
)
from ansible_collections.ds4.fleet.plugins.module_utils._engine.make_target import without_spark_target


def cuda_build_target(compute_cap, override=None):
    try:
        return _build_target(compute_cap, override)
    except ValueError as exc:
        raise AnsibleFilterError(f"ds4.fleet.cuda_build_target: {exc}") from exc


def spark_target_note(stamp):
    """The first part of without_spark_target's sentence (the make line, without the reason), or ''."""
    lacking = without_spark_target(stamp)
    return lacking.split(":", 1)[0] if lacking else ""


class FilterModule:
    def filters(self):
        return {"cuda_build_target": cuda_build_target, "spark_target_note": spark_target_note}
