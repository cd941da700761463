#!/usr/bin/python
"""Which of some groups a host lacks, recorded as the groups the roles make (_fleet/remove.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_groups_missing
short_description: Find which of some groups a host lacks, and record them as the roles' own
description:
  - Returns those of O(names) that are not groups of the host, in order; with O(record), adds them to that
    record (the role's group task makes them next), so that playbooks/remove.yml deletes only the groups the
    roles made.
  - Changes nothing but the record, and nothing in check mode.
version_added: 0.1.0
extends_documentation_fragment: [ds4.fleet.module]
options:
  names:
    description: The groups.
    type: list
    elements: str
    required: true
  record:
    description: The record the missing groups are added to.
    type: path
"""

EXAMPLES = r"""
- name: Find and record the GPU device groups the system lacks
  ds4.fleet.ds4_groups_missing:
    names: [video, render]
    record: /var/lib/ds4-fleet/groups.json
"""

RETURN = r"""
missing:
  description: The groups of O(names) that the host lacks, in the order given.
  returned: always
  type: list
  elements: str
recorded:
  description: Whether O(record) gained a group.
  returned: always
  type: bool
"""

import grp  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.remove import RemoveError, record_missing  # noqa: E402


def _exists(name):
    try:
        grp.getgrnam(name)
    except KeyError:
        return False
    return True


def main():
    module = AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "required": True},
            "record": {"type": "path"},
        },
        supports_check_mode=True,
    )
    lacking = [name for name in module.params["names"] if not _exists(name)]
    try:
        recorded = record_missing(lacking, module.params["record"], module.check_mode, "groups")
    except (RemoveError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=recorded, recorded=recorded, missing=lacking)


if __name__ == "__main__":
    main()
