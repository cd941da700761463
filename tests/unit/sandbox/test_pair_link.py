"""tests/sandbox/sandbox.py's pair: the built-in sandbox cables the pair the inventory declares (each member's
link address is the one ds4_pairs gives, on a /24 of its own, and its ssh port the inventory's), and each
sandbox's link networks are named after it, so that `down` takes its own and no other sandbox's."""

import ipaddress
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "sandbox"))
import sandbox  # noqa: E402


def test_the_built_in_pair_is_the_one_the_inventory_declares():
    pairs = yaml.safe_load((ROOT / "inventory/sandbox/group_vars/all.yml").read_text())["ds4_pairs"]
    hosts = yaml.safe_load((ROOT / "inventory/sandbox/hosts.yml").read_text())
    for name, pair in pairs.items():
        links = set()
        for role in ("coordinator", "worker"):
            member = pair[role]
            cabled = sandbox.PAIR_LINKS[member["host"]]
            interface = ipaddress.ip_interface(cabled["address"])
            assert (str(interface.ip), interface.network.prefixlen) == (member["address"], 24)
            assert cabled["link"] == name
            assert member["host"] in sandbox.DEFAULT_HOSTS and member["host"] in hosts[name]["hosts"]
            assert (
                hosts["sparks"]["hosts"][member["host"]]["ansible_port"]
                == sandbox.FIXED_SSH_PORTS[member["host"]]
            )
            links.add(interface.network)
        assert len(links) == 1, f"{name}'s members are on one /24"


def test_a_sandboxs_links_are_its_own():
    builtin, scenario = sandbox.Names(""), sandbox.Names("mol-pair-")
    assert builtin.link("pair01") == "ds4-sandbox-link-pair01"
    assert scenario.link("pair01") == "mol-pair-net-link-pair01"
    assert builtin.is_link(builtin.link("pair01")) and scenario.is_link(scenario.link("pair01"))
    assert not builtin.is_link(scenario.link("pair01")) and not scenario.is_link(builtin.link("pair01"))
    assert not builtin.is_link(builtin.network) and not builtin.is_link(builtin.inner)
