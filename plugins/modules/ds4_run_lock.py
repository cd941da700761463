#!/usr/bin/python
"""Hold or release a Spark for one ds4-fleet run (module_utils/ds4_run_lock.py). The action of the same
name (plugins/action/ds4_run_lock.py) names the holder, waits and takes over a dead run's lock."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_run_lock
short_description: Hold a Spark for one ds4-fleet run at a time
description:
  - Creates the lock file O(path) naming the run that holds the Spark (controller, its pid, user,
    playbook, since when), atomically and never through a link; or removes it, when O(holder) holds it.
  - The action of the same name, which runs on the controller, fills in O(holder), waits up to O(wait)
    seconds for another run to end, takes over the lock of a run of this controller that has ended
    without releasing it, and otherwise refuses, naming the holder.
  - In check mode nothing is written; a lock held by another run is reported all the same.
version_added: 0.1.0
options:
  state:
    description: C(held) to take the lock, C(released) to give it back.
    type: str
    choices: [held, released]
    default: held
  path:
    description: The lock file, in a directory a reboot empties.
    type: path
    default: /run/ds4-fleet.lock
  holder:
    description: The run, as the action fills it in (controller, pid, user, playbook, since, since_text).
    type: dict
  wait:
    description: Seconds to wait for another run to end before refusing.
    type: int
    default: 600
  stale:
    description: A holder record the controller found ended; its lock is taken over if still recorded.
    type: dict
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Hold this Spark for this run
  ds4.fleet.ds4_run_lock:
    wait: 600

- name: Let other runs have this Spark
  ds4.fleet.ds4_run_lock:
    state: released
"""

RETURN = r"""
held:
  description: Whether this run holds the lock (after O(state=held)).
  returned: always
  type: bool
holder:
  description: The run recorded in the lock file (this one, or the other one that holds it).
  returned: when the lock is held
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_run_lock import (  # noqa: E402
    LockError,
    read,
    release,
    same,
    try_hold,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["held", "released"], "default": "held"},
            "path": {"type": "path", "default": "/run/ds4-fleet.lock"},
            "holder": {"type": "dict"},
            "wait": {"type": "int", "default": 600},
            "stale": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    p = module.params
    holder = p["holder"] or {}
    try:
        if module.check_mode:
            current = read(p["path"])
            mine = current is None or same(current, holder)
            module.exit_json(changed=False, held=mine, holder=current or holder)
        if p["state"] == "released":
            released = release(p["path"], holder)
            module.exit_json(changed=False, held=False, released=released)
        held, current = try_hold(p["path"], holder, p["stale"])
    except LockError as exc:
        module.fail_json(msg=str(exc), held=False)
    # Not a change of the Spark: the run removes the file again at its end, and a second run must be
    # able to say changed=0.
    module.exit_json(changed=False, held=held, holder=current)


if __name__ == "__main__":
    main()
