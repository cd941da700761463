#!/usr/bin/python
"""Move an adopted weight file into the weights directory, only while it is the file the plan found: a thin
shell over module_utils/_spark/no_follow.py (move_planned)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_weights_move
short_description: Move an adopted weight file, only the one the plan found
description:
  - Renames O(src) (a weight file of the shell installer's, on the weights directory's filesystem) to
    O(dest), both directories walked from C(/) without following a link.
  - Moves it only while it is the file the weights plan found there, by its device O(dev) and inode
    O(ino). A link or another file its owner swapped in since the plan is refused and nothing moves; a
    swap during the rename is renamed back and refused. The weights' check then hashes the very file moved.
  - Nothing to do when O(src) is gone and O(dest) is there (a run that moved it already).
version_added: 0.2.0
extends_documentation_fragment: [ds4.fleet.module]
attributes:
  check_mode:
    support: full
    details: Says it would move the file, and moves nothing.
  diff_mode:
    support: none
options:
  src:
    description: The file found by the plan, a normalised absolute path.
    type: str
    required: true
  dest:
    description: Its place in the weights directory.
    type: str
    required: true
  dev:
    description: Its device number as the plan found it (C(st_dev)).
    type: int
    required: true
  ino:
    description: Its inode number as the plan found it (C(st_ino)).
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Move the shell installer's files into the weights directory
  ds4.fleet.ds4_weights_move:
    src: "{{ item.src }}"
    dest: "{{ item.dest }}"
    dev: "{{ item.dev }}"
    ino: "{{ item.ino }}"
  loop: "{{ __ds4_weights_plan.adopt | selectattr('action', 'eq', 'move') }}"
"""

RETURN = r"""
src:
  description: The file moved.
  returned: always
  type: str
dest:
  description: Where it is now.
  returned: always
  type: str
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import (  # noqa: E402
    UnsafePath,
    move_planned,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "str", "required": True},
            "dest": {"type": "str", "required": True},
            "dev": {"type": "int", "required": True},
            "ino": {"type": "int", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not os.path.lexists(p["src"]) and os.path.lexists(p["dest"]):
        module.exit_json(changed=False, src=p["src"], dest=p["dest"])
    if module.check_mode:
        module.exit_json(changed=True, src=p["src"], dest=p["dest"])
    try:
        move_planned(p["src"], p["dest"], p["dev"], p["ino"])
    except (UnsafePath, OSError) as exc:
        module.fail_json(msg=f"cannot adopt {p['src']}: {exc}", src=p["src"], dest=p["dest"])
    module.exit_json(changed=True, src=p["src"], dest=p["dest"])


if __name__ == "__main__":
    main()
