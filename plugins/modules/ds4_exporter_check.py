#!/usr/bin/python
"""Where node_exporter listens on a Spark, and whether the role may run it there: a thin shell over
module_utils/_spark/exporter.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_exporter_check
short_description: Find where node_exporter listens on a Spark and refuse a port another program holds
description:
  - With O(manage), the role runs the distribution's prometheus-node-exporter, so its port must be free or
    held by that exporter. Any other listener (a site's own node_exporter, another service) is refused by
    pid and program, before anything changes.
  - Without O(manage), the site's own exporter is left alone; only its textfile directory O(textfile_dir)
    is checked (there, a directory, not a link), since the watchdog writes ds4.prom into it.
  - Returns the listen address for C(--web.listen-address). An empty O(listen_address) is the Spark's
    address on its default route now (the kernel's route to a documentation address, nothing sent), never
    every address; the role's ds4-node-exporter finds it again each time the exporter starts. A Spark
    without a default route is refused, naming the setting.
  - Changes nothing, in check mode too.
version_added: 0.1.0
extends_documentation_fragment: [ds4.fleet.module]
options:
  manage:
    description:
      - Whether the role installs and configures the distribution's node_exporter
        (C(ds4_node_exporter_manage)).
    type: bool
    required: true
  port:
    description: The port node_exporter listens on (C(ds4_node_exporter_port)).
    type: int
    required: true
  listen_address:
    description:
      - C(ds4_node_exporter_listen_address); empty for the Spark's address on its default route,
        C(0.0.0.0) or C(::) for every address.
    type: str
    default: ""
  textfile_dir:
    description: node_exporter's textfile directory (C(ds4_node_exporter_textfile_dir)).
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Refuse a node_exporter port another program holds
  ds4.fleet.ds4_exporter_check:
    manage: true
    port: 9100
    textfile_dir: /var/lib/prometheus/node-exporter
  register: __ds4_exporter
"""

RETURN = r"""
listen:
  description: The addresses node_exporter is to listen on, C(ADDRESS:PORT) each, none without O(manage).
  returned: success
  type: list
  elements: str
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._host.processes import (  # noqa: E402
    port_holder,
    read_process,
)
from ansible_collections.ds4.fleet.plugins.module_utils._service.takeover import program_of  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._spark.exporter import (  # noqa: E402
    EXPORTER_UNIT,
    ExporterError,
    default_route_address,
    listen_addresses,
    listener_uid,
    port_clash,
    ss_uid_command,
    textfile_dir_problem,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.listener import main_pid  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "manage": {"type": "bool", "required": True},
            "port": {"type": "int", "required": True},
            "listen_address": {"type": "str", "default": ""},
            "textfile_dir": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not params["manage"]:
        problem = textfile_dir_problem(params["textfile_dir"], os.lstat)
        if problem:
            module.fail_json(msg=problem)
        module.exit_json(changed=False, listen=[])

    try:
        listen = listen_addresses(params["listen_address"], params["port"], default_route_address)
    except ExporterError as exc:
        module.fail_json(msg=str(exc))

    ss = module.get_bin_path("ss")
    holder, warnings = port_holder(params["port"], module.run_command, ss)
    for warning in warnings:
        module.warn(warning)
    program = uid = unit_process = None
    if holder["pid"]:
        program = program_of("/proc", holder["pid"], holder["cmdline"])["program"]
    elif holder["in_use"]:
        # The socket's process is hidden: its owner, and the distribution's unit's main process.
        _rc, out, _err = module.run_command(ss_uid_command(ss, params["port"]))
        uid = listener_uid(out)
        try:
            pid = main_pid(EXPORTER_UNIT, module.run_command)
        except OSError:
            pid = 0  # no such unit, or no systemd to ask: no unit process to compare with
        main = read_process("/proc", pid) if pid else None
        if main and main["cmdline"]:
            unit_process = {"program": main["cmdline"][0], "uid": os.stat(f"/proc/{main['pid']}").st_uid}
    problem = port_clash(params["port"], holder, program, uid, unit_process)
    if problem:
        module.fail_json(msg=problem, holder=holder)
    module.exit_json(changed=False, listen=listen)


if __name__ == "__main__":
    main()
