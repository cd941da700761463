"""Verify the running ds4 engine against the published figures (logic in module_utils/_perf/figures.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_verify
short_description: Measure the running ds4 engine against its published figures, and name why it is slow
description:
  - Runs the reference workloads against the engine over its HTTP API (a 2k and a 12k prompt, and
    O(concurrent) requests at once), as the speed gate measures (M(ds4.fleet.ds4_perf)), the best of O(runs)
    each.
  - Compares each figure with the one the engine's authors published for the model generation at the
    running release, or the nearest earlier release that has figures (the catalog's C(reference)),
    multiplied by O(scale); a figure below O(min_ratio) of it is slow. A generation without any (every
    family but DeepSeek V4 Flash 0731 so far) is not judged, and the report says no figure is published.
  - Reads what can make a Spark slow, and for a slow one names what it found, most likely first. It looks
    for a build without native code for the GPU's arch (the build stamp's C(sass_archs)), a GB10 built
    without the Spark target (the stamp's C(build_target) and C(make_target_reason)), the GPU's clock
    event reasons, clocks, temperature and power, speculation off in the running engine, other processes
    on the GPU, memory and swap pressure, other requests served while measuring, persistence mode.
  - Changes nothing the service reads and leaves it serving; its one write is its own record, the local
    fact O(fact) (not in check mode), which the fleet status and the metrics read. It reports no change.
version_added: 0.1.0
attributes:
  check_mode:
    support: full
    details: Measures and reports, and writes no record.
options:
  url:
    description: Base URL of the engine, for example C(http://127.0.0.1:8000).
    type: str
    required: true
  fact:
    description:
      - The local fact file of the last verification (JSON), such as C(/etc/ansible/facts.d/ds4_verify.fact).
    type: path
    required: true
  release_dir:
    description:
      - The directory of the release that runs now (its C(.ds4-build.json) names it and its native archs).
    type: path
    required: true
  catalog:
    description: The model catalog (C(ds4_model_catalog)), whose generations carry the published figures.
    type: dict
    required: true
  generation:
    description: The model generation the Spark runs.
    type: str
    required: true
  speculation:
    description:
      - The speculation mode the Spark is configured for (C(ds4_speculation)); it decides the decode figure.
    type: str
    required: true
  min_ratio:
    description: The lowest share of a published figure that passes, above 0 and at most 1.
    type: float
    default: 0.8
  scale:
    description: The factor the published figures are multiplied by (1 on a GB10).
    type: float
    default: 1
  decode_tokens:
    description: How many tokens each request generates.
    type: int
    default: 128
  concurrent:
    description: How many requests run at once for the aggregate figure.
    type: int
    default: 12
  runs:
    description: How many times to run each workload (the best counts).
    type: int
    default: 2
  timeout:
    description: Seconds one request may take.
    type: float
    default: 300
  unit:
    description: The engine's systemd unit, whose main process is the engine.
    type: str
    default: ds4.service
  spark:
    description: The Spark's name in the report and its lines (the inventory's); V('') for the host name.
    type: str
    default: ""
  pair:
    description:
      - Whether the engine at O(url) is a pair's coordinator (ds4_pairs), serving with its worker. The pair
        is held to the figures published for two Sparks serving O(quantization) (its catalog entry's
        C(pair_reference)), measured with the 2k prompt alone, not to one Spark's.
    type: bool
    default: false
  quantization:
    description: The quantization the pair serves (ds4_quantization), whose two-Spark figures apply.
    type: str
    default: q2
  pair_mode:
    description:
      - The pair's mode (ds4_pairs), whose published figures apply with O(pair). V(tensor) holds it to the
        generation's C(tensor_reference) for O(quantization) (the engine's tensor parallelism over RDMA),
        V(pipeline) to the quantization's C(pair_reference).
    type: str
    choices: [pipeline, tensor]
    default: pipeline
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Verify the Spark against the published figures
  ds4.fleet.ds4_verify:
    url: http://127.0.0.1:8000
    fact: /etc/ansible/facts.d/ds4_verify.fact
    release_dir: /opt/ds4/current
    catalog: "{{ ds4_model_catalog }}"
    generation: "0731"
    speculation: dspark
"""

RETURN = r"""
report:
  description:
    - The verification, C(family) and C(generation), C(published) (false where the generation has no
      published figure at any release), C(verdict) (ok, slow, unknown), C(figures) (each C(figure),
      C(label), C(measured), C(reference), C(ratio), C(verdict)), C(reference) (release, source, stamp,
      inherited), C(slow), C(causes) (each C(cause), C(figures), C(text)), most likely first, and the
      C(state) read.
  type: dict
  returned: success
lines:
  description: The verification as an operator reads it, one line an item.
  type: list
  elements: str
  returned: success
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.fleet.plugins.module_utils._perf.figures import (
    VerifyError,
    build_of,
    check_ratio,
    check_scale,
    gpu_apps_command,
    gpu_state_command,
    judge,
    measure_figures,
    memory_state,
    native_archs,
    parse_gpu_apps,
    parse_gpu_state,
    report_lines,
    speculation_running,
    unit_environment,
)
from ansible_collections.ds4.fleet.plugins.module_utils._perf.gate import PerfError
from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import (
    EngineUnreachable,
    ProbeError,
    read_inflight,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.gpu_health import gpu_command, parse_gpus
from ansible_collections.ds4.fleet.plugins.module_utils._spark.listener import main_pid
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import replace_file
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import (
    CatalogError,
    family_of,
    pair_figures,
    reference_figures,
)


def _read(path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read()
    except OSError:
        return None


def _stamp(release_dir):
    text = _read(os.path.join(release_dir, ".ds4-build.json"))
    try:
        stamp = json.loads(text) if text else None
    except ValueError:
        stamp = None
    return stamp if isinstance(stamp, dict) else None


def _engine(module):
    """The engine's pid, command line and environment; (None, [], {}) when not running."""
    try:
        pid = main_pid(module.params["unit"], module.run_command)
    except OSError:
        pid = 0
    if not pid:
        return None, [], {}
    cmdline = _read(f"/proc/{pid}/cmdline", binary=True) or b""
    environ = _read(f"/proc/{pid}/environ", binary=True)
    argv = [part.decode("utf-8", "replace") for part in cmdline.split(b"\0") if part]
    if environ is None:
        # Root without CAP_SYS_PTRACE (in a container) may not read another user's environment.
        rc, out, _err = module.run_command(
            ["systemctl", "show", module.params["unit"], "-p", "Environment", "-p", "EnvironmentFiles"]
        )
        return pid, argv, unit_environment(out if rc == 0 else "", _read)
    env = dict(
        part.decode("utf-8", "replace").partition("=")[::2] for part in environ.split(b"\0") if b"=" in part
    )
    return pid, argv, env


def _state(module, stamp, pid, argv, env, other_requests):
    """What the GPU, the host, the build and the engine say now."""
    state = {"native_archs": native_archs(stamp), "build": build_of(stamp), "other_requests": other_requests}
    # No nvidia-smi (a driver gone, a host without a GPU) leaves the GPU's state unread, not the verification.
    smi = module.get_bin_path("nvidia-smi")

    def query(command):
        if smi is None:
            return None
        rc, out, _err = module.run_command([smi, *command[1:]])
        return out if rc == 0 else None

    out = query(gpu_command())
    state["gpus"] = None if out is None else parse_gpus(out)
    state.update(parse_gpu_state(query(gpu_state_command()) or ""))
    out = query(gpu_apps_command())
    state["gpu_apps"] = None if out is None else [app for app in parse_gpu_apps(out) if app["pid"] != pid]
    state["memory"] = memory_state(_read("/proc/meminfo") or "")
    state["speculation"] = speculation_running(argv, env) if pid else None
    return state


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "fact": {"type": "path", "required": True},
            "release_dir": {"type": "path", "required": True},
            "catalog": {"type": "dict", "required": True},
            "generation": {"type": "str", "required": True},
            "speculation": {"type": "str", "required": True},
            "min_ratio": {"type": "float", "default": 0.8},
            "scale": {"type": "float", "default": 1},
            # no_log=False: token counts, which only their name makes Ansible take for a secret.
            "decode_tokens": {"type": "int", "default": 128, "no_log": False},
            "concurrent": {"type": "int", "default": 12},
            "runs": {"type": "int", "default": 2},
            "timeout": {"type": "float", "default": 300},
            "unit": {"type": "str", "default": "ds4.service"},
            "spark": {"type": "str", "default": ""},
            "pair": {"type": "bool", "default": False},
            "quantization": {"type": "str", "default": "q2"},
            "pair_mode": {"type": "str", "choices": ["pipeline", "tensor"], "default": "pipeline"},
        },
        supports_check_mode=True,
    )
    p = module.params
    for name in ("decode_tokens", "concurrent", "runs"):
        if p[name] < 1:
            module.fail_json(msg=f"{name} must be 1 or more: {p[name]}")
    stamp = _stamp(p["release_dir"])
    release = (stamp or {}).get("release") or os.path.basename(os.path.realpath(p["release_dir"]))
    try:
        check_ratio(p["min_ratio"])
        check_scale(p["scale"])
        reference = (
            pair_figures(p["catalog"], p["generation"], p["quantization"], p["pair_mode"])
            if p["pair"]
            else reference_figures(p["catalog"], p["generation"], release)
        )
    except (VerifyError, CatalogError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    pid, argv, env = _engine(module)
    try:
        inflight, _where = read_inflight(p["url"])
    except EngineUnreachable as exc:
        module.fail_json(msg=f"the engine does not answer, nothing verified: {exc}")
    except ProbeError:
        # Upstream's engine serves neither /metrics nor /v1/stats (engine contract): it is measured all the
        # same, and whether other requests shared it stays unknown (None), which is no cause.
        inflight = None
    try:
        measured = measure_figures(
            p["url"],
            decode_tokens=p["decode_tokens"],
            concurrent=p["concurrent"],
            runs=p["runs"],
            timeout=p["timeout"],
            pair=p["pair"],
        )
    except PerfError as exc:
        module.fail_json(msg=f"the measurement failed: {exc}")
    # One Spark's figures are published by generation and release; none at all for most families.
    published = p["pair"] or bool(p["catalog"][p["generation"]].get("reference"))
    report = judge(
        host=p["spark"] or os.uname().nodename,
        release=release,
        generation=p["generation"],
        speculation=p["speculation"],
        reference=reference,
        measured=measured,
        state=_state(module, stamp, pid, argv, env, inflight),
        scale=p["scale"],
        min_ratio=p["min_ratio"],
        now=time.time(),
        pair=p["pair"],
        family=family_of(p["catalog"], p["generation"]),
        published=published,
        pair_mode=p["pair_mode"],
    )
    if not module.check_mode:
        replace_file(p["fact"], (json.dumps(report, indent=1, sort_keys=True) + "\n").encode(), 0o644)
    module.exit_json(changed=False, report=report, lines=report_lines(report))


if __name__ == "__main__":
    main()
