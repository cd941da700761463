#!/usr/bin/python
"""A pair's direct link: its netplan file, and the check that it carries (logic in ds4_link.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_pair_link
short_description: Address a pair's direct link with netplan, or check that it carries
description:
  - With O(netplan), writes the netplan file that gives O(interface) the pair's static O(address) (and
    O(mtu), when declared), the way DGX OS addresses a Spark's QSFP/ConnectX-7 port, then runs
    C(netplan generate) and C(netplan apply), only when the file changed. A file C(netplan generate)
    refuses is put back as it was (or removed, when there was none) before the module fails.
  - With O(check), pings O(peer_address) over the link (ICMP echo from Python, no C(ping) needed) and, when
    O(mtu) is declared, with one unfragmentable packet of exactly O(mtu) bytes; fails naming the variable
    to correct when either gets no answer. Changes nothing.
  - Call it once with O(netplan) on both members, then once with O(check); the peer is addressed by then.
version_added: 0.2.0
attributes:
  check_mode:
    support: full
    details: Says whether the netplan file would change, and pings the peer (which changes nothing).
  diff_mode:
    support: full
    details: The netplan file before and after.
options:
  pair:
    description: The pair's name in C(ds4_pairs), for messages.
    type: str
    required: true
  role:
    description: This Spark's part in the pair.
    type: str
    required: true
    choices: [coordinator, worker]
  peer:
    description: The other member's inventory name, for messages.
    type: str
    required: true
  host:
    description: This Spark's inventory name, for messages.
    type: str
    required: true
  address:
    description: This Spark's address on the link (from C(ds4_pairs)).
    type: str
    required: true
  peer_address:
    description: The other member's address on the link (from C(ds4_pairs)).
    type: str
    required: true
  netplan:
    description: Write and apply the link's netplan file (C(ds4_pair_link_manage)).
    type: bool
    default: false
  check:
    description: Ping the peer, and with O(mtu) unfragmented.
    type: bool
    default: false
  interface:
    description: The link's interface (C(ds4_pair_link_interface)); required with O(netplan).
    type: str
    default: ""
  prefix:
    description: The link network's prefix length (C(ds4_pair_link_prefix)).
    type: int
    default: 24
  mtu:
    description: The link's MTU (C(ds4_pair_link_mtu)); 0 declares none.
    type: int
    default: 0
  path:
    description: The netplan file.
    type: path
    default: /etc/netplan/60-ds4-pair-link.yaml
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Address the pair's link the way DGX OS does
  ds4.fleet.ds4_pair_link:
    pair: pair01
    role: coordinator
    host: spark04
    peer: spark05
    address: 10.77.0.1
    peer_address: 10.77.0.2
    netplan: true
    interface: enP2p1s0f1np1
    mtu: 9000

- name: Refuse a link that does not carry the declared MTU
  ds4.fleet.ds4_pair_link:
    pair: pair01
    role: coordinator
    host: spark04
    peer: spark05
    address: 10.77.0.1
    peer_address: 10.77.0.2
    check: true
    mtu: 9000
"""

RETURN = r"""
path:
  description: The netplan file, when O(netplan).
  type: str
  returned: success
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.fleet.plugins.module_utils._pair.link import (
    link_problem,
    netplan_text,
    setting_problems,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import read_text, replace_file


def _netplan(module, p, result):
    """Write the file where it differs, and have netplan generate and apply it; undo a refused one."""
    try:
        wanted = netplan_text(p["pair"], p["role"], p["interface"], p["address"], p["prefix"], p["mtu"])
    except ValueError as exc:
        module.fail_json(msg=f"ds4_pairs[{p['pair']!r}]: {p['host']}'s link address: {exc}")
    netplan = module.get_bin_path("netplan")
    if netplan is None:
        module.fail_json(
            msg=f"ds4_pair_link_manage is on, but {p['host']} has no netplan (DGX OS has): address the link "
            "by the host's own means and turn ds4_pair_link_manage off"
        )
    try:
        current = read_text(p["path"])
    except OSError as exc:
        module.fail_json(msg=f"cannot read {p['path']}: {exc}")
    if current == wanted:
        return
    result["changed"] = True
    if module._diff:
        result["diff"] = {
            "before_header": p["path"],
            "after_header": p["path"],
            "before": current or "",
            "after": wanted,
        }
    if module.check_mode:
        return
    # netplan reads its files as root's alone (it warns about any other mode).
    replace_file(p["path"], wanted.encode(), 0o600, 0, 0)

    def put_back():
        # The next run finds the file changed again, and writes and applies it again.
        if current is None:
            os.unlink(p["path"])
        else:
            replace_file(p["path"], current.encode(), 0o600, 0, 0)

    rc, out, err = module.run_command([netplan, "generate"], environ_update={"LC_ALL": "C"})
    if rc != 0:
        put_back()
        module.fail_json(
            msg=f"netplan generate refused the link's file for {p['interface']} (ds4_pair_link_interface), "
            f"put back as it was: {(err or out).strip()}",
            **result,
        )
    rc, out, err = module.run_command([netplan, "apply"], environ_update={"LC_ALL": "C"})
    if rc != 0:
        put_back()
        module.fail_json(
            msg=f"netplan apply failed, the link's file put back as it was: {(err or out).strip()}"
        )


def main():
    module = AnsibleModule(
        argument_spec={
            "pair": {"type": "str", "required": True},
            "role": {"type": "str", "required": True, "choices": ["coordinator", "worker"]},
            "peer": {"type": "str", "required": True},
            "host": {"type": "str", "required": True},
            "address": {"type": "str", "required": True},
            "peer_address": {"type": "str", "required": True},
            "netplan": {"type": "bool", "default": False},
            "check": {"type": "bool", "default": False},
            "interface": {"type": "str", "default": ""},
            "prefix": {"type": "int", "default": 24},
            "mtu": {"type": "int", "default": 0},
            "path": {"type": "path", "default": "/etc/netplan/60-ds4-pair-link.yaml"},
        },
        supports_check_mode=True,
    )
    p = module.params
    problems = setting_problems(p["interface"], p["prefix"], p["mtu"], p["netplan"])
    if problems:
        module.fail_json(msg="; ".join(problems))
    result = {"changed": False, "path": p["path"]}
    if p["netplan"]:
        _netplan(module, p, result)
    if p["check"]:
        problem = link_problem(p["pair"], p["host"], p["peer"], p["peer_address"], p["mtu"])
        if problem:
            module.fail_json(msg=problem, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
