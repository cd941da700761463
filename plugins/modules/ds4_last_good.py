#!/usr/bin/python
"""Read, record or restore the last-known-good release of a Spark (module_utils/_engine/last_good.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_last_good
short_description: Record the release that last passed its smoke test, and roll back to it
description:
  - The activation's rollback target is the last release that passed its smoke test on the Spark, with the
    launch files it ran on, never what C(current) points at, since a run killed between the switch and the
    smoke test leaves C(current) on a release that never served.
  - With O(state=read), returns the release to roll back to under O(root), or none and why.
  - With O(state=recorded), records O(release) and the launch files O(files) as they are now, in one file
    written atomically (root's, mode 0600, in root's 0700 directory; never through a link). The record is
    the run's bookkeeping and never reports C(changed).
  - With O(state=restored), puts back each launch file of the record (content, owner and mode), each
    written atomically beside its path and never through a link.
  - In check mode nothing is written.
version_added: 0.1.0
options:
  state:
    description:
      - C(read) the rollback target, C(recorded) the release that passed, C(restored) its launch files.
    type: str
    choices: [read, recorded, restored]
    default: read
  path:
    description: The record file.
    type: path
    default: /var/lib/ds4-fleet/last-good.json
  root:
    description: Root of the release layout (C(ds4_root)); required with O(state=read) and O(state=recorded).
    type: path
  release:
    description: The release that passed its smoke test (with O(state=recorded)).
    type: str
  files:
    description:
      - The launch files the engine runs on (with O(state=recorded)); one that does not exist is left out.
    type: list
    elements: path
    default: []
  model_generation:
    description: The model generation the release ran on, recorded to be shown.
    type: str
    default: ""
  speculation:
    description: The speculation mode the release ran with, recorded to be shown.
    type: str
    default: ""
extends_documentation_fragment: [ds4.fleet.module]
"""

EXAMPLES = r"""
- name: Find the last release that passed its smoke test, to roll back to
  ds4.fleet.ds4_last_good:
    root: /opt/ds4
  register: __ds4_last_good

- name: Record the release that passed, with the launch files it runs on
  ds4.fleet.ds4_last_good:
    state: recorded
    root: /opt/ds4
    release: v0.6.5
    files: [/etc/ds4/ds4.env, /etc/systemd/system/ds4.service, /etc/ansible/facts.d/ds4.fact]
"""

RETURN = r"""
release:
  description: The last good release (its tag), or null when there is nothing to roll back to.
  returned: always
  type: str
release_dir:
  description: Its directory under O(root), or null.
  returned: always
  type: str
reason:
  description: Why there is nothing to roll back to, or null.
  returned: always
  type: str
model_generation:
  description: The model generation recorded with the release, or null.
  returned: always
  type: str
restored:
  description: The launch files put back (with O(state=restored)).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._engine.last_good import (  # noqa: E402
    LastGoodError,
    make_record,
    read_record,
    restore_files,
    rollback_target,
    write_record,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["read", "recorded", "restored"], "default": "read"},
            "path": {"type": "path", "default": "/var/lib/ds4-fleet/last-good.json"},
            "root": {"type": "path"},
            "release": {"type": "str"},
            "files": {"type": "list", "elements": "path", "default": []},
            "model_generation": {"type": "str", "default": ""},
            "speculation": {"type": "str", "default": ""},
        },
        required_if=[("state", "read", ["root"]), ("state", "recorded", ["root", "release"])],
        supports_check_mode=True,
    )
    p = module.params
    result = {"release": None, "release_dir": None, "reason": None, "model_generation": None, "restored": []}
    try:
        if p["state"] == "recorded":
            record = make_record(
                p["root"],
                p["release"],
                p["files"],
                model_generation=p["model_generation"],
                speculation=p["speculation"],
            )
            if not module.check_mode:
                write_record(record, p["path"])
            result.update(
                release=record["release"],
                release_dir=record["release_dir"],
                model_generation=record["model_generation"],
            )
            module.exit_json(changed=False, **result)
        record = read_record(p["path"])
        if p["state"] == "restored":
            if record is None:
                module.fail_json(msg=f"there is no last-good record at {p['path']} to restore", **result)
            result["restored"] = [] if module.check_mode else restore_files(record)
            module.exit_json(changed=bool(result["restored"]), **result)
        target = rollback_target(record, p["root"])
        result.update(target, model_generation=(record or {}).get("model_generation"))
    except LastGoodError as exc:
        module.fail_json(msg=str(exc), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
