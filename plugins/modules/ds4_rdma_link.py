#!/usr/bin/python
"""Find the RDMA device serving a Spark's link address (logic in module_utils/_spark/rdma.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_rdma_link
short_description: Find the RDMA device and RoCE v2 GID that serve a Spark's address on a pair's link
description:
  - Reads C(/sys/class/infiniband/*/ports/*/gids), C(gid_attrs/types) and C(gid_attrs/ndevs) for the
    RoCE v2 GID that holds O(address), so that a tensor pair asking for rdma (C(ds4_pairs)) is refused
    before anything changes where a member has no RDMA device on its link.
  - What it finds is not what the engine is given, as the GID index moves across reboots;
    C(ds4-rdma-launch) finds it again at each start of the unit.
  - Changes nothing.
version_added: 0.1.0
options:
  address:
    description: The Spark's own address on the pair's link.
    type: str
    required: true
  root:
    description: Where sysfs is mounted (a test's fake tree).
    type: path
    default: /sys
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Find the RDMA device serving this Spark's link address
  ds4.fleet.ds4_rdma_link:
    address: 10.77.0.2
"""

RETURN = r"""
found:
  description:
    - The device, port, GID index, network interface and whether the port is active; null when no RDMA
      device serves the address.
  type: dict
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.fleet.plugins.module_utils._spark.rdma import find


def main():
    module = AnsibleModule(
        argument_spec={
            "address": {"type": "str", "required": True},
            "root": {"type": "path", "default": "/sys"},
        },
        supports_check_mode=True,
    )
    try:
        found = find(module.params["address"], module.params["root"])
    except ValueError as exc:
        module.fail_json(msg=f"ds4_rdma_link: {exc}")
    module.exit_json(changed=False, found=found)


if __name__ == "__main__":
    main()
