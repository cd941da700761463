"""The options of the modules that plan and build an engine release for a GPU."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  root:
    description: Root of the release layout (C(ds4_root)).
    type: path
    required: true
  release:
    description: The release tag, C(v) and three or more numbers (C(v0.6.5), C(v0.6.5.1)).
    type: str
    required: true
  repo:
    description: The engine's git repository (its URL or a mirror's).
    type: str
    required: true
  build_target:
    description: The build, as the filter C(ds4.fleet.cuda_build_target) returns it.
    type: dict
    required: true
  cuda_version:
    description: The CUDA toolkit release that compiles the engine (C(13.0)).
    type: str
    required: true
"""
