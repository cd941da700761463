#!/usr/bin/python
"""Find a ds4-server running outside ds4.service, and the service that would start it again
(module_utils/_host/processes.py finds the servers, module_utils/_service/takeover.py judges them)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_stray_servers
short_description: Find a ds4-server running outside ds4.service, such as the shell installer's
description:
  - Lists the processes that run ds4-server or the installer's ds4-serve (by name, program, or as the
    script of sh, bash, dash or python3) outside ds4.service, with the systemd service each runs in.
  - Names the services whose main process is one of them; such a service would start it again once it
    is stopped, so it must be stopped and disabled first.
  - A name proves nothing, so only a server whose program is ours or the shell installer's may be taken
    over (returned in RV(pids)); any other is returned in RV(refused), named by pid, program and user. The
    program is the process's executable (/proc/PID/exe), or the script an interpreter runs. Accepted are
    C(ROOT/releases/<tag>/ds4-server), and in the installer's home C(code/ds4/ds4-server) (its clone,
    built in place) and the C(ds4-serve) launcher in C(code/ds4) or C(.local/bin).
  - A server of another user (neither root nor the owner of O(installer_home)) that does not listen on
    O(port) is left out of every list but RV(ignored), and warned of, since any local user can name a program
    ds4-server.
  - Changes nothing, in check mode too.
version_added: 0.1.0
extends_documentation_fragment: [ds4.fleet.module]
options:
  root:
    description: Root of the release layout (C(ds4_root)), whose releases may be taken over.
    type: path
    default: /opt/ds4
  installer_home:
    description:
      - The home in which the shell installer built its server.
      - Defaults to the home of the user who ran Ansible, also under C(become) (C(SUDO_USER)), else the
        home of the user the module runs as, as for the host facts.
    type: path
  port:
    description: The engine's port (C(ds4_port)). Without it, or when C(ss) cannot say who listens there,
      every server counts, whoever runs it.
    type: int
"""

EXAMPLES = r"""
- name: Find any ds4-server running outside the unit
  ds4.fleet.ds4_stray_servers:
    root: /opt/ds4
  register: __ds4_stray
"""

RETURN = r"""
servers:
  description: >-
    Each server outside ds4.service (C(pid), C(cmdline), C(cgroup), C(unit), the .service it runs in, or
    null, C(exe), C(program), C(user), and C(accepted), whether it may be taken over).
  returned: always
  type: list
  elements: dict
pids:
  description: The process ids of those that may be taken over.
  returned: always
  type: list
  elements: int
refused:
  description: >-
    One line per server whose program is neither ours nor the installer's,
    C(pid PID: PROGRAM (exe EXE), user USER).
  returned: always
  type: list
  elements: str
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
ignored:
  description: One line per server of another user (neither root nor the installer's) that does not listen
    on O(port); the run leaves it alone and warns of it.
  returned: always
  type: list
  elements: str
"""

import contextlib  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._host.facts import invoking_home  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._host.processes import (  # noqa: E402
    find_stray_servers,
    listener_uids_command,
    parse_listener_uids,
)
from ansible_collections.ds4.fleet.plugins.module_utils._service.takeover import (  # noqa: E402
    accepted_programs,
    takeover,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.listener import main_pid  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/opt/ds4"},
            "installer_home": {"type": "path"},
            "port": {"type": "int"},
        },
        supports_check_mode=True,
    )
    home = module.params["installer_home"] or invoking_home()
    accepted = accepted_programs(module.params["root"], home)
    # Whose servers concern the run: root's and the installer's; another user's only on the engine's port.
    counted = {0}
    with contextlib.suppress(OSError):
        counted.add(os.stat(home).st_uid)
    port_uids = None
    ss = module.get_bin_path("ss")
    if module.params["port"] is not None and ss:
        rc, out, _err = module.run_command(listener_uids_command(ss, module.params["port"]))
        if rc == 0:
            port_uids = parse_listener_uids(out)

    def main_pid_of(unit):
        try:
            return main_pid(unit, module.run_command)
        except OSError as exc:
            module.fail_json(msg=str(exc))

    found = takeover(find_stray_servers(), main_pid_of, accepted, port_uids=port_uids, counted_uids=counted)
    for line in found["ignored"]:
        module.warn(f"a process named ds4-server of another user, off the engine's port, left alone: {line}")
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
