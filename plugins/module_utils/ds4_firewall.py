"""Who may reach the engine's port on a Spark: the gateways' own addresses and ds4_firewall_allow, by family.

Used by the filter ds4.fleet.firewall_sources for role ds4_gateway's engine firewall (tasks/firewall.yml,
templates/ds4-engine.nft.j2).
"""

from __future__ import annotations


class FirewallError(ValueError):
    """A gateway whose addresses were not read."""


def firewall_sources(gateways, allow):
    """{'v4': [...], 'v6': [...]}: each gateway's addresses, then `allow`, split by family, each once.

    `gateways` maps each gateway to its facts (all_ipv4_addresses, all_ipv6_addresses, as the network
    subset of setup gathers them); an address or network with a colon is IPv6."""
    sources = []
    for name, facts in gateways.items():
        if "all_ipv4_addresses" not in (facts or {}):
            raise FirewallError(f"the addresses of the gateway {name} were not read (setup, network subset)")
        sources += facts["all_ipv4_addresses"] + facts.get("all_ipv6_addresses", [])
    sources += list(allow)
    v4 = [s for s in sources if ":" not in s]
    v6 = [s for s in sources if ":" in s]
    return {"v4": list(dict.fromkeys(v4)), "v6": list(dict.fromkeys(v6))}
