#!/usr/bin/python
"""Read what a Spark runs, from the things themselves (logic in module_utils/_service/host_status.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_host_status
short_description: Read what a Spark runs, in one call
description:
  - Reads, on the Spark, the release C(ds4_root/current) and C(ds4_root/previous) point at and their build
    stamps, the state of C(ds4.service) (C(systemctl show)), what the running engine reports on
    C(/v1/stats) (requests in flight, uptime, context, model) and the free space of the filesystem of the
    weights, and returns them as C(status).
  - For the fleet report (playbooks/status.yml) and the upgrade's judgement of each Spark
    (playbooks/upgrade.yml). Each value comes from the thing itself, not from what a role configured.
  - Changes nothing; runs in check mode too.
version_added: 0.1.0
options:
  root:
    description: The engine layout's root (C(ds4_root)).
    type: path
    default: /opt/ds4
  gguf_dir:
    description: The weights' directory (C(ds4_gguf_dir)); its filesystem's free space is reported.
    type: path
    default: /var/lib/ds4/gguf
  service:
    description: The engine's systemd unit.
    type: str
    default: ds4.service
  timeout:
    description: Seconds the engine may take to answer C(/v1/stats) before it counts as not answering.
    type: float
    default: 5
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.engine
"""

EXAMPLES = r"""
- name: Read what this Spark runs
  ds4.fleet.ds4_host_status:
    root: "{{ ds4_root }}"
    gguf_dir: "{{ ds4_gguf_dir }}"
    port: "{{ ansible_facts.ansible_local.ds4.port | default(8000) }}"
  register: __ds4_status
"""

RETURN = r"""
status:
  description: What the Spark runs.
  type: dict
  returned: always
  contains:
    current:
      description:
        - C(link), C(target), C(release) (from the build stamp, else the directory's name), C(commit),
          C(stamp_error).
      type: dict
    previous:
      description: The same for the rollback release.
      type: dict
    current_changed_since_start:
      description: True when C(current) was switched after the engine started (which runs the one before).
      type: bool
    service:
      description:
        - C(name), C(load_state), C(active_state), C(sub_state), C(unit_file_state), C(main_pid),
          C(started_at) (epoch seconds), C(restarts); or C(name) and C(error).
      type: dict
    engine:
      description:
        - C(url), C(answering), C(requests_inflight), C(uptime_seconds), C(context), C(model), C(error).
      type: dict
    disk:
      description: C(path), C(checked_at) (its nearest existing folder), C(free_bytes), C(total_bytes).
      type: dict
    transport:
      description:
        - A tensor pair member's engine start over rdma, as C(ds4-rdma-launch) recorded it in
          C(/run/ds4/transport.json), with C(transport) (V(rdma), or V(tcp) where it fell back),
          C(warning), C(device), C(gid_index); null where no launcher ran.
      type: dict
    read_at:
      description: Epoch seconds of the reading.
      type: float
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.fleet.plugins.module_utils._service.host_status import read_host
from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import engine_url


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/opt/ds4"},
            "gguf_dir": {"type": "path", "default": "/var/lib/ds4/gguf"},
            "host": {"type": "str", "default": "127.0.0.1"},
            "port": {"type": "int", "default": 8000},
            "service": {"type": "str", "default": "ds4.service"},
            "timeout": {"type": "float", "default": 5},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not 0 < p["port"] < 65536:
        module.fail_json(msg=f"port must be 1 to 65535: {p['port']}")
    if not os.path.isabs(p["root"]) or not os.path.isabs(p["gguf_dir"]):
        module.fail_json(msg=f"root and gguf_dir must be absolute paths: {p['root']}, {p['gguf_dir']}")
    systemctl = module.get_bin_path("systemctl", required=True)

    def run(argv):
        return module.run_command([systemctl, *argv[1:]], environ_update={"LC_ALL": "C"})

    status = read_host(
        p["root"], p["gguf_dir"], engine_url(p["host"], p["port"]), run, p["service"], p["timeout"]
    )
    module.exit_json(changed=False, status=status)


if __name__ == "__main__":
    main()
