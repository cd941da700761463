#!/usr/bin/env python3
"""The pair in pipeline mode and in tensor mode against one Spark: wall time to serving, hub bytes, decode.

On sandbox Sparks of its own (tests/sandbox/sandbox.py --prefix bench-pair-, removed at the end, even when a
run fails): spark01 alone, and spark04 and spark05 cabled as the sandbox's pair01 (its link, its addresses
and the members' stand-in RDMA devices: PAIR_LINKS), the built-in sandbox's inventory variables (ds4_pairs,
pair01.yml's ds4_quantization q4). In one run:

1. site.yml -l spark01 on a bare Spark: the time until one Spark serves Q2 (base and drafter);
2. site.yml -l pair01 on two bare Sparks: the time until the pair serves Q4 through its coordinator, in the
   pipeline mode (the fork's engine, as the sandbox's pair runs);
3. the pair's two Sparks made anew (bare), then site.yml -l pair01 in tensor mode over rdma (upstream's
   engine at a commit, Q2, which the tensor mode serves and Q4 not: docs/pair.md, "Which mode"; as
   molecule/pair/tests/test_pair_tensor.py switches the sandbox's pair): the time until it serves.

Each run builds the engine, fetches the weights, starts and smoke-tests the service: the wall time is the
playbook's, Ansible's start-up included. So that the sizes mean something, each file of the catalog is the
stand-in hub's real GGUF (the engine stand-in reads its header) padded with zeros to the published size
divided by --scale (a file published without a size, upstream's DSpark support file, keeps the stand-in's),
sparse in the forge and served by a hub stand-in of the bench's own whose link is capped at --link-kbps;
each Spark's /var/lib/ds4 is a tmpfs. The Sparks' memory (ds4_spark_memory_bytes) is set between the two
models, so that one Spark holds Q2 and refuses Q4 and each member of the pair holds its share, as on real
Sparks. Hub bytes come from the stand-in's own count (GET /_standin/stats).

Once each serves, --requests streamed chat completions of --max-tokens tokens each (the same prompt) are
sent to its API on the Spark itself (the pair's coordinator): the decode rate is their tokens over the
seconds from each answer's first event to its last. For that the stand-in engine is paced at a GB10's
published one-Spark figures times the sandbox's ds4_verify_reference_scale (pace.json, as the verify tests
pace it), on which it applies its own factors for a pair: the pipeline's published 11.4 of 20.0 tok/s, the
tensor mode's 26.0 of 20.0 (with DSpark 44.0 of 27.7). The "paced" column is that figure, a ceiling: a
measured rate below it is this machine's load.

It prints each side's wall time, the fetch tasks' seconds (profile_tasks' recap), hub bytes / model bytes,
the decode rate, and the ratios pipeline / one, tensor / one and tensor / pipeline: model size, wall time,
fetch seconds, wall time per GiB of model, decode rate. It asserts nothing.

    .venv/bin/python bench/pair.py [--prefix bench-pair-] [--scale 1000] [--link-kbps 4000] [--rtt-ms 20]
        [--speculation dspark] [--requests 5] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
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
from sandbox_hosts import ROOT, podman, sandbox_down, sandbox_up  # noqa: E402

GIB = 1 << 30
ONE, PAIR = "spark01", ("spark04", "spark05")
COORDINATOR = PAIR[0]
SANDBOX_VARS = ROOT / "inventory" / "sandbox" / "group_vars"
# Where the forge holds the stand-in hub's files (tests/sandbox/sandbox.py mounts .sandbox/forge there).
FORGE_HUB = "/srv/forge/hub"
# Upstream's stand-in commits (tests/standins/engine/make_repo.py), the first of which builds and serves.
UPSTREAM_COMMITS = ROOT / ".sandbox" / "forge" / "git" / "ds4-upstream-commits.json"
# The engine's floor that the fit keeps free (ds4_mem_floor_gb's default, 4 GiB).
FLOOR = 4 * GIB
# Where the stand-in engine reads its pacing (DS4_STANDIN_HOLD_DIR's default) and what it is asked: the
# numbers it answers one a token, as the speed measurement's decode asks them.
PACE = "/run/ds4-standin/pace.json"
PROMPT = "Count upward from 1 to 500, one number per line."
# Streamed chat completions on the Spark itself: each answer's tokens (its usage) and the seconds from its
# first event (sent once the prompt is read) to its last with a choice, as JSON lines.
DECODE_CLIENT = """
import json, sys, time, urllib.request
requests, max_tokens, prompt = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
body = json.dumps({"model": "deepseek-v4-flash", "max_tokens": max_tokens, "stream": True,
                   "stream_options": {"include_usage": True},
                   "messages": [{"role": "user", "content": prompt}]}).encode()
for _ in range(requests):
    request = urllib.request.Request("http://127.0.0.1:8000/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    first = last = tokens = None
    with urllib.request.urlopen(request, timeout=120) as response:
        for raw in response:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            if event.get("choices"):
                first = first or time.monotonic()
                last = time.monotonic()
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    print(json.dumps({"tokens": tokens, "seconds": last - first}))
"""


def shipped_sizes():
    """The published size of each file of 0731 the bench pads to: name -> bytes (the shipped catalog's
    sizes, the quantizations' approx_bytes; a file published without one is left out)."""
    doc = yaml.safe_load((ROOT / "roles/ds4_common/defaults/main.yml").read_text())["ds4_model_catalog"]
    entry = doc["0731"]
    sizes = {f["name"]: f["size"] for f in entry["files"].values()}
    sizes.update({q["name"]: q["approx_bytes"] for q in entry["quantizations"].values() if q.get("name")})
    return {name: size for name, size in sizes.items() if size}


def padded_sha256(real: bytes, size: int) -> str:
    digest, block = hashlib.sha256(real), bytes(16 * MIB)
    for offset in range(len(real), size, len(block)):
        digest.update(block[: min(len(block), size - offset)])
    return digest.hexdigest()


def serve_padded_models(fleet, scale):
    """The sandbox catalog's 0731 files (q2 base, drafter, upstream's support file, q4 base), each its
    stand-in GGUF padded with zeros to the published size / `scale`, served by a hub stand-in of their own
    in the bench's forge; the endpoint and the catalog that makes the roles fetch them."""
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
        size = max(len(real), published.get(f["name"], 0) // scale)
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


def model_bytes(catalog, speculation, quantization, lineage="fork"):
    return sum(f["size"] for f in model_files(catalog, "0731", speculation, quantization, lineage=lineage))


def tensor_settings():
    """What switches the sandbox's pair to the tensor mode over rdma (docs/sandbox.md, "The pair in tensor
    mode"): upstream's engine at its first stand-in commit, Q2, both members' link addresses."""
    commit = json.loads(UPSTREAM_COMMITS.read_text())["first"]
    address = {host: PAIR_LINKS[host]["address"].split("/")[0] for host in PAIR}
    return {
        "ds4_engine_repo": "git://forge/ds4-upstream.git",
        "ds4_engine_branch": "main",
        "ds4_release": f"g{commit[:12]}",
        "ds4_release_commit": commit,
        "ds4_quantization": "q2",
        "ds4_pairs": {
            "pair01": {
                "coordinator": {"host": PAIR[0], "address": address[PAIR[0]]},
                "worker": {"host": PAIR[1], "address": address[PAIR[1]]},
                "mode": "tensor",
                "transport": "rdma",
            }
        },
    }


def paced_rates(catalog, speculation):
    """The decode rates the stand-in is paced at (a ceiling): the published one-Spark figure times the
    sandbox's reference scale, and the pair's factors on it (as tests/standins/engine applies them)."""
    scale = yaml.safe_load((SANDBOX_VARS / "all.yml").read_text())["ds4_verify_reference_scale"]
    entry = catalog["0731"]
    one = entry["reference"]["v0.5.0"]["figures"]
    pipeline = entry["quantizations"]["q4"]["pair_reference"]["figures"]["decode_2k"] / one["decode_2k"]
    key = "dspark_decode" if speculation == "dspark" else "decode_2k"
    tensor = entry["tensor_reference"]["q2"]["figures"][key] / one[key]
    pace = {"decode_tps": one["decode_2k"] * scale, "dspark_decode_tps": one["dspark_decode"] * scale}
    base = one[key] * scale
    return pace, {"one": base, "pipeline": base * pipeline, "tensor": base * tensor}


def decode_rate(fleet, host, pace, requests, max_tokens):
    """Tokens a second the engine behind `host`'s API decodes, paced at `pace`: over `requests` streamed
    answers of `max_tokens` tokens to the same prompt, their tokens over their decode seconds."""
    fleet.sh(host, f"mkdir -p {os.path.dirname(PACE)} && echo '{json.dumps(pace)}' > {PACE}")
    out = fleet.sh(host, f"python3 - {requests} {max_tokens} '{PROMPT}' <<'EOF'\n{DECODE_CLIENT}\nEOF")
    answers = [json.loads(line) for line in out.splitlines() if line.strip()]
    return sum(a["tokens"] for a in answers) / sum(a["seconds"] for a in answers)


def bare_pair(fleet, platforms):
    """The pair's two Sparks removed and made anew, bare, on the same link; the inventory reaches them at
    their new ports."""
    podman("rm", "-f", "-t", "2", *(fleet.container(host) for host in PAIR))
    hosts = sandbox_up(fleet.prefix, PAIR, "--platforms", json.dumps(platforms))
    groups = json.loads((fleet.inventory / "hosts.yml").read_text())
    groups["sparks"]["hosts"].update(hosts)
    (fleet.inventory / "hosts.yml").write_text(json.dumps(groups))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="bench-pair-", help="the sandbox's name prefix")
    parser.add_argument(
        "--scale", type=int, default=1000, help="published bytes per bench byte (default 1000: Q4 ~160 MB)"
    )
    parser.add_argument("--link-kbps", type=float, default=4000, help="the hub link, kB/s (default 4000)")
    parser.add_argument("--rtt-ms", type=float, default=20, help="round trip to the hub (default 20)")
    parser.add_argument(
        "--speculation",
        choices=("dspark", "plain"),
        default="dspark",
        help="ds4_speculation of all three (default dspark, the family's own)",
    )
    parser.add_argument("--requests", type=int, default=5, help="answers timed for the decode (default 5)")
    parser.add_argument("--max-tokens", type=int, default=64, help="tokens of each answer (default 64)")
    args = parser.parse_args()
    # Each task's seconds in the output (its recap), for the fetch tasks' share of the wall time.
    os.environ.update(
        ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="all"
    )
    # Stopped from outside (kill, timeout), it still removes its sandbox: SIGTERM ends it through `finally`.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    q4 = max(shipped_sizes().values())
    # Room for Q4 and its records on each Spark's tmpfs, in memory rather than on disk.
    disk = f"{2 * q4 // args.scale // MIB + 64}m"
    pair_platforms = [
        {"name": h, "small_disk": disk, "cap_add": ["NET_ADMIN"], "pair_link": PAIR_LINKS[h]} for h in PAIR
    ]
    platforms = [{"name": ONE, "small_disk": disk}, *pair_platforms]
    with tempfile.TemporaryDirectory(prefix="ds4-bench-") as work:
        try:
            fleet = Fleet(args.prefix, Path(work), "--platforms", json.dumps(platforms), hosts=(ONE, *PAIR))
            groups = json.loads((fleet.inventory / "hosts.yml").read_text())
            groups["pair01"] = {"hosts": {h: None for h in PAIR}}
            (fleet.inventory / "hosts.yml").write_text(json.dumps(groups))
            endpoint, catalog = serve_padded_models(fleet, args.scale)
            sizes = {
                "one": model_bytes(catalog, args.speculation, "q2"),
                "pipeline": model_bytes(catalog, args.speculation, "q4"),
                "tensor": model_bytes(catalog, args.speculation, "q2", lineage="upstream"),
            }
            variables = {
                "ds4_hf_endpoint": endpoint,
                "ds4_model_catalog": catalog,
                "ds4_speculation": args.speculation,
                # One Spark holds Q2, not Q4; each member holds its slice of Q4, or half of every layer of Q2.
                "ds4_spark_memory_bytes": FLOOR + (sizes["one"] + sizes["pipeline"]) // 2,
                "ds4_weights_space_bytes": sizes["pipeline"],
            }
            (Path(work) / "model.json").write_text(json.dumps(variables))
            (Path(work) / "tensor.json").write_text(json.dumps(tensor_settings()))
            extra = ("-e", f"@{Path(work) / 'model.json'}")
            link = int(args.link_kbps * 1000)
            hub(fleet, endpoint, "PUT", "/_standin/network", {"link_bps": link, "rtt_ms": args.rtt_ms})
            pace, paced = paced_rates(catalog, args.speculation)
            print(
                f"one Spark: q2, {sizes['one']:,} bytes; pipeline pair: q4, {sizes['pipeline']:,} bytes; "
                f"tensor pair: q2, {sizes['tensor']:,} bytes; speculation {args.speculation} (published "
                f"sizes / {args.scale}); hub link {link / 1000:.0f} kB/s, round trip {args.rtt_ms} ms; "
                f"decode over {args.requests} answers of {args.max_tokens} tokens; {os.cpu_count()} CPUs, "
                f"load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            results = {}

            def measure(label, limit, host, *more):
                wall, nbytes, out = run(fleet, endpoint, "site.yml", *extra, *more, "-l", limit)
                decode = decode_rate(fleet, host, pace, args.requests, args.max_tokens)
                results[label] = {"wall": wall, "hub": nbytes, "fetch": fetch_seconds(out), "decode": decode}
                print(f"{label}: {wall:.1f} s to serving, decode {decode:.1f} tok/s", flush=True)

            measure("one", ONE, ONE)
            measure("pipeline", "pair01", COORDINATOR)
            bare_pair(fleet, pair_platforms)
            measure("tensor", "pair01", COORDINATOR, "-e", f"@{Path(work) / 'tensor.json'}")
            print(
                f"{'':<16}{'model MiB':>11}{'wall s':>9}{'fetch s':>9}{'hub / model':>13}{'wall s/GiB':>12}"
                f"{'decode tok/s':>14}{'paced':>8}"
            )
            names = {"one": "one Spark q2", "pipeline": "pipeline q4", "tensor": "tensor q2"}
            for label, r in results.items():
                size = sizes[label]
                print(
                    f"{names[label]:<16}{size / MIB:>11.1f}{r['wall']:>9.1f}{r['fetch']:>9.1f}"
                    f"{r['hub'] / size:>13.2f}{r['wall'] / (size / GIB):>12.1f}{r['decode']:>14.1f}"
                    f"{paced[label]:>8.1f}"
                )
            for a, b in (("pipeline", "one"), ("tensor", "one"), ("tensor", "pipeline")):
                ra, rb = results[a], results[b]
                print(
                    f"{a} / {b}: model {sizes[a] / sizes[b]:.2f}, wall {ra['wall'] / rb['wall']:.2f}, fetch "
                    f"{ra['fetch'] / rb['fetch']:.2f}, wall per GiB "
                    f"{(ra['wall'] / sizes[a]) / (rb['wall'] / sizes[b]):.2f}, decode "
                    f"{ra['decode'] / rb['decode']:.2f} (paced {paced[a] / paced[b]:.2f})"
                )
            print(f"load average {os.getloadavg()[0]:.1f} at the end")
        finally:
            sandbox_down(args.prefix)


if __name__ == "__main__":
    main()
