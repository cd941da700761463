"""module_utils/_net/firewall.py: the engine firewall's allowed sources, and when the engine needs it."""

from __future__ import annotations

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._net.firewall import (
    FirewallError,
    beyond_loopback,
    firewall_sources,
)


def test_the_gateways_and_the_allowed_networks_are_split_by_family_each_once():
    gateways = {
        "gw01": {"all_ipv4_addresses": ["10.0.0.5", "172.17.0.2"], "all_ipv6_addresses": ["fd00::5"]},
        "gw02": {"all_ipv4_addresses": ["10.0.0.6"], "all_ipv6_addresses": []},
    }
    assert firewall_sources(gateways, ["10.0.0.0/24", "10.0.0.5", "fd00::/64"]) == {
        "v4": ["10.0.0.5", "172.17.0.2", "10.0.0.6", "10.0.0.0/24"],
        "v6": ["fd00::5", "fd00::/64"],
    }


def test_no_gateway_leaves_the_allowed_networks_alone():
    assert firewall_sources({}, []) == {"v4": [], "v6": []}


def test_a_gateway_whose_addresses_were_not_read_is_refused_by_name():
    with pytest.raises(FirewallError, match="gw02"):
        firewall_sources({"gw02": {}}, [])


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.1", "::1", "[::1]", "localhost", "LocalHost"])
def test_a_loopback_listen_address_is_not_beyond_loopback(host):
    assert beyond_loopback(host) is False


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.11", "fd00::11", "spark01", "spark01.example"])
def test_a_wildcard_another_address_or_a_name_is_beyond_loopback(host):
    # A name may resolve to any address: only the firewall can say who reaches it.
    assert beyond_loopback(host) is True
