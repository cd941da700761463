"""Which RDMA device and RoCE v2 GID index serve a Spark's address on a pair's link, read at each start.

A tensor pair's engine talks over RDMA (engine contract, "Two Sparks, the faster way") and must be told the
device (`--rdma-device`) and the GID index (`--rdma-gid-index`) where the choice is ambiguous; the GID
index of a RoCE v2 address "moves across reboots", so it is read at each start (by `ds4-rdma-launch`, the
unit's command line), never at configure time. The kernel's layout (drivers/infiniband/core/sysfs.c):

    /sys/class/infiniband/<device>/ports/<port>/gids/<index>              a GID as 8 groups of 4 hex digits
    /sys/class/infiniband/<device>/ports/<port>/gid_attrs/types/<index>   "IB/RoCE v1" or "RoCE v2"
    /sys/class/infiniband/<device>/ports/<port>/gid_attrs/ndevs/<index>   the network interface it rides on
    /sys/class/infiniband/<device>/ports/<port>/state                     "4: ACTIVE", "1: DOWN", ...

An unused index reads as the zero GID, and its type and ndev files refuse to be read (EINVAL): both mean
"no GID here". A RoCE v2 GID of an IPv4 address is that address mapped into IPv6 (::ffff:a.b.c.d); of an
IPv6 address, the address itself. The root is a parameter, so that a test (and the sandbox's stand-in
device) gives a fake tree.

Where no RDMA device serves the address the engine is given `--transport tcp` and the launcher says so, in
the journal and in its state file: slower, but the pair serves. Standard library only: installed on each
Spark beside the host scripts and imported by its bare name.
"""

from __future__ import annotations

import ipaddress
import os

SYSFS_CLASS = "class/infiniband"
ROCE_V2 = "RoCE v2"


def _read(path):
    """The file's text, stripped; None when it cannot be read (an unused GID's attributes refuse: EINVAL)."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _entries(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _gid_address(text):
    """The IP address a GID stands for (an IPv4-mapped one as IPv4); None for the zero GID or no GID."""
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return None
    if address == ipaddress.IPv6Address(0):
        return None
    return address.ipv4_mapped or address


def gids(root="/sys"):
    """Every GID of every RDMA device's ports under `root`: dicts of device, port, gid_index, address,
    type, ndev and active (the port's state is ACTIVE), in the order of device, port and index."""
    base = os.path.join(root, SYSFS_CLASS)
    out = []
    for device in _entries(base):
        ports = os.path.join(base, device, "ports")
        for port in _entries(ports):
            if not port.isdigit():
                continue
            at = os.path.join(ports, port)
            active = (_read(os.path.join(at, "state")) or "").endswith("ACTIVE")
            for index in sorted(_entries(os.path.join(at, "gids")), key=lambda name: (len(name), name)):
                if not index.isdigit():
                    continue
                address = _gid_address(_read(os.path.join(at, "gids", index)) or "")
                if address is None:
                    continue
                out.append({
                    "device": device,
                    "port": int(port),
                    "gid_index": int(index),
                    "address": str(address),
                    "type": _read(os.path.join(at, "gid_attrs", "types", index)),
                    "ndev": _read(os.path.join(at, "gid_attrs", "ndevs", index)),
                    "active": active,
                })  # fmt: skip
    return out


def find(address, root="/sys"):
    """The RoCE v2 GID of `address` ({device, port, gid_index, ndev, active}), an active port's first;
    None when no RDMA device serves the address."""
    wanted = str(ipaddress.ip_address(address))
    matches = [gid for gid in gids(root) if gid["address"] == wanted and gid["type"] == ROCE_V2]
    if not matches:
        return None
    best = sorted(matches, key=lambda gid: not gid["active"])[0]
    return {key: best[key] for key in ("device", "port", "gid_index", "ndev", "active")}


def transport(address, root="/sys"):
    """What the engine is given at this start: {"transport", "flags", "found", "warning"}.

    rdma with the device and GID index found for `address`, or tcp with a warning that says why."""
    found = find(address, root)
    if found is None:
        return {
            "transport": "tcp",
            "flags": ["--transport", "tcp"],
            "found": None,
            "warning": (
                f"no RDMA device serves the link address {address} (no RoCE v2 GID under "
                f"{os.path.join(root, SYSFS_CLASS)} holds it): the pair runs over TCP, slower; cable the "
                "ConnectX-7 port and load its driver, then restart the unit"
            ),
        }
    flags = [
        "--transport",
        "rdma",
        "--rdma-device",
        found["device"],
        "--rdma-gid-index",
        str(found["gid_index"]),
    ]
    warning = None
    if not found["active"]:
        warning = f"the RDMA port {found['device']} port {found['port']} serving {address} is not ACTIVE"
    return {"transport": "rdma", "flags": flags, "found": found, "warning": warning}
