#!/usr/bin/python
"""Compare a Spark with the last finished run's record, or record this run (module_utils/_run/record.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_applied
short_description: Say whether a Spark is still as the last finished ds4-fleet run left it
description:
  - With O(state=checked), compares the Spark with the record of the last run that finished, which holds
    when O(fingerprint) is the same, every path and unit is as it was, so is the service user, and the
    engine answers.
    Returns C(converged) and, when not, the first difference in words; a record that no longer holds is
    removed, so that the whole run that follows writes a new one only if it finishes.
  - With O(state=recorded), records O(fingerprint) and the state of the paths, units and user now.
  - Files up to 16 MiB are compared by content, larger ones (weights, the engine) by size, time and inode.
  - The record lives in a directory of root's alone; it is never read or written through a link.
  - The record is the run's bookkeeping, not a change of the Spark, and never reports C(changed). In check
    mode nothing is written or removed.
version_added: 0.1.0
options:
  state:
    description: C(checked) to compare with the record, C(recorded) to record this run.
    type: str
    choices: [checked, recorded]
    default: checked
  path:
    description: The record file.
    type: path
    default: /var/lib/ds4-fleet/applied.json
  fingerprint:
    description: The run's inputs, as the action ds4_settings_check returns them (C(fingerprint)), secrets
      left out.
    type: str
    required: true
  secrets:
    description: The secret settings (name -> value), recorded and compared only as one keyed digest
      under O(digest_key) with O(fingerprint), never as a plain digest.
    type: dict
    default: {}
  digest_key:
    description: The Spark's key of the digests of secret settings (made when missing, not in check mode).
    type: path
    default: /var/lib/ds4-fleet/digest.key
  paths:
    description: Files, links and directories (globs allowed) whose state is recorded; a directory's alone.
    type: list
    elements: path
    default: []
  trees:
    description: Directories recorded with everything below them.
    type: list
    elements: path
    default: []
  units:
    description: Units whose unit-file state and active state are recorded.
    type: list
    elements: str
    default: []
  user:
    description: The service user, whose ids, home and shell are recorded.
    type: str
    default: ds4
  engine_answers:
    description: Whether the engine answers HTTP on O(host) and O(port) here and is asked for its stats; a
      pair's worker serves no HTTP (its units' active states, recorded, say whether it runs).
    type: bool
    default: true
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.engine
"""

EXAMPLES = r"""
- name: Find out whether this Spark is as the last finished run left it
  ds4.fleet.ds4_applied:
    fingerprint: "{{ __ds4_settings.fingerprint }}"
    paths: [/etc/logrotate.d/ds4]
    trees: [/etc/ds4]
    units: [ds4.service]
  register: __ds4_applied
"""

RETURN = r"""
converged:
  description: Whether the Spark is as the recorded run left it and the engine answers (O(state=checked)).
  returned: always
  type: bool
reason:
  description: The first difference found, in words; null when converged.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._run.record import (  # noqa: E402
    OPTIONS,
    AppliedError,
    compare,
    inputs_and_state,
    write_record,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["checked", "recorded"], "default": "checked"},
            **OPTIONS,
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "recorded":
            inputs, now = inputs_and_state(p, module.run_command, module.check_mode)
            if not module.check_mode:
                write_record(p["path"], inputs, now)
            module.exit_json(changed=False, converged=True, reason=None)
        reason = compare(p, module.run_command, module.check_mode)
    except AppliedError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, converged=reason is None, reason=reason)


if __name__ == "__main__":
    main()
