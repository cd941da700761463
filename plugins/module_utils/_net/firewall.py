"""Who may reach the engine's port on a Spark: the gateways' own addresses and ds4_firewall_allow, by family;
and whether the engine's listen address lets anyone else try.

Used by the filters ds4.fleet.firewall_sources and ds4.fleet.beyond_loopback for role ds4_firewall's engine
firewall (tasks/apply.yml, templates/ds4-engine.nft.j2, ds4-firewall-binding.conf.j2).

The engine has no key of its own: an engine that listens beyond loopback is kept from the others by its
firewall alone, so it runs only while the firewall stands (ds4.service BindsTo= ds4-firewall.service).
One that listens on loopback needs none: nothing but the Spark reaches it, whatever the firewall does.
"""

from __future__ import annotations

import ipaddress
from typing import Any


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


def beyond_loopback(host: Any) -> bool:
    """Whether an engine listening on `host` (ds4_host) may be reached from another machine: anything but a
    loopback address (127.0.0.0/8, ::1) or the name localhost. A wildcard (0.0.0.0, ::), any other address
    and any other name (which may resolve to any address) are beyond loopback."""
    text = str(host).strip().strip("[]")
    if text.lower() == "localhost":
        return False
    try:
        return not ipaddress.ip_address(text).is_loopback
    except ValueError:
        return True
