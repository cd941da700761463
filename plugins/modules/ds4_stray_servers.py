#!/usr/bin/python
"""Find a ds4-server running outside ds4.service, and the service that would start it again
(module_utils/ds4_processes.py finds the servers, module_utils/ds4_takeover.py judges them)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_stray_servers
short_description: Find a ds4-server running outside ds4.service, such as the shell installer's
description:
  - Lists the processes that run ds4-server or the installer's ds4-serve (by name, program, or as the
    script of sh, bash, dash or python3) outside ds4.service, with the systemd service each runs in.
  - Names the services whose main process is one of them; such a service would start it again once it
    is stopped, so it must be stopped and disabled first.
  - Changes nothing, in check mode too.
version_added: 0.1.0
extends_documentation_fragment: [ds4.fleet.module]
options: {}
"""

EXAMPLES = r"""
- name: Find any ds4-server running outside the unit
  ds4.fleet.ds4_stray_servers:
  register: __ds4_stray
"""

RETURN = r"""
servers:
  description: >-
    Each server outside ds4.service (C(pid), C(cmdline), C(cgroup), and C(unit), the .service it runs in,
    or null).
  returned: always
  type: list
  elements: dict
pids:
  description: Their process ids.
  returned: always
  type: list
  elements: int
services:
  description: The services whose main process is one of them.
  returned: always
  type: list
  elements: str
lines:
  description: One line per server, C(PID UNIT ARGS), for messages.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_processes import find_stray_servers  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_takeover import takeover  # noqa: E402


def main():
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)

    def main_pid_of(unit):
        rc, out, err = module.run_command(["systemctl", "show", "--property=MainPID", "--value", "--", unit])
        if rc != 0:
            module.fail_json(msg=f"systemctl show {unit} failed: {err.strip() or out.strip()}")
        return int(out.strip() or 0)

    module.exit_json(changed=False, **takeover(find_stray_servers(), main_pid_of))


if __name__ == "__main__":
    main()
