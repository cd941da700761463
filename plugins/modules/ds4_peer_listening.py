#!/usr/bin/python
"""Prove that this run's peer server holds the peer port: a thin shell over _weights.relay.wait_listening."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_peer_listening
short_description: Wait until this run's peer server listens, and prove the port is its own
description:
  - Waits up to O(timeout) seconds for M(ds4.fleet.ds4_peer_serve) to announce in O(ready_file) the
    listening sockets it made, or why it could not listen; then finds the listening socket a connection to
    each of O(address) on O(port) reaches (C(/proc/net/tcp) and C(tcp6)) and fails unless it is one of
    those, made by this module's user.
  - The peer port is unprivileged, so any local user may listen there, and the receivers would take their
    weights from that process (which costs them time, never a wrong byte, as each file's sha256 is
    verified). The failure names the socket's user.
  - Changes nothing.
version_added: 0.1.0
attributes:
  check_mode:
    support: none
    details: The peer server does not start in check mode.
options:
  ready_file:
    description: The file O(ds4.fleet.ds4_peer_serve#module:ready_file) of the server to prove.
    type: path
    required: true
  address:
    description: The addresses the server listens on.
    type: list
    elements: str
    required: true
  port:
    description: The TCP port.
    type: int
    required: true
  timeout:
    description: Seconds to wait for the server's announcement.
    type: int
    default: 240
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Wait until this Spark's own peer server listens for its peers
  ds4.fleet.ds4_peer_listening:
    ready_file: /run/ds4-peer-serve.ready
    address: [10.0.0.1]
    port: 18090
"""

RETURN = r"""
msg:
  description: What was proved, or what is wrong.
  returned: always
  type: str
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.relay import wait_listening  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ready_file=dict(type="path", required=True),
            address=dict(type="list", elements="str", required=True),
            port=dict(type="int", required=True),
            timeout=dict(type="int", default=240),
        ),
        supports_check_mode=False,
    )
    p = module.params
    problem = wait_listening(p["ready_file"], p["address"], p["port"], p["timeout"], os.geteuid())
    if problem:
        module.fail_json(msg=f"This Spark cannot serve its peers: {problem}")
    module.exit_json(changed=False, msg=f"this run's peer server listens on port {p['port']}")


if __name__ == "__main__":
    main()
