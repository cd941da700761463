#!/usr/bin/python
"""Serve this Spark's verified weight files to its peers for one run: a thin shell over ds4_peer.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_peer_serve
short_description: Serve this Spark's verified weight files to the other Sparks of a run
description:
  - Serves the files of O(gguf_dir) that have a matching verification record (written by
    M(ds4.fleet.ds4_hub_file)) at C(http://<address>:<port>/<file>), with C(Range) and C(ETag) (the
    sha256), read-only, to the addresses in O(peers) only; any other client's connection is closed before
    its request is read. Peers fetch with M(ds4.fleet.ds4_hub_file) O(ds4.fleet.ds4_hub_file#module:peers)
    and verify the hub's sha256, so a peer can never hand over a wrong byte.
  - Runs until O(stop_file) appears, O(lifetime) seconds have passed or the run that started it is gone
    (O(heartbeat)) and no peer is connected, then closes its port and every connection. Start it with
    C(async) and C(poll) 0; the role creates the stop file when the run ends, failed or not, and
    O(heartbeat) ends it if the run is cut off.
version_added: 0.1.0
attributes:
  check_mode:
    support: none
    details: Serves nothing in check mode.
options:
  gguf_dir:
    description: The weights directory.
    type: path
    required: true
  address:
    description:
      - The addresses to listen on, one port on each, the ones the peers use (the plan's C(listen)); the
        Spark's LAN address, and a pair's member's link address where it serves its other member.
    type: list
    elements: str
    required: true
  port:
    description: The TCP port.
    type: int
    required: true
  peers:
    description: Addresses allowed to connect.
    type: list
    elements: str
    required: true
  relays:
    description:
      - Files this Spark receives in this run (the plan's) and may serve while they come, from the ranges
        its fetch has written so far (a relay); a receiver verifies the whole file's sha256 all the same.
        Any other file is served only from a verified copy.
    type: list
    elements: str
    default: []
  rate:
    description: Bytes per second for all peers together; 0 for no cap.
    type: int
    default: 0
  token:
    description:
      - The run's token, sent on every answer, so that the receivers (M(ds4.fleet.ds4_hub_file)
        O(ds4.fleet.ds4_hub_file#module:peer_token)) know this server from any other process that listens
        on the unprivileged port. Not a secret of value (the receivers verify each file's sha256), but
        never printed.
    type: str
  lifetime:
    description: Seconds after which the server stops whatever happens.
    type: int
    required: true
  stop_file:
    description: The server stops once this file exists (removed at start).
    type: path
    required: true
  ready_file:
    description:
      - Where the server says, once it listens, which listening sockets are its own, or why it could not
        listen (a file of this module's user alone, written whole, never through a link), for
        M(ds4.fleet.ds4_peer_listening) to prove that the port is this server's before the receivers
        fetch from it. Omitted, nothing is said.
    type: path
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.heartbeat
"""

EXAMPLES = r"""
- name: Serve the verified weights to the peers for this run
  ds4.fleet.ds4_peer_serve:
    gguf_dir: /var/lib/ds4/gguf
    address: [10.0.0.1]
    port: 18090
    peers: [10.0.0.2, 10.0.0.3]
    lifetime: 86400
    stop_file: /run/ds4-peer-serve.stop
  async: 86460
  poll: 0
"""

RETURN = r"""
served:
  description: Bytes sent per file.
  returned: always
  type: dict
relayed:
  description: Bytes of those sent per file while this Spark still received it (as a relay).
  returned: always
  type: dict
refused:
  description: Addresses whose connections were closed for not being peers.
  returned: always
  type: list
  elements: str
"""


import os  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.heartbeat import HEARTBEAT_ARGS, from_params  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.relay import PeerServer, announce  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gguf_dir=dict(type="path", required=True),
            address=dict(type="list", elements="str", required=True),
            port=dict(type="int", required=True),
            peers=dict(type="list", elements="str", required=True),
            relays=dict(type="list", elements="str", default=[]),
            rate=dict(type="int", default=0),
            token=dict(type="str", no_log=True),
            lifetime=dict(type="int", required=True),
            stop_file=dict(type="path", required=True),
            ready_file=dict(type="path"),
            **HEARTBEAT_ARGS,
        ),
        supports_check_mode=False,
    )
    p = module.params
    if p["lifetime"] <= 0 or p["rate"] < 0 or not 0 < p["port"] < 65536:
        module.fail_json(msg="lifetime must be positive, rate 0 or more and port 1 to 65535")
    for stale in (p["stop_file"], p["ready_file"]):
        if stale and os.path.lexists(stale):
            os.unlink(stale)
    try:
        server = PeerServer(
            p["gguf_dir"], p["address"], p["port"], p["peers"], p["rate"] or None, p["relays"], p["token"]
        ).start()
    except OSError as e:
        msg = f"cannot serve the weights on {', '.join(p['address'])} port {p['port']}: {e}"
        if p["ready_file"]:
            announce(p["ready_file"], error=msg)
        module.fail_json(msg=msg)
    if p["ready_file"]:
        announce(p["ready_file"], server)
    server.serve_until(time.monotonic() + p["lifetime"], p["stop_file"], from_params(p))
    module.exit_json(
        changed=False, served=server.served, relayed=server.relayed, refused=sorted(set(server.refused))
    )


if __name__ == "__main__":
    main()
