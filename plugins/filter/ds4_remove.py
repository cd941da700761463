"""Filter of playbooks/remove.yml (role ds4_fleet, tasks/remove_check.yml); the rule lives in
module_utils/_fleet/remove.py.

- `results | ds4.fleet.remove_refusals(host, removing, force)` -> why HOST may not be removed, a line each
"""

from __future__ import annotations

from ansible_collections.ds4.fleet.plugins.module_utils._fleet.remove import refusals


def remove_refusals(results, host, removing, force=False):
    """RESULTS: ds4_gateway_server's reading of each gateway, registered in a loop over the gateways."""
    servers = {result["item"]: result.get("servers", []) for result in results or []}
    return refusals(host, list(removing), servers, bool(force))


class FilterModule:
    def filters(self):
        return {"remove_refusals": remove_refusals}
