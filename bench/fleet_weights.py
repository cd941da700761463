#!/usr/bin/env python3
"""Hub bytes and wall time of the weights phase on three Sparks, with and without peer distribution.

On three sandbox Sparks of their own (tests/sandbox/sandbox.py with --prefix; removed at the end), with the
hub stand-in's link capped (--link-kbps shared by all connections, --rtt-ms of round trip) and the LAN
between the Sparks as the sandbox's container network, the weights role (ds4_weights, the sandbox
catalog's 0731 set) runs on empty weight directories. The sandbox's files are smaller than one range, so
each comes over one connection: the link is left without a cap per connection, so that what the Sparks
share is the link, as 93 GB over 16 connections each do:

1. on spark01 alone (-l spark01): the one-Spark time;
2. on the three with ds4_weights_peers=false: each Spark fetches every file from the hub;
3. on the three with peer distribution (the default).

The hub's bytes come from the stand-in's own count (GET /_standin/stats). It prints hub bytes / model size
and fleet wall time / one Spark's for 2 and 3, and asserts nothing. The wall time is the playbook's,
Ansible's own start-up included; the sandbox's weights are small, so the link is capped to make the
transfer take seconds, as 93 GB do at 1 to 10 Gbit/s.

    .venv/bin/python bench/fleet_weights.py [--prefix bench-weights-] [--link-kbps 100] [--rtt-ms 20]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_upgrade import HOSTS, Fleet, playbook  # noqa: E402
from sandbox_hosts import ROOT, sandbox_down  # noqa: E402

GGUF = "/var/lib/ds4/gguf"
HUB = "http://forge:18080"
PLAY = """---
- name: Get the weights
  hosts: sparks
  gather_facts: false
  tasks:
    - name: Get the weights of the default generation and speculation mode
      ansible.builtin.include_role:
        name: ds4_weights
"""


def hub(fleet, method, path, body=None):
    data = f" -d '{json.dumps(body)}'" if body is not None else ""
    return json.loads(fleet.sh("spark01", f"curl -fsS -X {method} {HUB}{path}{data}"))


def model_size():
    """The bytes the role fetches by default: the 0731 base and its drafter (not the gated test file)."""
    doc = json.loads((ROOT / ".sandbox" / "forge" / "hub" / "hub.json").read_text())
    return sum(
        f["size"]
        for repo in doc["repos"].values()
        if not repo.get("gated")
        for commit in repo["commits"].values()
        for f in commit["files"].values()
        if (f.get("generation"), f.get("role")) in (("0731", "base"), ("0731", "dspark"))
    )


def run(fleet, play, *args):
    """Empty every Spark's weights, run the play; (wall seconds, hub bytes, output)."""
    for host in HOSTS:
        fleet.sh(host, f"rm -rf {GGUF}")
    before = hub(fleet, "GET", "/_standin/stats")["content_bytes"]
    wall, _, out = playbook(fleet, str(play), *args)
    if "failed=0" not in out or " failed=1" in out:
        raise SystemExit(f"bench: the weights play failed:\n{out[-3000:]}")
    return wall, hub(fleet, "GET", "/_standin/stats")["content_bytes"] - before, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="bench-weights-", help="the sandbox's name prefix")
    parser.add_argument("--link-kbps", type=float, default=100, help="the hub link, kB/s (default 100)")
    parser.add_argument("--rtt-ms", type=float, default=20, help="round trip to the hub (default 20)")
    args = parser.parse_args()
    link = int(args.link_kbps * 1000)
    with tempfile.TemporaryDirectory(prefix="ds4-bench-") as work:
        play = Path(work) / "weights.yml"
        play.write_text(PLAY)
        try:
            fleet = Fleet(args.prefix, Path(work))
            size = model_size()
            hub(fleet, "PUT", "/_standin/network", {"link_bps": link, "rtt_ms": args.rtt_ms})
            print(
                f"model (0731 base and drafter): {size:,} bytes; hub link {link / 1000:.0f} kB/s, "
                f"round trip {args.rtt_ms} ms"
            )
            one, one_bytes, _ = run(fleet, play, "-l", "spark01")
            print(f"one Spark: {one:.1f} s, hub bytes / model {one_bytes / size:.2f}")
            print("{:<22}{:>8}{:>14}{:>14}".format("fleet of 3", "wall s", "wall / one", "hub / model"))
            for label, extra in (("peers off", ("-e", "ds4_weights_peers=false")), ("peers on", ())):
                wall, nbytes, out = run(fleet, play, *extra)
                print(f"{label:<22}{wall:>8.1f}{wall / one:>14.2f}{nbytes / size:>14.2f}", flush=True)
            seeds = [
                line.strip(' ",') for line in out.splitlines() if " seeds " in line or " fetches " in line
            ]
            print("peer plan of the last run:\n  " + "\n  ".join(seeds))
        finally:
            sandbox_down(args.prefix)


if __name__ == "__main__":
    main()
