#!/usr/bin/env python3
"""A pair of Sparks serving Q4 against one Spark serving Q2: wall time to serving and hub bytes, side by side.

On sandbox Sparks of its own (tests/sandbox/sandbox.py --prefix bench-pair-, removed at the end): spark01
alone, and spark04 and spark05 cabled as the sandbox's pair01 (its link, its addresses: PAIR_LINKS), the
built-in sandbox's inventory variables (ds4_pairs, pair01.yml's ds4_quantization q4). In one run:

1. site.yml -l spark01 on a bare Spark: the time until one Spark serves Q2 (base and drafter);
2. site.yml -l pair01 on two bare Sparks: the time until the pair serves Q4 through its coordinator.

Both runs build the engine, fetch the weights, start and smoke-test the service: the wall time is the
playbook's, Ansible's start-up included. So that the sizes mean something, each file of the catalog is the
stand-in hub's real GGUF (the engine stand-in reads its header) padded with zeros to the published size
divided by --scale (sparse in the forge, served by a hub stand-in of the bench's own whose link is capped at
--link-kbps); each Spark's /var/lib/ds4 is a tmpfs. The Sparks' memory (ds4_spark_memory_bytes) is set
between the two models, so that one Spark holds Q2 and refuses Q4 and each member of the pair holds its
slice, as on real Sparks. Hub bytes come from the stand-in's own count (GET /_standin/stats).

It prints each side's wall time, the fetch tasks' seconds (profile_tasks' recap), hub bytes / model bytes,
and the pair / one ratios: model size, wall time, fetch seconds, wall time per GiB of model. It asserts
nothing.

    .venv/bin/python bench/pair.py [--prefix bench-pair-] [--scale 1000] [--link-kbps 4000] [--rtt-ms 20]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "collections"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "sandbox"))

from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import model_files  # noqa: E402
from fleet_upgrade import Fleet  # noqa: E402
from fleet_weights import BIG_DATA, BIG_REPO, MIB, fetch_seconds, hub, run, serve_big_hub  # noqa: E402
from sandbox import PAIR_LINKS  # noqa: E402
from sandbox_hosts import ROOT, podman, sandbox_down  # noqa: E402

GIB = 1 << 30
ONE, PAIR = "spark01", ("spark04", "spark05")
SANDBOX_VARS = ROOT / "inventory" / "sandbox" / "group_vars"
# Where the forge holds the stand-in hub's files (tests/sandbox/sandbox.py mounts .sandbox/forge there).
FORGE_HUB = "/srv/forge/hub"
# The engine's floor that the fit keeps free (ds4_mem_floor_gb's default, 4 GiB).
FLOOR = 4 * GIB


def shipped_sizes():
    """The published size of each file of 0731 the bench pads to: name -> bytes (the shipped catalog's
    sizes, the quantizations' approx_bytes)."""
    doc = yaml.safe_load((ROOT / "roles/ds4_common/defaults/main.yml").read_text())["ds4_model_catalog"]
    entry = doc["0731"]
    sizes = {f["name"]: f["size"] for f in entry["files"].values()}
    sizes.update({q["name"]: q["approx_bytes"] for q in entry["quantizations"].values() if q.get("name")})
    return sizes


def padded_sha256(real: bytes, size: int) -> str:
    digest, block = hashlib.sha256(real), bytes(16 * MIB)
    for offset in range(len(real), size, len(block)):
        digest.update(block[: min(len(block), size - offset)])
    return digest.hexdigest()


def serve_padded_models(fleet, scale):
    """The sandbox catalog's 0731 files (q2 base, drafter, q4 base), each its stand-in GGUF padded with zeros
    to the published size / `scale`, served by a hub stand-in of their own in the bench's forge; the
    endpoint and the catalog that makes the roles fetch them."""
    catalog = yaml.safe_load((SANDBOX_VARS / "all.yml").read_text())["ds4_model_catalog"]
    entry = catalog["0731"]
    published = shipped_sizes()
    hub_doc = json.loads((ROOT / ".sandbox" / "forge" / "hub" / "hub.json").read_text())
    blobs = {
        name: f["blob"]
        for repo in hub_doc["repos"].values()
        for commit in repo["commits"].values()
        for name, f in commit["files"].items()
    }
    forge = f"{fleet.prefix}forge"
    files = {}
    for f in (*entry["files"].values(), entry["quantizations"]["q4"]):
        real = (ROOT / ".sandbox" / "forge" / "hub" / blobs[f["name"]]).read_bytes()
        size = max(len(real), published[f["name"]] // scale)
        blob = f"blobs/{len(files)}"
        files[f["name"]] = {"blob": blob, "size": size, "sha256": padded_sha256(real, size)}
        padded = f"{BIG_DATA}/{blob}"
        source = f"{FORGE_HUB}/{blobs[f['name']]}"
        podman("exec", forge, "sh", "-c", f"mkdir -p {BIG_DATA}/blobs && cp {source} {padded}")
        podman("exec", forge, "truncate", "-s", str(size), padded)
    endpoint, commit = serve_big_hub(fleet, files)
    for f in (*entry["files"].values(), entry["quantizations"]["q4"]):
        served = files[f["name"]]
        f.update(repo=BIG_REPO, revision=commit, size=served["size"], sha256=served["sha256"])
    entry["quantizations"]["q4"]["approx_bytes"] = entry["quantizations"]["q4"]["size"]
    return endpoint, catalog


def model_bytes(catalog, quantization):
    return sum(f["size"] for f in model_files(catalog, "0731", "dspark", quantization))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="bench-pair-", help="the sandbox's name prefix")
    parser.add_argument(
        "--scale", type=int, default=1000, help="published bytes per bench byte (default 1000: Q4 ~160 MB)"
    )
    parser.add_argument("--link-kbps", type=float, default=4000, help="the hub link, kB/s (default 4000)")
    parser.add_argument("--rtt-ms", type=float, default=20, help="round trip to the hub (default 20)")
    args = parser.parse_args()
    # Each task's seconds in the output (its recap), for the fetch tasks' share of the wall time.
    os.environ.update(
        ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="all"
    )
    q4 = max(shipped_sizes().values())
    # Room for Q4 and its records on each Spark's tmpfs, in memory rather than on disk.
    disk = f"{2 * q4 // args.scale // MIB + 64}m"
    platforms = [{"name": ONE, "small_disk": disk}] + [
        {"name": h, "small_disk": disk, "cap_add": ["NET_ADMIN"], "pair_link": PAIR_LINKS[h]} for h in PAIR
    ]
    with tempfile.TemporaryDirectory(prefix="ds4-bench-") as work:
        try:
            fleet = Fleet(args.prefix, Path(work), "--platforms", json.dumps(platforms), hosts=(ONE, *PAIR))
            groups = json.loads((fleet.inventory / "hosts.yml").read_text())
            groups["pair01"] = {"hosts": {h: None for h in PAIR}}
            (fleet.inventory / "hosts.yml").write_text(json.dumps(groups))
            endpoint, catalog = serve_padded_models(fleet, args.scale)
            one_size, pair_size = model_bytes(catalog, "q2"), model_bytes(catalog, "q4")
            variables = {
                "ds4_hf_endpoint": endpoint,
                "ds4_model_catalog": catalog,
                # One Spark holds Q2, not Q4; each member holds its slice of Q4.
                "ds4_spark_memory_bytes": FLOOR + (one_size + pair_size) // 2,
                "ds4_weights_space_bytes": pair_size,
            }
            (Path(work) / "model.json").write_text(json.dumps(variables))
            extra = ("-e", f"@{Path(work) / 'model.json'}")
            link = int(args.link_kbps * 1000)
            hub(fleet, endpoint, "PUT", "/_standin/network", {"link_bps": link, "rtt_ms": args.rtt_ms})
            print(
                f"one Spark: q2 and drafter, {one_size:,} bytes; pair: q4 and drafter, {pair_size:,} bytes "
                f"(published sizes / {args.scale}); hub link {link / 1000:.0f} kB/s, round trip "
                f"{args.rtt_ms} ms; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            one, one_hub, one_out = run(fleet, endpoint, "site.yml", *extra, "-l", ONE)
            print(f"one Spark q2: {one:.1f} s", flush=True)
            pair, pair_hub, pair_out = run(fleet, endpoint, "site.yml", *extra, "-l", "pair01")
            print(f"pair q4: {pair:.1f} s", flush=True)
            one_fetch, pair_fetch = fetch_seconds(one_out), fetch_seconds(pair_out)
            print(
                f"{'':<14}{'model MiB':>12}{'wall s':>9}{'fetch s':>10}{'hub / model':>13}{'wall s/GiB':>12}"
            )
            rows = (
                ("one Spark q2", one_size, one, one_fetch, one_hub),
                ("pair q4", pair_size, pair, pair_fetch, pair_hub),
            )
            for label, size, wall, fetch, nbytes in rows:
                print(
                    f"{label:<14}{size / MIB:>12.1f}{wall:>9.1f}{fetch:>10.1f}{nbytes / size:>13.2f}"
                    f"{wall / (size / GIB):>12.1f}"
                )
            print(
                f"pair / one: model {pair_size / one_size:.2f}, wall {pair / one:.2f}, fetch "
                f"{pair_fetch / one_fetch:.2f}, wall per GiB {(pair / pair_size) / (one / one_size):.2f}"
            )
            print(f"load average {os.getloadavg()[0]:.1f} at the end")
        finally:
            sandbox_down(args.prefix)


if __name__ == "__main__":
    main()
