#!/usr/bin/python
"""Measure the running ds4 engine and gate on its speed (logic in module_utils/_perf/gate.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_perf
short_description: Measure the running ds4 engine's prefill and decode speed, and gate on it
description:
  - Measures the engine through its own HTTP API (streamed C(/v1/chat/completions)) a few times, a fixed
    prefill then a fixed decode each, and takes the best run's tokens per second of each from the
    engine's C(usage) and the stream's timing.
  - Records the figures with the release, its commit, the model set and the launch settings in the local
    fact file O(fact) (C(ansible_local.ds4_perf)), at most O(keep) records, newest last.
  - After a switch from another release, compares them with the last figures of that release on the same
    model set and launch settings; a drop beyond O(max_regression) percent fails (O(gate=enforce)) with
    both figures in the message, so that the activation rolls back. Without such figures (a first install,
    a changed model set or settings), it records a baseline and passes, saying so.
  - Measures nothing and changes nothing when the release, model set and settings that run have figures on
    record and no switch happened.
version_added: 0.1.0
attributes:
  check_mode:
    support: none
options:
  url:
    description: Base URL of the engine, for example C(http://127.0.0.1:8000).
    type: str
    required: true
  fact:
    description:
      - The local fact file holding the measurements (JSON), such as C(/etc/ansible/facts.d/ds4_perf.fact).
    type: path
    required: true
  release_dir:
    description: The directory of the release that runs now (its C(.ds4-build.json) names release and commit).
    type: path
    required: true
  replaced_dir:
    description: The directory of the release that ran before the switch; V('') when none did.
    type: str
    default: ""
  launch:
    description: >-
      The C(public) part of the registered result of M(ds4.fleet.ds4_launch_config) for what runs now (each
      C(ds4_extra_env) value a digest, so that the records never hold a secret).
    type: dict
    required: true
  gate:
    description: V(enforce) fails on a regression, V(warn) records and passes.
    type: str
    choices: [enforce, warn]
    default: enforce
  max_regression:
    description: The largest drop, in percent of the baseline, of either figure that passes.
    type: float
    default: 10
  prompt_tokens:
    description: About how many tokens the prefill prompt has.
    type: int
    default: 2048
  decode_tokens:
    description: How many tokens each run generates.
    type: int
    default: 256
  runs:
    description: How many times to measure.
    type: int
    default: 3
  timeout:
    description: Seconds one run may take.
    type: float
    default: 120
  keep:
    description: How many records the fact file keeps.
    type: int
    default: 20
  model:
    description: Model id sent in the requests.
    type: str
    default: deepseek-v4-flash
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Measure the engine and compare it with the release it replaced
  ds4.fleet.ds4_perf:
    url: http://127.0.0.1:8000
    fact: /etc/ansible/facts.d/ds4_perf.fact
    release_dir: /opt/ds4/releases/v0.6.5
    replaced_dir: /opt/ds4/releases/v0.6.3
    launch: "{{ __ds4_launch.public }}"
"""

RETURN = r"""
message:
  description: What was measured and how it compares, or why nothing was measured.
  type: str
  returned: always
measured:
  description: Whether the engine was measured in this run.
  type: bool
  returned: success
record:
  description:
    - The record written (or the one on record, when nothing was measured) with C(release), C(commit),
      C(models), C(settings), C(prefill_tps), C(decode_tps), C(prompt_tokens), C(completion_tokens),
      C(runs), C(baseline), C(change_pct), C(verdict) and C(message).
  type: dict
  returned: when there is one
runs:
  description: The figures of each run (tokens per second, token counts, seconds, problems).
  type: list
  returned: when measured
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.fleet.plugins.module_utils._perf.gate import (
    DEFAULT_MODEL,
    PerfError,
    PerfSettingError,
    check_max_regression,
    evaluate,
    load_history,
    measure,
    plan,
    read_stamp,
    setup_of,
    write_history,
)


def _checked(module):
    """The checked settings: (speed history, models, settings to compare figures by)."""
    p = module.params
    for name in ("prompt_tokens", "decode_tokens", "runs", "keep"):
        if p[name] < 1:
            module.fail_json(msg=f"{name} must be 1 or more: {p[name]}")
    if p["timeout"] <= 0:
        module.fail_json(msg=f"timeout must be above 0: {p['timeout']}")
    try:
        check_max_regression(p["max_regression"])
        history = load_history(p["fact"])
        models, settings = setup_of(p["launch"])
        # Figures of another prompt or answer length are not comparable: they are matched as settings.
        settings["measurement"] = {"prompt_tokens": p["prompt_tokens"], "decode_tokens": p["decode_tokens"]}
    except PerfSettingError as exc:
        module.fail_json(msg=str(exc))
    return history, models, settings


def _measure(module, history, release, decision, models, settings):
    """Measure, judge against the baseline and keep the record; fail as the gate says."""
    p = module.params
    try:
        measured = measure(
            p["url"], p["prompt_tokens"], p["decode_tokens"], p["runs"], p["timeout"], p["model"]
        )
    except PerfError as exc:
        module.fail_json(msg=f"the speed measurement failed: {exc}")
    outcome = evaluate(
        measured,
        release,
        decision["baseline"],
        decision["why"],
        models,
        settings,
        p["max_regression"],
        p["gate"],
    )
    write_history(p["fact"], history + [outcome["record"]], p["keep"])
    result = {
        "changed": True,
        "measured": True,
        "record": outcome["record"],
        "runs": measured["runs"],
        "message": outcome["message"],
    }
    if outcome["failed"]:
        module.fail_json(msg=outcome["message"], **result)
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "fact": {"type": "path", "required": True},
            "release_dir": {"type": "path", "required": True},
            "replaced_dir": {"type": "str", "default": ""},
            "launch": {"type": "dict", "required": True},
            "gate": {"type": "str", "choices": ["enforce", "warn"], "default": "enforce"},
            "max_regression": {"type": "float", "default": 10},
            # no_log=False: token counts, which only their name makes Ansible take for a secret.
            "prompt_tokens": {"type": "int", "default": 2048, "no_log": False},
            "decode_tokens": {"type": "int", "default": 256, "no_log": False},
            "runs": {"type": "int", "default": 3},
            "timeout": {"type": "float", "default": 120},
            "keep": {"type": "int", "default": 20},
            "model": {"type": "str", "default": DEFAULT_MODEL},
        },
        supports_check_mode=False,
    )
    p = module.params
    history, models, settings = _checked(module)
    release = read_stamp(p["release_dir"])
    replaced = read_stamp(p["replaced_dir"]) if p["replaced_dir"] else None
    decision = plan(history, release, replaced, models, settings)
    if not decision["measure"]:
        on_record = decision["on_record"]
        module.exit_json(
            changed=False,
            measured=False,
            record=on_record,
            message=f"{release['release']}: figures on record, nothing measured ({on_record.get('message')})",
        )
    module.exit_json(**_measure(module, history, release, decision, models, settings))


if __name__ == "__main__":
    main()
