"""Filters for peer distribution of the weights; the rule itself lives in module_utils/ds4_peer.py.

- `ansible_play_hosts | ds4.fleet.weights_peer_plan(hostvars, port, relay)` -> who fetches which file from
  where (ds4_peer.plan; `relay`: each Spark serving what it receives as it comes, else two waves), from
  each host's `__ds4_weights_plan` and `_ds4_weights_peer_address`.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_peer import plan


def weights_peer_plan(play_hosts, hostvars, port, relay=False):
    hosts = []
    for name in play_hosts:
        host = hostvars[name]
        weights = host.get("__ds4_weights_plan") or {}
        address = host.get("_ds4_weights_peer_address")
        # A host still in the play that did not plan its weights in this run (in upgrade.yml, a Spark whose
        # staging failed before them is rescued, not removed) neither holds nor needs anything here.
        if not address or "files" not in weights:
            continue
        hosts.append(
            {
                "name": name,
                "address": address,
                "wanted": [f["name"] for f in weights["files"]],
                "fetch": [f["name"] for f in weights.get("fetch", [])],
            }
        )
    # As Ansible reads a boolean: `-e ds4_weights_peer_relay=false` is the string "false".
    return plan(hosts, int(port), relay=boolean(relay))


class FilterModule:
    def filters(self):
        return {"weights_peer_plan": weights_peer_plan}
