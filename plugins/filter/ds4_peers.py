"""Filters for peer distribution of the weights; the rule itself lives in module_utils/_weights/relay.py.

- `ansible_play_hosts | ds4.fleet.weights_peer_plan(hostvars, port, relay, ds4_pairs)` -> who fetches which
  file from where (_weights.relay.plan; `relay`: each Spark serving what it receives as it comes, else two
  waves),
  from each host's `__ds4_weights_plan` and `_ds4_weights_peer_address` (its LAN address), and, for the
  members of a pair in `ds4_pairs`, their link addresses, on which they peer with each other alone.
"""

from __future__ import annotations

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.ds4.fleet.plugins.module_utils._pair.declaration import pair_of, pairs_of
from ansible_collections.ds4.fleet.plugins.module_utils._weights.relay import plan


def weights_peer_plan(play_hosts, hostvars, port, relay=False, pairs=None):
    # ds4_pairs was judged before anything changed (ds4_service's pair_check).
    declared = pairs_of(pairs)
    hosts = []
    for name in play_hosts:
        host = hostvars[name]
        weights = host.get("__ds4_weights_plan") or {}
        address = host.get("_ds4_weights_peer_address")
        # A host still in the play that did not plan its weights in this run (in upgrade.yml, a Spark whose
        # staging failed before them is rescued, not removed) neither holds nor needs anything here.
        if not address or "files" not in weights:
            continue
        entry = {
            "name": name,
            "address": address,
            "wanted": [f["name"] for f in weights["files"]],
            "fetch": [f["name"] for f in weights.get("fetch", [])],
        }
        membership = pair_of(declared, name)
        if membership is not None:
            pair, role, members = membership
            entry["link"] = {"pair": pair, "address": str(members[role]["address"])}
        hosts.append(entry)
    # As Ansible reads a boolean: `-e ds4_weights_peer_relay=false` is the string "false".
    return plan(hosts, int(port), relay=boolean(relay))


class FilterModule:
    def filters(self):
        return {"weights_peer_plan": weights_peer_plan}
