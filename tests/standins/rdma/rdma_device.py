#!/usr/bin/env python3
"""STAND-IN RDMA device for a sandbox pair member (test infrastructure of ds4-fleet, NOT a driver): the
sysfs files a ConnectX-7 port's RoCE device shows, in the kernel's layout (drivers/infiniband/core/
sysfs.c), and its verbs device node, for hosts without an RDMA NIC. Standard library only; imports nothing
of the product.

    rdma_device.py install --sysfs DIR --dev DIR --address 10.77.0.2 [--gid-index 3] [--node char|file]
    rdma_device.py remove --sysfs DIR --dev DIR

`install` lays out, under DIR (a sysfs root):

    class/infiniband/rocep1s0f1/ports/1/state                  "4: ACTIVE"
    class/infiniband/rocep1s0f1/ports/1/gids/0..15             the port's GIDs, the zero GID where unused
    class/infiniband/rocep1s0f1/ports/1/gid_attrs/types/N      "IB/RoCE v1" or "RoCE v2", used indices only
    class/infiniband/rocep1s0f1/ports/1/gid_attrs/ndevs/N      the network interface, used indices only
    class/infiniband_verbs/uverbs0/ibdev                       "rocep1s0f1"

with the link-local GID at 0 (RoCE v1) and 1 (RoCE v2), and the address, mapped into IPv6, as RoCE v1 at
`--gid-index` - 1 and RoCE v2 at `--gid-index` (the index a launcher must find; run it again with another
index to move it, as a reboot does). A real unused index's type and ndev refuse to be read (EINVAL): here
those files are absent, which reads the same. Under the --dev directory it makes `infiniband/uverbs0` and
`infiniband/rdma_cm`: character devices with /dev/full's numbers (1:7), since a container's device cgroup
lets a process open those, where the real numbers (231:192, a misc minor) it refuses whatever the unit
allows; `--node file` makes plain files instead (a test without root). `remove` takes the device and its
nodes away (the link without RDMA).
"""

import argparse
import ipaddress
import os
import shutil
import stat
import sys

DEVICE = "rocep1s0f1"
VERBS = "uverbs0"
NETDEV = "enP2p1s0f1np1"
INDICES = 16
LINK_LOCAL = "fe80:0000:0000:0000:0000:00ff:fe00:0002"
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"
FULL = (1, 7)


def gid_text(address: ipaddress.IPv4Address) -> str:
    """The GID of an IPv4 address: ::ffff:a.b.c.d, as sysfs prints it (8 groups of 4 hex digits)."""
    return ipaddress.IPv6Address(f"::ffff:{address}").exploded


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text + "\n")


def make_node(path: str, kind: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    if kind == "file":
        write(path, "")
        return
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(*FULL))
    os.chmod(path, 0o666)


def install(sysfs: str, dev: str, address: ipaddress.IPv4Address, index: int, node: str) -> None:
    port = os.path.join(sysfs, "class", "infiniband", DEVICE, "ports", "1")
    used = {0: (LINK_LOCAL, "IB/RoCE v1"), 1: (LINK_LOCAL, "RoCE v2"),
            index - 1: (gid_text(address), "IB/RoCE v1"), index: (gid_text(address), "RoCE v2")}  # fmt: skip
    # Whatever an earlier install left (the index before it moved) goes first.
    shutil.rmtree(os.path.join(port, "gid_attrs"), ignore_errors=True)
    write(os.path.join(port, "state"), "4: ACTIVE")
    for each in range(INDICES):
        gid, kind = used.get(each, (ZERO, None))
        write(os.path.join(port, "gids", str(each)), gid)
        if kind:
            write(os.path.join(port, "gid_attrs", "types", str(each)), kind)
            write(os.path.join(port, "gid_attrs", "ndevs", str(each)), NETDEV)
    write(os.path.join(sysfs, "class", "infiniband_verbs", VERBS, "ibdev"), DEVICE)
    for name in (VERBS, "rdma_cm"):
        make_node(os.path.join(dev, "infiniband", name), node)


def remove(sysfs: str, dev: str) -> None:
    for path in (
        os.path.join(sysfs, "class", "infiniband", DEVICE),
        os.path.join(sysfs, "class", "infiniband_verbs", VERBS),
        os.path.join(dev, "infiniband"),
    ):
        shutil.rmtree(path, ignore_errors=True)
    for path in (
        os.path.join(sysfs, "class", "infiniband"),
        os.path.join(sysfs, "class", "infiniband_verbs"),
    ):
        os.makedirs(path, exist_ok=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rdma_device.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("install", "remove"):
        each = sub.add_parser(name)
        each.add_argument("--sysfs", required=True, help="the fake sysfs root")
        each.add_argument("--dev", required=True, help="where the device nodes go (/dev)")
        if name == "install":
            each.add_argument("--address", required=True, help="the member's own IPv4 address on the link")
            each.add_argument("--gid-index", type=int, default=3, help="the RoCE v2 GID index of the address")
            each.add_argument("--node", choices=("char", "file"), default="char")
    args = parser.parse_args(argv)
    if args.command == "remove":
        remove(args.sysfs, args.dev)
        return 0
    try:
        address = ipaddress.IPv4Address(args.address)
    except ValueError:
        parser.error(f"--address must be an IPv4 address: {args.address!r}")
    if not 3 <= args.gid_index < INDICES:
        parser.error(f"--gid-index must be 3 to {INDICES - 1}: {args.gid_index}")
    install(args.sysfs, args.dev, address, args.gid_index, args.node)
    return 0


if __name__ == "__main__":
    sys.exit(main())
