"""A pair's direct link: its netplan file, the settings that make it, and the check that each member reaches
the other over it with the MTU the site declares (ICMP echo built here, sent for real to loopback)."""

import struct

import pytest
import yaml
from ansible_collections.ds4.fleet.plugins.module_utils._pair import link as ds4_link
from ansible_collections.ds4.fleet.plugins.module_utils._pair.link import (
    checksum,
    echo_request,
    interface_problems,
    is_reply,
    link_problem,
    netplan_text,
    ping,
    setting_problems,
)


def test_the_checksum_is_rfc_1071s():
    # RFC 1071's own example: 0001 f203 f4f5 f6f7 sums to ddf2, whose complement is 220d.
    assert checksum(bytes.fromhex("0001f203f4f5f6f7")) == 0x220D
    assert checksum(echo_request(7, 1, 100)) == 0  # a packet with its checksum in sums to nothing


def test_an_echo_request_is_as_long_as_the_mtu_asks_and_its_reply_is_told_by_its_sequence():
    request = echo_request(0x1234, 3, 9000)
    assert len(request) + 20 == 9000
    assert struct.unpack("!BBHHH", request[:8])[0::3] == (8, 0x1234)
    reply = struct.pack("!BBHHH", 0, 0, 0, 0x1234, 3) + request[8:]
    assert is_reply(reply, 3, 0x1234) and is_reply(reply, 3, None)
    assert not is_reply(reply, 4, 0x1234) and not is_reply(reply, 3, 0x9999)
    assert not is_reply(request, 3, 0x1234)  # our own request, seen on a raw socket
    assert not is_reply(b"\0", 3, None)


def test_loopback_answers_a_small_echo_and_one_of_a_jumbo_mtu_unfragmented():
    assert ping("127.0.0.1", 64, tries=1, timeout=5) is None
    assert ping("127.0.0.1", 9000, tries=1, timeout=5) is None


def test_a_packet_larger_than_the_interface_takes_is_refused_here_and_said_so():
    # Loopback takes 65536; no IP packet is larger than 65535, so the kernel refuses 65535 + 28 at once.
    said = ping("127.0.0.1", 65535 + 28, tries=1, timeout=5)
    assert said is not None and ("message too long" in said or "cannot send" in said)


def fake_ping(answers):
    asked = []

    def ping_fn(address, size):
        asked.append((address, size))
        return answers.get(size)

    return ping_fn, asked


def test_a_peer_that_answers_with_the_declared_mtu_passes_and_no_mtu_is_asked_when_none_is_declared():
    ping_fn, asked = fake_ping({})
    assert link_problem("pair01", "spark04", "spark05", "10.77.0.2", 9000, ping_fn) is None
    assert asked == [("10.77.0.2", 64), ("10.77.0.2", 9000)]
    ping_fn, asked = fake_ping({})
    assert link_problem("pair01", "spark04", "spark05", "10.77.0.2", 0, ping_fn) is None
    assert asked == [("10.77.0.2", 64)]


def test_an_unreachable_peer_is_refused_naming_the_pair_and_what_to_do():
    ping_fn, asked = fake_ping({64: "no answer to 3 pings of 64 bytes within 2 s each"})
    said = link_problem("pair01", "spark04", "spark05", "10.77.0.2", 9000, ping_fn)
    assert said.startswith(
        "ds4_pairs['pair01']: spark04 does not reach spark05 at its link address 10.77.0.2"
    )
    assert "no answer to 3 pings" in said and "ds4_pair_link_manage" in said
    assert asked == [("10.77.0.2", 64)]  # the MTU is not asked of a peer that answers nothing


def test_an_mtu_that_does_not_hold_is_refused_naming_ds4_pair_link_mtu():
    ping_fn, _ = fake_ping({9000: "no answer to 3 pings of 9000 bytes within 2 s each"})
    said = link_problem("pair01", "spark04", "spark05", "10.77.0.2", 9000, ping_fn)
    assert said.startswith("ds4_pair_link_mtu 9000 does not hold from spark04 to spark05 at 10.77.0.2")
    assert "while a small packet is answered" in said


@pytest.mark.parametrize(
    "interface, prefix, mtu, manage, named",
    [
        ("", 24, 0, True, "ds4_pair_link_interface"),
        ("eth0 up", 24, 0, True, "ds4_pair_link_interface"),
        ("a" * 16, 24, 0, True, "ds4_pair_link_interface"),
        ("enP2p1s0f1np1", 31, 0, True, "ds4_pair_link_prefix"),
        ("enP2p1s0f1np1", "24", 0, True, "ds4_pair_link_prefix"),
        ("enP2p1s0f1np1", 24, 100, True, "ds4_pair_link_mtu"),
        ("enP2p1s0f1np1", 24, True, True, "ds4_pair_link_mtu"),
        ("", 24, 20000, False, "ds4_pair_link_mtu"),
    ],
)
def test_bad_link_settings_are_refused_naming_the_variable(interface, prefix, mtu, manage, named):
    problems = setting_problems(interface, prefix, mtu, manage)
    assert len(problems) == 1 and problems[0].startswith(named)


def test_sound_link_settings_pass_and_an_interface_is_needed_only_when_the_link_is_managed():
    assert setting_problems("enP2p1s0f1np1", 24, 9000, True) == []
    assert setting_problems("", 24, 0, False) == []


def test_the_netplan_file_addresses_the_named_interface_statically_as_dgx_os_does():
    text = netplan_text("pair01", "coordinator", "enP2p1s0f1np1", "10.77.0.1", 24, 9000)
    assert text.startswith(
        "# Written by ds4-fleet (ds4_pair_link_manage): the direct link of the pair pair01"
    )
    assert yaml.safe_load(text) == {
        "network": {
            "version": 2,
            "ethernets": {
                "enP2p1s0f1np1": {
                    "dhcp4": False,
                    "dhcp6": False,
                    "link-local": [],
                    "addresses": ["10.77.0.1/24"],
                    "mtu": 9000,
                }
            },
        }
    }
    undeclared = yaml.safe_load(netplan_text("pair01", "worker", "enP2p1s0f1np1", "10.77.0.2", 24, 0))
    assert "mtu" not in undeclared["network"]["ethernets"]["enP2p1s0f1np1"]


@pytest.mark.parametrize("address, prefix", [("10.77.0.0", 24), ("10.77.0.255", 24), ("fd00::1", 64)])
def test_an_address_that_is_no_host_of_an_ipv4_network_is_refused(address, prefix):
    with pytest.raises(ValueError, match="not a host address"):
        netplan_text("pair01", "worker", "enP2p1s0f1np1", address, prefix, 0)


def test_the_netplan_file_is_where_netplan_reads_it():
    assert ds4_link.NETPLAN_FILE.startswith("/etc/netplan/") and ds4_link.NETPLAN_FILE.endswith(".yaml")


INTERFACES = {"lo": ["127.0.0.1"], "eth0": ["10.88.0.4"], "enP2p1s0f1np1": []}


def test_a_managed_link_on_an_interface_of_the_spark_free_of_its_address_passes():
    judged = ("pair01", "coordinator", "spark04", "enP2p1s0f1np1", "10.77.0.1")
    assert interface_problems(*judged, INTERFACES) == []
    # A run after the first finds the address on the link interface itself, where the netplan file put it.
    addressed = dict(INTERFACES, enP2p1s0f1np1=["10.77.0.1"])
    assert interface_problems(*judged, addressed) == []


def test_a_managed_link_on_an_interface_the_spark_does_not_have_is_refused_naming_its_interfaces():
    assert interface_problems("pair01", "worker", "spark05", "enP2p1s0f0np0", "10.77.0.2", INTERFACES) == [
        "ds4_pair_link_interface enP2p1s0f0np0 is not an interface of spark05 (its own: enP2p1s0f1np1, eth0, "
        "lo): name the port the pair's cable is in (host_vars where the members differ)"
    ]


def test_a_link_address_held_by_another_interface_is_refused_naming_it():
    held = dict(INTERFACES, eth0=["10.88.0.4", "10.77.0.1"])
    assert interface_problems("pair01", "coordinator", "spark04", "enP2p1s0f1np1", "10.77.0.1", held) == [
        "ds4_pairs['pair01'].coordinator.address 10.77.0.1 is already held by eth0 on spark04, not by its "
        "link interface enP2p1s0f1np1 (ds4_pair_link_interface): take it off eth0, or correct the "
        "declaration or ds4_pair_link_interface"
    ]
