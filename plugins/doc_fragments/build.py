"""The options of the modules that plan and build an engine release for a GPU."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  build_target:
    description: The build, as the filter C(ds4.fleet.cuda_build_target) returns it.
    type: dict
    required: true
  cuda_version:
    description: The CUDA toolkit release that compiles the engine (C(13.0)).
    type: str
    required: true
"""
