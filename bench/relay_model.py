#!/usr/bin/env python3
"""A model of the fleet's weight fetch for N Sparks (up to 32), from the role's plan (_weights.relay.plan).

Each Spark's sources come from _weights/relay.py's plan, the role's own, for N Sparks that all need
the model (one file of --model-gb). A simple fluid model of the links then gives each Spark's finish:

- the hub link carries --hub-mbps, shared by the Sparks that fetch from the hub at the same time;
- each Spark uploads --upload-mbps (ds4_weights_peer_rate, or its LAN link), shared by the Sparks that take
  the file from it; downloads are not the limit;
- two waves: a Spark's receivers begin when the first wave (the hub fetches) has ended, each at its
  source's upload share;
- the relay: a Spark receives at the lesser of its source's own rate and its source's upload share, and
  begins --hop-s after its source (the relay's lag: the list of held ranges is published every 0.1 s and a
  request waits at the relay until they come; bench/relay_chain.py measured 0.12 to 0.14 s a hop); a binary
  tree (each Spark relaying to two) is shown beside the chain the plan makes, to say why the plan chains.

It prints the fleet's time over one Spark's for each N and asserts nothing. To compare with a measured run
(bench/fleet_weights.py), give its model, link and fleet sizes (--check-n) and the time Ansible's own
tasks add to every run (--overhead-s), which the ratios then include.

    .venv/bin/python bench/relay_model.py [--model-gb 93] [--hub-mbps 117] [--upload-mbps 117] [--hop-s 0.14]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collections"))

from ansible_collections.ds4.fleet.plugins.module_utils._weights.relay import peer_url, plan  # noqa: E402

SIZES = (1, 2, 3, 5, 8, 16, 32)
PORT = 18090


def hosts(n):
    return [
        {"name": f"spark{i:02d}", "address": f"10.0.0.{i}", "wanted": ["model"], "fetch": ["model"]}
        for i in range(1, n + 1)
    ]


def first_sources(n, relay):
    """Spark -> the Spark it takes the file from first (None: the hub), from the plan."""
    by_url = {peer_url(h["address"], PORT): h["name"] for h in hosts(n)}
    spark = plan(hosts(n), PORT, relay=relay)["hosts"]
    return {name: (by_url[entry["peers"]["model"][0]] if "model" in entry["peers"] else None)
            for name, entry in spark.items()}  # fmt: skip


def binary_tree(n):
    names = [h["name"] for h in hosts(n)]
    return {name: (names[(i - 1) // 2] if i else None) for i, name in enumerate(names)}


def fleet_time(sources, size, hub, upload, hop, relay):
    """Seconds until the last Spark holds the file, by the model above."""
    from_hub = [s for s, src in sources.items() if src is None]
    receivers = {}
    for spark, src in sources.items():
        if src is not None:
            receivers.setdefault(src, []).append(spark)
    rate, start, finish = {}, {}, {}
    for spark in from_hub:
        rate[spark], start[spark] = hub / len(from_hub), 0.0
        finish[spark] = size / rate[spark]
    wave_end = max(finish.values())
    pending = [s for s in sources if s not in rate]
    while pending:
        for spark in list(pending):
            src = sources[spark]
            if src not in rate:
                continue
            share = upload / len(receivers[src])
            if relay:
                rate[spark], start[spark] = min(rate[src], share), start[src] + hop
            else:
                rate[spark], start[spark] = share, wave_end
            finish[spark] = max(start[spark] + size / rate[spark], finish[src] + (hop if relay else 0))
            pending.remove(spark)
    return max(finish.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-gb", type=float, default=93.0)
    parser.add_argument("--hub-mbps", type=float, default=117.0, help="hub link, MB/s (1 Gbit/s: ~117)")
    parser.add_argument("--upload-mbps", type=float, default=117.0, help="each Spark's upload, MB/s")
    parser.add_argument("--hop-s", type=float, default=0.14, help="a relay's lag behind its source, s")
    parser.add_argument("--check-n", type=int, nargs="*", default=[], help="fleet sizes measured")
    parser.add_argument("--overhead-s", type=float, default=0.0, help="Ansible's own time in a measured run")
    args = parser.parse_args()
    size, hub, upload = args.model_gb * 1e9, args.hub_mbps * 1e6, args.upload_mbps * 1e6
    one = size / hub
    print(
        f"model {args.model_gb:g} GB, hub link {args.hub_mbps:g} MB/s, each Spark's upload "
        f"{args.upload_mbps:g} MB/s, a relay {args.hop_s:g} s behind its source; one Spark: {one:.0f} s"
    )
    print("{:>4}{:>12}{:>12}{:>12}{:>14}".format("N", "peers off", "two waves", "relay", "binary tree"))
    for n in sorted(set(SIZES) | set(args.check_n)):
        off = n * one
        waves = fleet_time(first_sources(n, relay=False), size, hub, upload, 0.0, relay=False)
        chain = fleet_time(first_sources(n, relay=True), size, hub, upload, args.hop_s, relay=True)
        tree = fleet_time(binary_tree(n), size, hub, upload, args.hop_s, relay=True)
        extra = args.overhead_s
        print(
            f"{n:>4}"
            + "".join(f"{(t + extra) / (one + extra):>12.2f}" for t in (off, waves, chain))
            + f"{(tree + extra) / (one + extra):>14.2f}"
        )


if __name__ == "__main__":
    main()
