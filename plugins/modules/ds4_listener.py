#!/usr/bin/python
"""Prove that ds4.service's engine holds the engine's port (logic in module_utils/_spark/listener.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_listener
short_description: Prove that ds4.service's engine holds the engine's port
description:
  - Finds the listening socket that a connection to O(url) reaches (C(/proc/net/tcp) and C(tcp6)) and proves
    it is the engine's own before anything trusts an answer from it, made by O(engine_user) and held by
    the main process of O(unit).
  - The engine's port is unprivileged and free while the engine is stopped, loading or restarting; any
    local user may listen there meanwhile. This module fails, naming the holder's pid and user, when
    anyone else does.
  - Run as root; the descriptors of the listener's processes are read in a child that takes on their uid
    and gid, so that no CAP_SYS_PTRACE is needed.
  - Changes nothing.
version_added: 0.1.0
options:
  url:
    description: Base URL of the engine, for example C(http://127.0.0.1:8000).
    type: str
    required: true
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.listener
"""

EXAMPLES = r"""
- name: Refuse to record a release that another process answered for
  ds4.fleet.ds4_listener:
    url: http://127.0.0.1:8000
"""

RETURN = r"""
inode:
  description: The inode of the engine's listening socket.
  type: int
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.fleet.plugins.module_utils._spark.listener import LISTENER_ARGS, engine_prover


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            **LISTENER_ARGS,
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        seen = engine_prover(p["url"], p["engine_user"], p["unit"], module.run_command)()
    except OSError as exc:
        module.fail_json(msg=f"Cannot tell who listens on the engine's port: {exc}")
    if seen["problem"]:
        module.fail_json(msg=f"The engine's port is not the engine's: {seen['problem']}", inode=seen["inode"])
    module.exit_json(changed=False, inode=seen["inode"])


if __name__ == "__main__":
    main()
