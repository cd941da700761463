#!/usr/bin/python
"""Take off a Spark what the roles made (the list and its rules: module_utils/_fleet/remove.py; the steps:
module_utils/_fleet/remover.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_remove
short_description: Take off a Spark everything the ds4 roles made
description:
  - Stops and disables the roles' units, deletes the engine firewall's nftables table, removes the units,
    drop-ins, timers' stamps, log rotation, facts, helpers, releases, logs, state, KV banks and the roles'
    records, writes back node_exporter's settings as the distribution had them, and deletes the service
    and build users and their groups, and the GPU device groups the roles made (their record,
    /var/lib/ds4-fleet/groups.json) that no other user is in. The one list of what goes is
    module_utils/_fleet/remove.py.
  - Takes off a pair's link file, /etc/netplan/60-ds4-pair-link.yaml (C(ds4_pair_link_manage)), and then
    only has C(netplan generate) and C(netplan apply) the files left.
  - Every path is walked from / without following a link (a link at a component above a path is refused);
    a link the roles made (current, previous, a weight file used in place) is removed itself.
  - A directory the operator named (O(gguf_dir), O(kv_dir), O(build_log_dir) outside the roles' own
    directories) stays; only what the roles put in it goes.
  - The weights stay unless O(weights); the packages the roles installed (their record,
    /var/lib/ds4-fleet/packages.json) stay unless O(packages), and then only those whose purge takes no other
    package along; the record keeps those still installed.
  - In check mode it reports what would go and changes nothing.
  - Run it on a drained Spark (playbooks/remove.yml).
version_added: 0.1.0
extends_documentation_fragment: [ds4.fleet.module]
options:
  root:
    description: The releases' directory (C(ds4_root)).
    type: path
    required: true
  gguf_dir:
    description: The weights directory (C(ds4_gguf_dir)).
    type: path
    required: true
  kv_dir:
    description: The KV banks' directory (C(ds4_kv_disk_dir)); empty for none.
    type: str
    default: /var/lib/ds4/kv
  build_log_dir:
    description: Where the engine's build logs are (C(ds4_engine_build_log_dir)).
    type: path
    default: /var/log/ds4
  textfile_dir:
    description: node_exporter's textfile directory (C(ds4_node_exporter_textfile_dir)); only the
      watchdog's C(ds4.prom) goes from it.
    type: path
    default: /var/lib/prometheus/node-exporter
  catalog:
    description: The model catalog (C(ds4_model_catalog)); with O(weights), each of its files and the files
      beside it go from O(gguf_dir).
    type: dict
    default: {}
  weights:
    description: Whether the weights go too.
    type: bool
    default: false
  packages:
    description: Whether the packages the roles installed go too (purged), those that take nothing else along.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: Take ds4 off the Spark, keeping the weights and packages
  ds4.fleet.ds4_remove:
    root: /opt/ds4
    gguf_dir: /var/lib/ds4/gguf
    kv_dir: /var/lib/ds4/kv
  register: __ds4_removed
"""

RETURN = r"""
serving:
  description: Whether ds4.service was active when the module started.
  returned: always
  type: bool
units:
  description: The roles' units stopped and disabled (or to be, in check mode).
  returned: always
  type: list
  elements: str
removed:
  description: The paths removed (or to be); a directory named alone when all of it went.
  returned: always
  type: list
  elements: str
accounts:
  description: The users and groups deleted (or to be), as C(user NAME) and C(group NAME).
  returned: always
  type: list
  elements: str
firewall:
  description: Whether the engine firewall's table was deleted (or is to be).
  returned: always
  type: bool
restored:
  description: The files written back as they were before the roles (node_exporter's settings).
  returned: always
  type: list
  elements: str
groups_kept:
  description: The device groups the roles made that stay, each with why (another user is in it).
  returned: always
  type: dict
packages:
  description: The packages purged (or to be).
  returned: always
  type: list
  elements: str
packages_kept:
  description: The packages the roles installed that stay, each with why.
  returned: always
  type: dict
lines:
  description: What went (or would go), one line each, for the operator.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.remove import (  # noqa: E402
    GROUPS_RECORD,
    NODE_EXPORTER_DROPIN,
    NODE_EXPORTER_SAVED,
    PACKAGES_RECORD,
    RemoveError,
    catalog_names,
    made,
    names_of,
    read_names,
    read_record,
    take_off_netplan,
)
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.remover import Remover, lines  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._host.packages import PackagesError  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import UnsafePath, read_text  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "gguf_dir": {"type": "path", "required": True},
            "kv_dir": {"type": "str", "default": "/var/lib/ds4/kv"},
            "build_log_dir": {"type": "path", "default": "/var/log/ds4"},
            "textfile_dir": {"type": "path", "default": "/var/lib/prometheus/node-exporter"},
            "catalog": {"type": "dict", "default": {}},
            "weights": {"type": "bool", "default": False},
            "packages": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    remover = Remover(module.run_command, module.get_bin_path, module.check_mode)
    try:
        names = catalog_names(p["catalog"])
        plan = made(
            p["root"], p["gguf_dir"], p["kv_dir"], p["build_log_dir"], names, p["weights"], p["textfile_dir"]
        )
        # Read before anything goes: both live in the records' directory, which goes last.
        record = read_record(read_text(PACKAGES_RECORD))
        recorded = names_of(record)
        device_groups = read_names(read_text(GROUPS_RECORD), "groups", GROUPS_RECORD)
        saved = read_text(NODE_EXPORTER_SAVED)
        serving = module.run_command(["systemctl", "is-active", "--quiet", "ds4.service"])[0] == 0
        gone = set()
        loaded = remover.firewall_table()
        result = {"serving": serving, "units": remover.units()}
        result["firewall"] = remover.firewall(loaded)
        result["removed"] = remover.paths(plan, gone)
        result["removed"] += take_off_netplan(
            module.get_bin_path("netplan"), remover.run, module.check_mode, gone
        )
        result["restored"] = remover.node_exporter_defaults(saved, NODE_EXPORTER_DROPIN in result["removed"])
        result["accounts"], result["groups_kept"] = remover.accounts(device_groups)
        result["packages"], result["packages_kept"], left = remover.packages(record, recorded, p["packages"])
        result["removed"] += remover.records(record, left, gone)
        if result["units"] and not module.check_mode:
            remover.run(["systemctl", "daemon-reload"], "systemctl daemon-reload")
    except (RemoveError, UnsafePath, PackagesError, OSError) as exc:
        module.fail_json(msg=f"ds4 could not be removed from this Spark: {exc}")
    changed = any(result[key] for key in ("units", "firewall", "removed", "restored", "accounts", "packages"))
    module.exit_json(changed=changed, lines=lines(result, module.check_mode), **result)


if __name__ == "__main__":
    main()
