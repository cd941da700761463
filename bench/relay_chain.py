#!/usr/bin/env python3
"""The relay's transfer alone, without Ansible: how much time each hop of the chain adds to one Spark's.

On loopback, in one process: the hub stand-in (tests/standins/hub, a subprocess) serves one file of
--size-mib random bytes over a link capped at --link-mbps (shared by all connections, --rtt-ms of round
trip). One Spark fetches it alone (module_utils/_weights/hub.py's HubFile, what ds4.fleet.ds4_hub_file runs);
then, for each fleet size N of --sizes, N Sparks fetch it at once, each with the sources that the role's
plan gives it (_weights.relay.plan with relay true: a chain behind the seed) and each serving what it receives
(_weights.relay.PeerServer with the file as a relay, its upload held to the hub link's rate, as
ds4_weights_peer_rate does). Each Spark is a directory and a thread of its own.

It prints each Spark's time over one Spark's (the seed first, the last of the chain last), the hub bytes
over the file size, the CPU seconds per GB a Spark spent (the process's, over N copies: fetching, hashing
and serving) and the bytes each Spark served, and asserts nothing. bench/fleet_weights.py measures
the same chain through the role on sandbox Sparks, where Ansible's tasks add their own time; the
difference between the two is Ansible's share.

    .venv/bin/python bench/relay_chain.py [--size-mib 48] [--link-mbps 4] [--rtt-ms 20] [--sizes 3 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path[:0] = [
    str(Path(__file__).resolve().parent),
    str(Path(__file__).resolve().parents[1] / "collections"),
]

from ansible_collections.ds4.fleet.plugins.module_utils._weights.hub import HubFile  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import FileRef  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.relay import PeerServer, plan  # noqa: E402
from fetch_throughput import NAME, REPO, Standin, make_data  # noqa: E402

LOOPBACK = "127.0.0.1"


def hub_bytes(hub):
    with urllib.request.urlopen(f"{hub.endpoint}/_standin/stats", timeout=10) as answer:
        return json.load(answer)["content_bytes"]


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def fetch(hub, blob, dest, peers=()):
    return HubFile(
        FileRef(hub.endpoint, REPO, "main", blob.name), str(dest), expected_size=blob.size,
        expected_sha256=blob.sha256, retries=5, retry_delay=0.1, peers=list(peers),
    ).ensure()  # fmt: skip


def fleet(hub, blob, work, n, rate_bps):
    """N Sparks fetching at once as the plan says, each relaying: (seconds each took, bytes each served).

    The plan names each Spark's peers by address and port; here every Spark is on loopback with a port of
    its own, so its server's URL stands in for the plan's address."""
    names = [f"spark{i:02d}" for i in range(1, n + 1)]
    dirs = {name: work / f"n{n}-{name}" for name in names}
    servers = {}
    try:
        for name in names:
            dirs[name].mkdir()
            servers[name] = PeerServer(
                str(dirs[name]), LOOPBACK, 0, (LOOPBACK,), rate_bps, [blob.name]
            ).start()
        hosts = [
            {"name": name, "address": name, "wanted": [blob.name], "fetch": [blob.name]} for name in names
        ]
        the_plan = plan(hosts, 0, relay=True)["hosts"]
        url = {f"http://{name}:0": f"http://{LOOPBACK}:{servers[name].port}" for name in names}
        took = {}
        started, cpu = time.monotonic(), cpu_seconds()

        def one(name):
            peers = [url[u] for u in the_plan[name]["peers"].get(blob.name, [])]
            fetch(hub, blob, dirs[name], peers)
            took[name] = time.monotonic() - started

        threads = [threading.Thread(target=one, args=(name,)) for name in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        used = cpu_seconds() - cpu
        return [took[name] for name in names], [sum(servers[name].served.values()) for name in names], used
    finally:
        for server in servers.values():
            server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=48, help="the file, MiB (default 48)")
    parser.add_argument("--link-mbps", type=float, default=4, help="the hub link and each upload, MB/s")
    parser.add_argument("--rtt-ms", type=float, default=20, help="the hub's round trip (default 20)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[3, 5], help="fleet sizes (default 3 5)")
    args = parser.parse_args()
    rate = int(args.link_mbps * 1e6)

    work = Path(
        tempfile.mkdtemp(prefix="ds4-bench-chain-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    )
    hub = None
    try:
        blob = make_data(work / "hub", {NAME: args.size_mib << 20})[NAME]
        hub = Standin(work / "hub", work / "standin.log")
        hub.network(link_bps=rate, rtt_ms=args.rtt_ms)
        print(
            f"{blob.size:,} bytes; hub link and each Spark's upload {args.link_mbps} MB/s, round trip"
            f" {args.rtt_ms} ms; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        (work / "one").mkdir()
        before, started, cpu = hub_bytes(hub), time.monotonic(), cpu_seconds()
        fetch(hub, blob, work / "one")
        one, one_cpu = time.monotonic() - started, (cpu_seconds() - cpu) / blob.size * 1e9
        print(
            f"one Spark: {one:.2f} s, {one_cpu:.2f} CPU s/GB, hub bytes / file"
            f" {(hub_bytes(hub) - before) / blob.size:.2f}"
        )
        print(
            "{:<4}{:>13}{:>14}{:>13}  {}".format(
                "N", "fleet / one", "added a hop", "hub / file", "each / one"
            )
        )
        for n in args.sizes:
            before = hub_bytes(hub)
            took, served, used = fleet(hub, blob, work, n, rate)
            hop = (max(took) - took[0]) / (n - 1) if n > 1 else 0.0
            each = " ".join(f"{t / one:.3f}" for t in took)
            print(
                f"{n:<4}{max(took) / one:>13.3f}{hop:>12.2f} s{(hub_bytes(hub) - before) / blob.size:>13.2f}"
                f"{used / (n * blob.size) * 1e9:>12.2f}"
                f"  {each}; served / file: {' '.join(f'{s / blob.size:.2f}' for s in served)}",
                flush=True,
            )
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
    finally:
        if hub is not None:
            hub.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
