"""A pair's direct link (issue 42): its netplan file, the way DGX OS addresses the Sparks' QSFP/ConnectX-7
ports, and the check, before the pair starts, that each member reaches the other over it and that the MTU
the site declares holds.

The check pings with ICMP echo from Python (no `ping` on a minimal host): a datagram ICMP socket, which
Linux grants to the groups in `net.ipv4.ping_group_range` (Podman's containers and most distributions
include root's), else a raw one (CAP_NET_RAW). The MTU is proven as `ping -M do -s MTU-28` proves it: one
echo of exactly MTU bytes (20 of IP header, 8 of ICMP, the rest payload) that may not be fragmented
(IP_PMTUDISC_DO). The local interface refuses a larger packet at once (EMSGSIZE); a peer whose interface
takes less drops it, and no answer comes.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import re
import select
import socket
import struct
import time
from collections.abc import Callable

# What the link check asks of the peer: a few tries, each waiting this long for its answer.
TRIES = 3
TIMEOUT_S = 2.0
IP_HEADER = 20
ICMP_HEADER = 8
ECHO_REQUEST, ECHO_REPLY = 8, 0
# Linux's socket options for the don't-fragment bit (not all in Python's socket module).
IP_MTU_DISCOVER = getattr(socket, "IP_MTU_DISCOVER", 10)
IP_PMTUDISC_DO = getattr(socket, "IP_PMTUDISC_DO", 2)
MTU_MIN, MTU_MAX = 576, 9216
# An interface name as the kernel takes it (IFNAMSIZ 16, no slash, no space).
_IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}")
NETPLAN_FILE = "/etc/netplan/60-ds4-pair-link.yaml"


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of `data`."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(ident: int, seq: int, size: int) -> bytes:
    """An ICMP echo request whose IP packet is `size` bytes (at least the two headers)."""
    payload = bytes(i & 0xFF for i in range(max(0, size - IP_HEADER - ICMP_HEADER)))
    header = struct.pack("!BBHHH", ECHO_REQUEST, 0, 0, ident & 0xFFFF, seq & 0xFFFF)
    return (
        struct.pack("!BBHHH", ECHO_REQUEST, 0, checksum(header + payload), ident & 0xFFFF, seq & 0xFFFF)
        + payload
    )


def is_reply(data: bytes, seq: int, ident: int | None) -> bool:
    """Whether `data` (the ICMP message, without its IP header) answers echo `seq`. `ident` None: the
    kernel set and checks it (a datagram socket)."""
    if len(data) < ICMP_HEADER:
        return False
    kind, _code, _sum, their_ident, their_seq = struct.unpack("!BBHHH", data[:ICMP_HEADER])
    return (
        kind == ECHO_REPLY and their_seq == seq & 0xFFFF and (ident is None or their_ident == ident & 0xFFFF)
    )


def _open() -> tuple[socket.socket, bool]:
    """An ICMP socket: (socket, raw). A datagram one where the kernel allows it, else a raw one."""
    try:
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP), False
    except PermissionError:
        return socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP), True


def ping(
    address: str,
    size: int,
    tries: int = TRIES,
    timeout: float = TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
) -> str | None:
    """None when `address` answered an unfragmentable echo of `size` bytes within `tries` of `timeout`
    seconds each; else why not, in words."""
    try:
        sock, raw = _open()
    except OSError as exc:
        return f"no ICMP socket on this host ({exc.strerror}): net.ipv4.ping_group_range or CAP_NET_RAW"
    ident = os.getpid() & 0xFFFF
    with sock:
        sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
        for seq in range(1, tries + 1):
            try:
                sock.sendto(echo_request(ident, seq, size), (address, 0))
            except OSError as exc:
                if exc.errno == errno.EMSGSIZE:
                    return f"a {size}-byte packet may not leave this host unfragmented (message too long)"
                return f"cannot send to {address}: {exc.strerror}"
            deadline = clock() + timeout
            while (left := deadline - clock()) > 0:
                ready = select.select([sock], [], [], left)[0]
                if not ready:
                    break
                data, (source, _port) = sock.recvfrom(65535)
                if raw:
                    data = data[(data[0] & 0x0F) * 4 :] if data else data
                if source == address and is_reply(data, seq, ident if raw else None):
                    return None
    return f"no answer to {tries} pings of {size} bytes within {timeout:g} s each"


def link_problem(
    pair: str, host: str, peer: str, peer_address: str, mtu: int, ping_fn: Callable = ping
) -> str | None:
    """Why `host` cannot serve its pair over the link to `peer` at `peer_address`, or None: it must answer
    a small echo, and one of `mtu` bytes unfragmented when the site declares an MTU (0: none declared)."""
    where = f"ds4_pairs[{pair!r}]: {host} does not reach {peer} at its link address {peer_address}"
    small = ping_fn(peer_address, 64)
    if small is not None:
        return (
            f"{where} ({small}): cable and address the link (ds4_pair_link_manage writes its netplan "
            "file), or correct the address in ds4_pairs"
        )
    if mtu:
        big = ping_fn(peer_address, mtu)
        if big is not None:
            return (
                f"ds4_pair_link_mtu {mtu} does not hold from {host} to {peer} at {peer_address}: {big}, "
                f"while a small packet is answered. Set MTU {mtu} on both members' link interfaces "
                "(ds4_pair_link_manage writes it), or declare the link's MTU in ds4_pair_link_mtu"
            )
    return None


def setting_problems(interface: object, prefix: object, mtu: object, manage: bool) -> list[str]:
    """What is wrong with the link settings, each naming its variable."""
    problems = []
    if manage and not (isinstance(interface, str) and _IFNAME.fullmatch(interface)):
        problems.append(
            f"ds4_pair_link_interface must name this Spark's link interface (such as enP2p1s0f1np1) when "
            f"ds4_pair_link_manage is on, got {interface!r}"
        )
    if isinstance(prefix, bool) or not isinstance(prefix, int) or not 8 <= prefix <= 30:
        problems.append(
            f"ds4_pair_link_prefix must be a prefix length from 8 to 30 (24: a /24), got {prefix!r}"
        )
    if isinstance(mtu, bool) or not isinstance(mtu, int) or (mtu != 0 and not MTU_MIN <= mtu <= MTU_MAX):
        problems.append(
            f"ds4_pair_link_mtu must be 0 (not declared) or an MTU from {MTU_MIN} to {MTU_MAX}, got {mtu!r}"
        )
    return problems


def interface_problems(
    pair: str, role: str, host: str, interface: str, address: str, interfaces: dict[str, list[str]]
) -> list[str]:
    """Why the run cannot give `host` its link `address` on `interface` (ds4_pair_link_manage), judged from
    its facts before the netplan file is written: `interfaces` maps each interface of the host to the
    addresses it holds. The interface must be the host's, and no other interface may hold the address (the
    kernel would answer for it there, and the link would not carry)."""
    if interface not in interfaces:
        return [
            f"ds4_pair_link_interface {interface} is not an interface of {host} (its own: "
            f"{', '.join(sorted(interfaces)) or 'none read'}): name the port the pair's cable is in "
            "(host_vars where the members differ)"
        ]
    holders = sorted(name for name, held in interfaces.items() if name != interface and address in held)
    return [
        f"ds4_pairs[{pair!r}].{role}.address {address} is already held by {holder} on {host}, not by its "
        f"link interface {interface} (ds4_pair_link_interface): take it off {holder}, or correct the "
        "declaration or ds4_pair_link_interface"
        for holder in holders
    ]


def netplan_text(pair: str, role: str, interface: str, address: str, prefix: int, mtu: int) -> str:
    """The netplan file that gives `interface` the pair's static `address`/`prefix` (and `mtu`, when
    declared), as DGX OS addresses a Spark's QSFP port: no DHCP, no route beyond the link."""
    network = ipaddress.ip_interface(f"{address}/{prefix}")
    if network.version != 4 or network.ip in (
        network.network.network_address,
        network.network.broadcast_address,
    ):
        raise ValueError(f"{address}/{prefix} is not a host address on an IPv4 network")
    lines = [
        "# Written by ds4-fleet (ds4_pair_link_manage): the direct link of the pair "
        f"{pair}, this Spark its {role}.",
        "# Changed here, it is written back by the next run; change ds4_pairs or ds4_pair_link_* instead.",
        "network:",
        "  version: 2",
        "  ethernets:",
        f"    {interface}:",
        "      dhcp4: false",
        "      dhcp6: false",
        "      link-local: []",
        f"      addresses: [{network.with_prefixlen}]",
    ]
    if mtu:
        lines.append(f"      mtu: {mtu}")
    return "\n".join(lines) + "\n"
