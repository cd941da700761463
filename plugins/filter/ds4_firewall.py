"""Filter of the engine firewall (role ds4_firewall, tasks/apply.yml); the rule lives in
module_utils/_net/firewall.py.

- `groups['gateways'] | ds4.fleet.firewall_sources(hostvars, ds4_firewall_allow)` -> {v4, v6}
- `ds4_host | ds4.fleet.beyond_loopback` -> whether other machines may reach the engine's listen address
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.module_utils._net.firewall import (
    FirewallError,
    beyond_loopback,
    firewall_sources,
)


def firewall_sources_filter(gateways, hostvars, allow):
    try:
        return firewall_sources({name: hostvars[name].get("ansible_facts") for name in gateways}, allow)
    except FirewallError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"firewall_sources": firewall_sources_filter, "beyond_loopback": beyond_loopback}
