#!/usr/bin/env python3
"""Hub bytes and wall time of the weights phase on three Sparks, with and without peer distribution.

On three sandbox Sparks of their own (tests/sandbox/sandbox.py with --prefix; removed at the end), with the
hub's link capped (--link-kbps shared by all connections, --rtt-ms of round trip) and the LAN between the
Sparks as the sandbox's container network, the weights role (ds4_weights, the 0731 base and drafter) runs on
empty weight directories:

1. on spark01 alone (-l spark01): the one-Spark time;
2. on the three with ds4_weights_peers=false: each Spark fetches every file from the hub;
3. on the three with peer distribution (the default).

The model is made large enough that the transfer, not Ansible, takes the time (--model-mib, ~1/13 of it
the drafter, as 6.97 of 93 GB): sparse files of zeros in the bench's forge container, served by a second
hub stand-in there (port 18180) under the catalog's real names, and a catalog (-e) with their sizes and
sha256; each Spark's /var/lib/ds4 is a tmpfs of its own, so that the copies spare the disk.
--model-mib 0 takes the sandbox's own small files from the forge's hub instead (each comes over one
connection). The hub's bytes come from the stand-in's own count (GET /_standin/stats). It prints hub bytes
/ model size and fleet wall time / one Spark's for 2 and 3, and asserts nothing. The wall time is the
playbook's, Ansible's own start-up included.

    .venv/bin/python bench/fleet_weights.py [--prefix bench-weights-] [--model-mib 352] [--link-kbps 2000]
        [--rtt-ms 20]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_upgrade import HOSTS, Fleet, playbook  # noqa: E402
from sandbox_hosts import ROOT, podman, sandbox_down  # noqa: E402

GGUF = "/var/lib/ds4/gguf"
HUB = "http://forge:18080"
# The bench's own hub stand-in in the forge container, over the sparse files, and where they lie there.
BIG_PORT, BIG_STORAGE_PORT = 18180, 18181
BIG_DATA = "/tmp/ds4-bench-hub"
BIG_REPO = "ds4-bench/weights"
MIB = 1 << 20
PLAY = """---
- name: Get the weights
  hosts: sparks
  gather_facts: false
  tasks:
    - name: Get the weights of the default generation and speculation mode
      ansible.builtin.include_role:
        name: ds4_weights
"""


def hub(fleet, endpoint, method, path, body=None):
    data = f" -d '{json.dumps(body)}'" if body is not None else ""
    return json.loads(fleet.sh("spark01", f"curl -fsS -X {method} {endpoint}{path}{data}"))


def sandbox_catalog():
    """The sandbox's 0731 entries (group_vars), with their roles."""
    doc = json.loads((ROOT / ".sandbox" / "forge" / "hub" / "hub.json").read_text())
    return {
        f["role"]: dict(f, name=name)
        for repo in doc["repos"].values()
        if not repo.get("gated")
        for commit in repo["commits"].values()
        for name, f in commit["files"].items()
        if (f.get("generation"), f.get("role")) in (("0731", "base"), ("0731", "dspark"))
    }


def zeros_sha256(size):
    digest, block = hashlib.sha256(), bytes(16 * MIB)
    for offset in range(0, size, len(block)):
        digest.update(block[: min(len(block), size - offset)])
    return digest.hexdigest()


def serve_big_model(fleet, mib):
    """Sparse files of `mib` MiB in all under the 0731 names, served by a hub stand-in of their own in the
    bench's forge; the extra variables that make the role fetch them (endpoint and catalog)."""
    drafter = max(1, mib // 13) * MIB
    sizes = {"base": mib * MIB - drafter, "dspark": drafter}
    names = {role: entry["name"] for role, entry in sandbox_catalog().items()}
    files = {
        names[role]: {"blob": f"blobs/{role}", "size": size, "sha256": zeros_sha256(size)}
        for role, size in sizes.items()
    }
    commit = hashlib.sha1(json.dumps(files, sort_keys=True).encode()).hexdigest()
    repo = {"gated": False, "refs": {"main": commit}, "commits": {commit: {"files": files}}}
    doc = {"format": 1, "tokens": [], "repos": {BIG_REPO: repo}}
    forge = f"{fleet.prefix}forge"
    truncate = " && ".join(f"truncate -s {size} {BIG_DATA}/blobs/{role}" for role, size in sizes.items())
    podman("exec", forge, "sh", "-c", f"mkdir -p {BIG_DATA}/blobs && {truncate}")
    podman("exec", forge, "sh", "-c", f"cat > {BIG_DATA}/hub.json <<'EOF'\n{json.dumps(doc)}\nEOF")
    podman(
        "exec", "-d", forge, "python3", "/srv/standins/hub/hubstandin.py", "--data", BIG_DATA,
        "--bind", "0.0.0.0", "--port", str(BIG_PORT), "--storage-port", str(BIG_STORAGE_PORT),
    )  # fmt: skip
    endpoint = f"http://forge:{BIG_PORT}"
    # Until it listens (a bound, not a pace).
    fleet.sh(
        "spark01", f"for i in $(seq 150); do curl -fs {endpoint}/_standin/stats && exit; sleep 0.2; done"
    )
    catalog = {
        "0731": {
            "description": "the bench's sparse stand-in files",
            "files": {
                role: {
                    "name": names[role],
                    "repo": BIG_REPO,
                    "revision": commit,
                    "size": size,
                    "sha256": files[names[role]]["sha256"],
                }  # fmt: skip
                for role, size in sizes.items()
            },
        }
    }
    return endpoint, sum(sizes.values()), {"ds4_hf_endpoint": endpoint, "ds4_model_catalog": catalog}


def run(fleet, endpoint, play, *args):
    """Empty every Spark's weights, run the play; (wall seconds, hub bytes, output)."""
    for host in HOSTS:
        fleet.sh(host, f"rm -rf {GGUF}")
    before = hub(fleet, endpoint, "GET", "/_standin/stats")["content_bytes"]
    wall, _, out = playbook(fleet, str(play), *args)
    if "failed=0" not in out or " failed=1" in out:
        raise SystemExit(f"bench: the weights play failed:\n{out[-3000:]}")
    return wall, hub(fleet, endpoint, "GET", "/_standin/stats")["content_bytes"] - before, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="bench-weights-", help="the sandbox's name prefix")
    parser.add_argument(
        "--model-mib", type=int, default=352, help="model size, MiB (default 352; 0: the sandbox's files)"
    )
    parser.add_argument(
        "--link-kbps",
        type=float,
        default=2000,
        help="the hub link, kB/s (default 2000: ~3 min of transfer a Spark)",
    )
    parser.add_argument("--rtt-ms", type=float, default=20, help="round trip to the hub (default 20)")
    args = parser.parse_args()
    link = int(args.link_kbps * 1000)
    with tempfile.TemporaryDirectory(prefix="ds4-bench-") as work:
        play = Path(work) / "weights.yml"
        play.write_text(PLAY)
        try:
            # Room for the model and its records, in memory rather than on disk.
            disk = f"{args.model_mib * 5 // 4 + 64}m"
            options = [o for h in HOSTS for o in ("--small-disk", f"{h}={disk}")] if args.model_mib else []
            fleet = Fleet(args.prefix, Path(work), *options)
            extra = []
            if args.model_mib:
                endpoint, size, variables = serve_big_model(fleet, args.model_mib)
                (Path(work) / "model.json").write_text(json.dumps(variables))
                extra = ["-e", f"@{Path(work) / 'model.json'}"]
            else:
                endpoint, size = HUB, sum(f["size"] for f in sandbox_catalog().values())
            hub(fleet, endpoint, "PUT", "/_standin/network", {"link_bps": link, "rtt_ms": args.rtt_ms})
            print(
                f"model (0731 base and drafter): {size:,} bytes; hub link {link / 1000:.0f} kB/s, "
                f"round trip {args.rtt_ms} ms; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            one, one_bytes, _ = run(fleet, endpoint, play, *extra, "-l", "spark01")
            print(f"one Spark: {one:.1f} s, hub bytes / model {one_bytes / size:.2f}", flush=True)
            print("{:<22}{:>8}{:>14}{:>14}".format("fleet of 3", "wall s", "wall / one", "hub / model"))
            for label, more in (("peers off", ("-e", "ds4_weights_peers=false")), ("peers on", ())):
                wall, nbytes, out = run(fleet, endpoint, play, *extra, *more)
                print(f"{label:<22}{wall:>8.1f}{wall / one:>14.2f}{nbytes / size:>14.2f}", flush=True)
            seeds = [
                line.strip(' ",') for line in out.splitlines() if " seeds " in line or " fetches " in line
            ]
            print("peer plan of the last run:\n  " + "\n  ".join(seeds))
            print(f"load average {os.getloadavg()[0]:.1f} at the end")
        finally:
            sandbox_down(args.prefix)


if __name__ == "__main__":
    main()
