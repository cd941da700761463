#!/usr/bin/python
"""Judge the ds4_host_facts facts against the preflight settings; refuse, warn, or name the engine build.

The rules live in module_utils/_host/preflight.py; this file only reads the catalog and wires the result
into Ansible (failure, warnings, the fact ds4_build_target).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_preflight_check
short_description: Refuse a host that cannot take the ds4 engine, before anything changes
description:
  - Judges the facts of M(ds4.fleet.ds4_host_facts) against the accepted CPU architectures, GPU compute
    capabilities and CUDA major version, and the free space the plan needs on the weights' and the
    install's filesystems.
  - Fails with one line per refusal; each names the fact, the value seen, the value wanted and the
    variable that changes it. With O(force) a mismatched architecture, GPU or CUDA version is a warning
    instead; a lack of space, a missing C(nvcc) or a build that cannot be named is never forced.
  - On success sets the fact C(ds4_build_target), the engine build for the GPU (or for O(cuda_arch)).
  - Reads nothing on the host and changes nothing.
version_added: 0.1.0
options:
  host:
    description: The C(ds4_host_facts) fact of M(ds4.fleet.ds4_host_facts).
    type: dict
    required: true
  accepted_archs:
    description: CPU architectures accepted (C(ds4_accepted_archs)).
    type: list
    elements: str
    default: [aarch64]
  accepted_compute_caps:
    description: GPU compute capabilities accepted, as C(MAJOR.MINOR) (C(ds4_accepted_compute_caps)).
    type: list
    elements: str
    default: ["12.1"]
  cuda_major:
    description: The CUDA major version wanted (C(ds4_cuda_major)).
    type: int
    default: 13
  force:
    description: Let a mismatched architecture, GPU or CUDA version through with a warning (C(ds4_force)).
    type: bool
    default: false
  cuda_arch:
    description: Build for this arch (C(sm_121)) instead of the GPU's (C(ds4_cuda_arch)); empty follows it.
    type: str
    default: ""
  cuda_home:
    description: The CUDA toolkit's folder, named in the refusal when C(nvcc) is missing (C(ds4_cuda_home)).
    type: path
    default: /usr/local/cuda
  catalog:
    description: C(ds4_model_catalog); not needed when O(weights_space_bytes) is set.
    type: dict
  generation:
    description: C(ds4_model_generation).
    type: str
    default: "0731"
  quantization:
    description: C(ds4_quantization); omitted, the generation's base one.
    type: str
  extra:
    description: C(ds4_extra_quantizations).
    type: dict
    default: {}
  pairs:
    description: C(ds4_pairs); the Spark's slice of a pair is what must fit its memory.
    type: dict
    default: {}
  name:
    description: The Spark's inventory name, as C(ds4_pairs) names it and the refusal shows it.
    type: str
    default: this Spark
  memory_bytes:
    description: C(ds4_spark_memory_bytes); omitted, the facts' GPU (unified) or host memory.
    type: int
  mem_floor_gb:
    description: C(ds4_mem_floor_gb), the memory the engine keeps free.
    type: int
    default: 4
  speculation:
    description: C(ds4_speculation).
    type: str
    default: dspark
  lineage:
    description:
      - The engine's lineage, C(fork) or C(upstream) (the filter C(ds4.fleet.engine_lineage)).
      - Its speculation file is wanted (upstream's DSpark support GGUF in place of the fork's drafter).
    type: str
    choices: [fork, upstream]
    default: fork
  old_weights:
    description: C(ds4_old_weights); unless C(keep), the other generation's files count as space to reclaim.
    type: str
    choices: [keep, remove, auto]
    default: auto
  unknown_size_bytes:
    description: Bytes to budget per file role (C(base), C(dspark), C(mtp)) where the catalog's size is null.
    type: dict
    default: {}
  weights_space_bytes:
    description: Bytes the weights need on O(host)'s C(disk.gguf_dir) filesystem, instead of the estimate.
    type: int
  build_space_bytes:
    description: Bytes the engine build needs on the install root's filesystem (C(ds4_build_space_bytes)).
    type: int
    default: 2147483648
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.module.facts
"""

EXAMPLES = r"""
- name: Read what this host offers the engine
  ds4.fleet.ds4_host_facts:
    gguf_dir: "{{ ds4_gguf_dir }}"

- name: Refuse the host unless it can build and run the engine
  ds4.fleet.ds4_preflight_check:
    host: "{{ ansible_facts.ds4_host_facts }}"
    accepted_compute_caps: ["12.1"]
    catalog: "{{ ds4_model_catalog }}"
    generation: "{{ ds4_model_generation }}"
    speculation: "{{ ds4_speculation }}"
"""

RETURN = r"""
msg:
  description: The refusals, joined by C(; ) on one line, when the host is refused (C(preflight.errors)
    lists them).
  returned: failure
  type: str
  sample: >-
    GPU compute capability is 9.0 (NVIDIA H200); wanted one of 12.1 (ds4_accepted_compute_caps);
    set ds4_force: true to build for it anyway
preflight:
  description:
    - C(errors) and C(warnings) (lists of sentences), C(build_target) (or null), C(space) (per filesystem
      checked, with C(paths), C(checked_path), C(free_bytes), C(reclaimable_bytes), C(need_bytes),
      C(shortfall_bytes)) and C(weights) (the estimate and its files, each C(name), C(role),
      C(expected), C(expected_from), C(have), C(need)).
  returned: always
  type: dict
ansible_facts:
  description: C(ds4_build_target), the engine build for the GPU.
  returned: success
  type: dict
  contains:
    ds4_build_target:
      description: C(arch), C(make_target), C(make_args).
      type: dict
      sample: {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._host.model_fit import streamed_fit  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._host.preflight import (  # noqa: E402
    judge,
    weights_need,
)
from ansible_collections.ds4.fleet.plugins.module_utils._pair.declaration import (  # noqa: E402
    PairError,
    quantization_fit_problem,
    tensor_member,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import (  # noqa: E402
    CatalogError,
    model_files,
    other_generation_files,
    serving,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.disk_plan import POLICIES  # noqa: E402


def estimate_weights(params, host):
    """The weights' bytes: the override, else the catalog's files less what the host already has."""
    if params["weights_space_bytes"] is not None:
        return {"bytes": params["weights_space_bytes"], "reclaimable_bytes": 0,
                "files": [], "label": "ds4_weights_space_bytes"}  # fmt: skip
    catalog, generation = params["catalog"], params["generation"]
    if catalog is None:
        raise ValueError("ds4_model_catalog is not given; wanted it, or ds4_weights_space_bytes")
    wanted = model_files(
        catalog, generation, params["speculation"], params["quantization"], params["extra"], params["lineage"]
    )
    other = [entry["name"] for entry in other_generation_files(catalog, generation)]
    return weights_need(
        wanted,
        gguf_files=host["disk"]["gguf_dir"].get("files", []),
        adoptable=host.get("shell_install", {}).get("gguf_files", []),
        other=other,
        old_weights=params["old_weights"],
        unknown_size_bytes=params["unknown_size_bytes"],
    )


def memory_problems(params, host):
    """(errors, warnings): whether the quantization's files fit this Spark's memory (its slice's, in a
    pair), and a streamed family its resident part and cache, from a local disk; nothing without a
    catalog, and no memory fit without a memory fact."""
    memory = (
        params["memory_bytes"]
        or host.get("gpu", {}).get("memory_bytes")
        or host.get("memory", {}).get("total_bytes")
    )
    floor = params["mem_floor_gb"] * 1024**3
    problem = quantization_fit_problem(
        params["catalog"], params["generation"], params["speculation"], params["quantization"],
        params["extra"], params["pairs"], params["name"], memory, floor,
    )  # fmt: skip
    if params["catalog"] is None:
        return [problem] if problem else [], []
    if tensor_member(params["pairs"], params["name"]):
        # A tensor pair's member does not stream: quantization_fit_problem judged its half of every layer.
        return [problem] if problem else [], []
    gguf = host.get("disk", {}).get("gguf_dir", {})
    errors, warnings = streamed_fit(
        serving(params["catalog"], params["generation"]), params["name"], memory, floor,
        gguf.get("path", ""), gguf.get("mount"),
    )  # fmt: skip
    return ([problem] if problem else []) + errors, warnings


def main():
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "dict", "required": True},
            "accepted_archs": {"type": "list", "elements": "str", "default": ["aarch64"]},
            "accepted_compute_caps": {"type": "list", "elements": "str", "default": ["12.1"]},
            "cuda_major": {"type": "int", "default": 13},
            "force": {"type": "bool", "default": False},
            "cuda_arch": {"type": "str", "default": ""},
            "cuda_home": {"type": "path", "default": "/usr/local/cuda"},
            "catalog": {"type": "dict"},
            "generation": {"type": "str", "default": "0731"},
            "speculation": {"type": "str", "default": "dspark"},
            "lineage": {"type": "str", "default": "fork", "choices": ["fork", "upstream"]},
            "quantization": {"type": "str"},
            "extra": {"type": "dict", "default": {}},
            "pairs": {"type": "dict", "default": {}},
            "name": {"type": "str", "default": "this Spark"},
            "memory_bytes": {"type": "int"},
            "mem_floor_gb": {"type": "int", "default": 4},
            "old_weights": {"type": "str", "choices": list(POLICIES), "default": "auto"},
            "unknown_size_bytes": {"type": "dict", "default": {}},
            "weights_space_bytes": {"type": "int"},
            "build_space_bytes": {"type": "int", "default": 2147483648},
        },
        supports_check_mode=True,
    )
    params = module.params
    host = params["host"]
    try:
        weights = estimate_weights(params, host)
        memory, memory_warnings = memory_problems(params, host)
    except (CatalogError, PairError, ValueError) as exc:
        module.fail_json(msg=str(exc), preflight={"errors": [str(exc)], "warnings": []})
    verdict = judge(
        host,
        {
            "accepted_archs": params["accepted_archs"],
            "accepted_compute_caps": params["accepted_compute_caps"],
            "cuda_major": params["cuda_major"],
            "force": params["force"],
            "cuda_arch": params["cuda_arch"],
            "cuda_home": params["cuda_home"],
            "weights": weights,
            "build_bytes": params["build_space_bytes"],
        },
    )
    verdict["weights"] = weights
    verdict["errors"] += memory
    verdict["warnings"] += memory_warnings
    for warning in verdict["warnings"]:
        module.warn(warning)
    if verdict["errors"]:
        # One line: the default callback prints a newline in a result as \n; preflight.errors lists them.
        module.fail_json(msg="; ".join(verdict["errors"]), preflight=verdict)
    module.exit_json(
        changed=False, preflight=verdict, ansible_facts={"ds4_build_target": verdict["build_target"]}
    )


if __name__ == "__main__":
    main()
