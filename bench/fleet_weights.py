#!/usr/bin/env python3
"""Hub bytes, LAN bytes and wall time of the weights phase on a fleet: peers off, two waves, the relay.

On sandbox Sparks of their own (tests/sandbox/sandbox.py with --prefix; removed at the end), with the hub's
link capped (--link-kbps shared by all connections, --rtt-ms of round trip) and, in the case that matters,
each Spark's upload to its peers held to the same rate (ds4_weights_peer_rate: a LAN no faster than the
site's link), the weights role (ds4_weights, the 0731 base and drafter) runs on empty weight directories:

1. on spark01 alone (-l spark01): the one-Spark time;
2. for each fleet size N of --sizes (the first N Sparks), side by side in one run:
   - peers off (ds4_weights_peers=false): each Spark fetches every file from the hub;
   - two waves (ds4_weights_peer_relay=false): the seed fetches each file, then serves it to the others;
   - the relay (the default): each Spark serves what it has received so far to the one behind it.

The model is made large enough that the transfer, not Ansible, takes the time (--model-mib, ~1/13 of it
the drafter, as 6.97 of 93 GB): sparse files of zeros in the bench's forge container, served by a second
hub stand-in there (port 18180) under the catalog's real names, and a catalog (-e) with their sizes and
sha256; each Spark's /var/lib/ds4 is a tmpfs of its own, so that the copies spare the disk.
--model-mib 0 takes the sandbox's own small files from the forge's hub instead (each comes over one
connection). The hub's bytes come from the stand-in's own count (GET /_standin/stats), the LAN bytes from
what each Spark says it served. It prints fleet wall time / one Spark's, hub bytes / model size and the
LAN bytes each Spark sent / model size (the most any sent, and the mean), and asserts nothing. The wall
time is the playbook's, Ansible's own start-up included.

    .venv/bin/python bench/fleet_weights.py [--prefix bench-weights-] [--model-mib 96] [--link-kbps 2000]
        [--rtt-ms 20] [--sizes 3 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fleet_upgrade import Fleet, playbook  # noqa: E402
from sandbox_hosts import ROOT, podman, sandbox_down  # noqa: E402

GGUF = "/var/lib/ds4/gguf"
HUB = "http://forge:18080"
# The bench's own hub stand-in in the forge container, over the sparse files, and where they lie there.
BIG_PORT, BIG_STORAGE_PORT = 18180, 18181
BIG_DATA = "/tmp/ds4-bench-hub"
BIG_REPO = "ds4-bench/weights"
MIB = 1 << 20
# profile_tasks' recap line of each fetch task (tasks/fetch.yml of ds4_weights), with its seconds.
FETCH_TASK = re.compile(
    r"^ds4_weights : (?:Start fetching and verifying the weight files"
    r"|Wait for the weight files, printing their progress as they come) -+ ([\d.]+)s$",
    re.M,
)
# The line profile_tasks prints under each task's header: the date, the time, the task's and the run's.
PROFILE_TIMES = re.compile(r"^\w+ \d\d \w+ \d{4} +\d\d:\d\d:\d\d ")
PLAY = """---
- name: Get the weights
  hosts: sparks
  gather_facts: false
  vars:
    # Single Sparks all: the sandbox's inventory declares spark04 and spark05 a pair, but the bench's own
    # sandbox cables no link between them, so that the fleets of the bench differ in their size alone.
    ds4_pairs: {}
  tasks:
    - name: Get the weights of the default generation and speculation mode
      ansible.builtin.include_role:
        name: ds4_weights

    - name: Say how many bytes this Spark served its peers
      ansible.builtin.debug:
        msg: "BENCH-SERVED {{ (__ds4_weights_served | default({})).served | default({}) | dict2items
          | map(attribute='value') | sum }}"
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


def serve_big_hub(fleet, files):
    """A hub stand-in of the bench's own in its forge, serving `files` (name -> blob under BIG_DATA, size,
    sha256) at one commit of BIG_REPO; its endpoint and the commit, once it listens."""
    commit = hashlib.sha1(json.dumps(files, sort_keys=True).encode()).hexdigest()
    repo = {"gated": False, "refs": {"main": commit}, "commits": {commit: {"files": files}}}
    doc = {"format": 1, "tokens": [], "repos": {BIG_REPO: repo}}
    forge = f"{fleet.prefix}forge"
    podman("exec", forge, "sh", "-c", f"cat > {BIG_DATA}/hub.json <<'EOF'\n{json.dumps(doc)}\nEOF")
    podman(
        "exec", "-d", forge, "python3", "/srv/standins/hub/hubstandin.py", "--data", BIG_DATA,
        "--bind", "0.0.0.0", "--port", str(BIG_PORT), "--storage-port", str(BIG_STORAGE_PORT),
    )  # fmt: skip
    endpoint = f"http://forge:{BIG_PORT}"
    # Until it listens (a bound, not a pace).
    fleet.sh(
        fleet.hosts[0], f"for i in $(seq 150); do curl -fs {endpoint}/_standin/stats && exit; sleep 0.2; done"
    )
    return endpoint, commit


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
    forge = f"{fleet.prefix}forge"
    truncate = " && ".join(f"truncate -s {size} {BIG_DATA}/blobs/{role}" for role, size in sizes.items())
    podman("exec", forge, "sh", "-c", f"mkdir -p {BIG_DATA}/blobs && {truncate}")
    endpoint, commit = serve_big_hub(fleet, files)
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
    for host in fleet.hosts:
        fleet.sh(host, f"rm -rf {GGUF}")
    before = hub(fleet, endpoint, "GET", "/_standin/stats")["content_bytes"]
    wall, _, out = playbook(fleet, str(play), *args)
    if "failed=0" not in out or re.search(r" failed=[1-9]", out):
        raise SystemExit(f"bench: the weights play failed:\n{out[-3000:]}")
    return wall, hub(fleet, endpoint, "GET", "/_standin/stats")["content_bytes"] - before, out


def fetch_seconds(out):
    """Seconds the play spent in the fetch tasks (starting the fetches and waiting for them, every wave),
    from profile_tasks' recap: the transfer's share of the wall time, the rest being Ansible's tasks."""
    return sum(float(s) for s in FETCH_TASK.findall(out))


def plan_lines(out):
    """The peer plan the run printed (its task's output, as the callback wrapped it), without the line of
    times that profile_tasks prints under each task's header."""
    block = out.partition("TASK [ds4_weights : Say which Spark seeds")[2].partition("TASK [")[0]
    return [
        line.rstrip() for line in block.splitlines()[1:] if line.strip() and not PROFILE_TIMES.match(line)
    ]


def served(out):
    """Bytes each Spark served its peers (the play's last task): host -> bytes."""
    found = re.findall(r'ok: \[(\S+)\] =>\s*(?:\{\s*)?"?msg"?: "?BENCH-SERVED (\d+)', out)
    return {host: int(n) for host, n in found}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="bench-weights-", help="the sandbox's name prefix")
    parser.add_argument(
        "--model-mib", type=int, default=96, help="model size, MiB (default 96; 0: the sandbox's files)"
    )
    parser.add_argument(
        "--link-kbps",
        type=float,
        default=2000,
        help="the hub link and each Spark's upload, kB/s (default 2000: ~50 s of transfer a Spark)",
    )
    parser.add_argument("--rtt-ms", type=float, default=20, help="round trip to the hub (default 20)")
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[3, 5], help="fleet sizes, 2 to 9 Sparks (default 3 5)"
    )
    args = parser.parse_args()
    # Each task's seconds in the output (its recap), for the fetch tasks' share of the wall time.
    os.environ.update(
        ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks", PROFILE_TASKS_TASK_OUTPUT_LIMIT="all"
    )
    link = int(args.link_kbps * 1000)
    hosts = tuple(f"spark{i:02d}" for i in range(1, max(args.sizes) + 1))
    with tempfile.TemporaryDirectory(prefix="ds4-bench-") as work:
        play = Path(work) / "weights.yml"
        play.write_text(PLAY)
        try:
            # Room for the model and its records, in memory rather than on disk.
            disk = f"{args.model_mib * 5 // 4 + 64}m"
            options = [o for h in hosts for o in ("--small-disk", f"{h}={disk}")] if args.model_mib else []
            fleet = Fleet(args.prefix, Path(work), *options, hosts=hosts)
            extra = []
            if args.model_mib:
                endpoint, size, variables = serve_big_model(fleet, args.model_mib)
                (Path(work) / "model.json").write_text(json.dumps(variables))
                extra = ["-e", f"@{Path(work) / 'model.json'}"]
            else:
                endpoint, size = HUB, sum(f["size"] for f in sandbox_catalog().values())
            hub(fleet, endpoint, "PUT", "/_standin/network", {"link_bps": link, "rtt_ms": args.rtt_ms})
            print(
                f"model (0731 base and drafter): {size:,} bytes; hub link and each Spark's upload "
                f"{link / 1000:.0f} kB/s, round trip {args.rtt_ms} ms; {os.cpu_count()} CPUs, load average "
                f"{os.getloadavg()[0]:.1f}",
                flush=True,
            )
            one, one_bytes, one_out = run(fleet, endpoint, play, *extra, "-l", "spark01")
            one_fetch = fetch_seconds(one_out)
            print(
                f"one Spark: {one:.1f} s (fetch tasks {one_fetch:.1f} s),"
                f" hub bytes / model {one_bytes / size:.2f}",
                flush=True,
            )
            print(
                "{:<4}{:<12}{:>8}{:>12}{:>9}{:>13}{:>13}{:>16}{:>15}".format(
                    "N",
                    "",
                    "wall s",
                    "wall / one",
                    "fetch s",
                    "fetch / one",
                    "hub / model",
                    "LAN sent, most",
                    "LAN sent, mean",
                )  # fmt: skip
            )
            cap = ("-e", f"ds4_weights_peer_rate={link}")
            modes = (
                ("peers off", ("-e", "ds4_weights_peers=false")),
                ("two waves", ("-e", "ds4_weights_peer_relay=false", *cap)),
                ("relay", cap),
            )
            plans = {}
            for n in args.sizes:
                limit = ("-l", ",".join(hosts[:n]))
                for label, more in modes:
                    wall, nbytes, out = run(fleet, endpoint, play, *extra, *limit, *more)
                    sent = served(out)
                    most = max(sent.values(), default=0) / size
                    mean = sum(sent.values()) / n / size
                    fetch = fetch_seconds(out)
                    print(
                        f"{n:<4}{label:<12}{wall:>8.1f}{wall / one:>12.2f}{fetch:>9.1f}"
                        f"{fetch / one_fetch:>13.2f}"
                        f"{nbytes / size:>13.2f}{most:>16.2f}{mean:>15.2f}",
                        flush=True,
                    )
                    plans[(n, label)] = plan_lines(out)
            n = max(args.sizes)
            print(f"relay plan for N={n}:\n" + "\n".join(plans[(n, "relay")]))
            print(f"load average {os.getloadavg()[0]:.1f} at the end")
        finally:
            sandbox_down(args.prefix)


if __name__ == "__main__":
    main()
