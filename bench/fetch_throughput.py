#!/usr/bin/env python3
"""Fetch throughput of our hub client beside curl -C -, huggingface_hub and hf_transfer, on one file of 1 GiB
or more.

Ours is module_utils/_weights/hub.py's HubFile, what ds4.fleet.ds4_hub_file runs: it fetches byte ranges over
several connections, hashes (sha256) in order as they come, verifies, fsyncs and renames into place.
curl -C - is what the shell installer runs, followed by sha256sum, as the installer's checksum step;
hf_hub_download is the hub's own client (its Xet extra off, as on a Spark without it); hf_transfer is the
hub's parallel Rust client (PyPI hf-transfer, a benchmark dependency only), called as huggingface_hub
called it (100 files at most, 10 MiB ranges) on the storage URL the hub redirects to; it verifies
nothing and is timed without a hash (the peer at its fastest). They fetch the same file from the hub
stand-in (tests/standins/hub, a subprocess) over loopback, one after another, and each client's CPU
seconds per GB (its process and its children, the stand-in not counted) is printed beside its rate:

1. capped as the real path is: a link of --link-mbps shared by all connections, each connection held to
   1/8 of it (a CDN's pacing), a round trip of --rtt-ms before each answer; the rates are also given as a
   fraction of the link. Then ours alone with 1 to 32 connections all open from the start (no ramp),
   which is how the most it opens was chosen;
2. the link capped at about 1 GB/s and no cap per connection, a fast real link;
3. uncapped, where each client is its own limit; then ours alone by connection count there, to see how
   many connections a path that does not cap them gains from.
Ours lets its ramp choose the count (module_utils/_weights/transfer.py's Ramp) and the counts it ended
with are printed under each table of clients (a file too small for the ramp's steps ends before it settles);
4. cut at half way, then fetched again: the bytes each one fetched beyond the half it was missing.

It prints throughputs and ratios (ours to each, each/link) and asserts nothing. The files and the
stand-in's data go under /tmp; the downloads go to /dev/shm when it has room, so that no client waits on
the disk (ours fsyncs, the others do not). Everything is removed at the end, also after a failure or Ctrl-C.

    .venv/bin/python bench/fetch_throughput.py [--size-mib 1024] [--repeat 3] [--capped-mib 256]
        [--capped-repeat 1] [--link-mbps 100] [--rtt-ms 20] [--capped-only] [--no-sweep]

With --goals MIB... it measures issue 56's goals alone, side by side in one run, on files of those sizes
(the issue's: --goals 1024 4096 --link-mbps 128), printing each ratio with its goal: on the capped path
ours against hf_transfer at each size (goals 0.95 below 4 GiB, 1.0 at 4 GiB); uncapped and verified, ours
against one core's hashlib.sha256 rate (the ceiling, printed first; goal 0.8) with its CPU seconds per GiB;
and a relay between two local processes (_weights.relay's PeerServer serving a verified copy, our client
fetching it) against the same ceiling. hf_transfer runs with 16 parallel ranges there, as the issue
measured it. --baseline DIR times a checkout of today's code beside ours, uncapped, each in a process of
its own, for the CPU seconds per GiB against it (`git worktree add DIR main`). --profile N... then prints
where ours spends its CPU uncapped, per stage of the transfer, with N connections each, from the hub
stand-in and then as a relay's receiver.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.ds4.fleet.plugins.module_utils._weights import transfer  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.hub import HubFile  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import FileRef  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.records import PartState  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.transfer import CONNECTIONS  # noqa: E402

STANDIN = ROOT / "tests" / "standins" / "hub" / "hubstandin.py"
REPO = "ds4-bench/throughput"
NAME = "bench-throughput.gguf"
CAPPED_NAME = "bench-capped.gguf"
FAST_LINK_BPS = 1_000_000_000
MB = 1_000_000
SWEEP = (1, 4, 8, 16, 32)
UNCAPPED_SWEEP = (1, 2, 4, 16)
# As huggingface_hub called hf_transfer (HF_TRANSFER_CONCURRENCY, DOWNLOAD_CHUNK_SIZE) before it dropped it.
HF_TRANSFER_FILES = 100
HF_TRANSFER_CHUNK = 10 << 20
# --goals runs hf_transfer with 16 parallel ranges, as issue 56 measured it; at 100 on a capped 1 GiB file
# it failed here ("too many failures in parallel": 100 connections at once against the stand-in's listen
# backlog of 5).
HF_TRANSFER_GOALS_FILES = 16


class Blob(NamedTuple):
    name: str
    size: int
    sha256: str


def make_data(directory, sizes):
    """Files of random bytes ({name: size}) and the hub.json that serves them; returns their Blobs."""
    blobs, files = {}, {}
    for name, size in sizes.items():
        path = directory / "repos" / REPO / name
        path.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        block = 16 << 20
        with open(path, "wb") as f:
            for offset in range(0, size, block):
                data = os.urandom(min(block, size - offset))
                digest.update(data)
                f.write(data)
        blobs[name] = Blob(name, size, digest.hexdigest())
        files[name] = {"blob": str(path.relative_to(directory)), "size": size, "sha256": blobs[name].sha256}
    commit = hashlib.sha1(json.dumps(files, sort_keys=True).encode()).hexdigest()
    doc = {"format": 1, "tokens": [], "repos": {REPO: {"gated": False, "refs": {"main": commit},
                                                       "commits": {commit: {"files": files}}}}}  # fmt: skip
    (directory / "hub.json").write_text(json.dumps(doc))
    return blobs


class Standin:
    """The hub stand-in in its own process, so that it never competes with a client for the GIL."""

    def __init__(self, data_dir, log):
        with open(log, "w") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, str(STANDIN), "--data", str(data_dir), "--port", "0", "--storage-port", "0"],
                stderr=stderr,
            )
        deadline = time.monotonic() + 30
        while not (match := re.search(r"hub (http://\S+), storage", Path(log).read_text())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"the hub stand-in did not start: {Path(log).read_text().strip()}")
            time.sleep(0.05)
        self.endpoint = match[1]

    def fault(self, **spec):
        method, data = ("POST", json.dumps({"file": NAME, **spec}).encode()) if spec else ("DELETE", None)
        request = urllib.request.Request(f"{self.endpoint}/_standin/faults", data=data, method=method)
        urllib.request.urlopen(request, timeout=5).close()

    def network(self, **spec):
        """Cap the path to the hub (conn_bps, link_bps, rtt_ms); no arguments: uncapped."""
        request = urllib.request.Request(
            f"{self.endpoint}/_standin/network", data=json.dumps(spec).encode(), method="PUT"
        )
        urllib.request.urlopen(request, timeout=5).close()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


# The connection counts ours ended its fetches with, for the rows that let its ramp choose: where it settled,
# or how far it had come when a short fetch ended first.
SETTLED: list[int] = []


def ours(hub, dest, blob, connections=CONNECTIONS, retries=5, ramp=True):
    result = HubFile(
        FileRef(hub.endpoint, REPO, "main", blob.name), str(dest), expected_size=blob.size,
        expected_sha256=blob.sha256, retries=retries, retry_delay=0.1, connections=connections, ramp=ramp,
    ).ensure()  # fmt: skip
    if ramp:
        SETTLED.append(result["connections"])
    return result["bytes_fetched"]


def settled():
    """The counts ours ended with since the last call, as a line."""
    counts = ", ".join(map(str, SETTLED))
    SETTLED.clear()
    return f"ours (at most {CONNECTIONS}) ended with {counts} connection(s)"


def sha256sum(path, blob):
    out = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True)
    if out.stdout.split()[0] != blob.sha256:
        raise SystemExit(f"{path} came down with another sha256: {out.stdout.strip()}")


def curl_verified(hub, dest, blob):
    """curl, then sha256sum, as the shell installer fetches and checks."""
    moved = curl(hub, dest, blob)[0]
    sha256sum(dest / blob.name, blob)
    return moved


def hf_transfer(hub, dest, blob, files=HF_TRANSFER_FILES):
    """hf_transfer's download of the storage URL the hub redirects to (nothing verified)."""
    import hf_transfer as rust  # a benchmark dependency only (requirements-dev.txt)
    import requests

    head = requests.head(f"{hub.endpoint}/{REPO}/resolve/main/{blob.name}", allow_redirects=False, timeout=30)
    url = head.headers.get("Location") or head.url
    rust.download(url=url, filename=str(dest / blob.name), max_files=files,
                  chunk_size=HF_TRANSFER_CHUNK, parallel_failures=3, max_retries=5)  # fmt: skip
    return blob.size


def hf_transfer_16(hub, dest, blob):
    return hf_transfer(hub, dest, blob, HF_TRANSFER_GOALS_FILES)


def in_a_process(root):
    """Ours as the collection at `root` has it (a checkout of today's code, or this one), run in a process
    of its own so that two versions can be timed side by side; its CPU is counted with the children's."""

    def fetch(hub, dest, blob):
        code = (
            "import sys\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "from ansible_collections.ds4.fleet.plugins.module_utils._weights.hub import HubFile\n"
            "from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import FileRef\n"
            "endpoint, repo, name, dest, size, sha256 = sys.argv[2:8]\n"
            "HubFile(FileRef(endpoint, repo, 'main', name), dest, expected_size=int(size),\n"
            "        expected_sha256=sha256, retries=5, retry_delay=0.1).ensure()\n"
        )
        subprocess.run(
            [sys.executable, "-c", code, str(Path(root) / "collections"), hub.endpoint, REPO, blob.name,
             str(dest), str(blob.size), blob.sha256],
            check=True,
        )  # fmt: skip
        return blob.size

    return fetch


def curl(hub, dest, blob):
    out = subprocess.run(
        ["curl", "-sS", "-L", "--fail", "-C", "-", "-o", str(dest / blob.name), "-w", "%{size_download}",
         f"{hub.endpoint}/{REPO}/resolve/main/{blob.name}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if out.returncode not in (0, 18):  # 18: the transfer ended short, the file is partial
        raise SystemExit(f"curl failed ({out.returncode}): {out.stderr.strip()}")
    return int(float(out.stdout or 0)), out.returncode


class HubClient:
    """hf_hub_download with a cache of its own; counts the body bytes its HTTP client hands over."""

    def __init__(self, endpoint, cache):
        os.environ.update(
            HF_ENDPOINT=endpoint,
            HF_HUB_DISABLE_XET="1",
            HF_HUB_ENABLE_HF_TRANSFER="0",
            HF_HUB_DISABLE_PROGRESS_BARS="1",
            HF_HUB_DISABLE_TELEMETRY="1",
            HF_HOME=str(cache / "home"),
        )
        import httpx2
        from huggingface_hub import hf_hub_download
        from huggingface_hub.utils import logging as hf_logging

        # It says so when it resumes after the cut; the table says it too.
        hf_logging.set_verbosity_error()

        self.download, self.cache, self.received = hf_hub_download, cache, 0
        iter_bytes = httpx2.Response.iter_bytes

        def counted(response, *args, **kwargs):
            for chunk in iter_bytes(response, *args, **kwargs):
                self.received += len(chunk)
                yield chunk

        httpx2.Response.iter_bytes = counted

    def __call__(self, hub, dest, blob):
        self.received = 0
        self.download(REPO, blob.name, cache_dir=str(dest / "hf-cache"))
        return self.received


def cpu_seconds():
    """CPU seconds of this process and of its children that ended (curl, sha256sum; not the stand-in)."""
    return sum(
        usage.ru_utime + usage.ru_stime
        for usage in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    )


def timed(fetch, *args):
    """(wall seconds, CPU seconds) of one fetch."""
    started, cpu = time.perf_counter(), cpu_seconds()
    fetch(*args)
    return time.perf_counter() - started, cpu_seconds() - cpu


def best_rates(clients, hub, dest_root, blob, repeat, cpu=None):
    """Each client's best of `repeat` fetches into an empty dest, in MB/s (and, into `cpu`, its least CPU
    seconds per GB). The clients take turns, so that a burst of load from elsewhere on the machine does not
    fall on one client's fetches alone."""
    best = dict.fromkeys(clients, 0.0)
    for _ in range(repeat):
        for name, fetch in clients.items():
            dest = dest_root / name
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir()
            wall, used = timed(fetch, hub, dest, blob)
            best[name] = max(best[name], blob.size / wall / MB)
            if cpu is not None:
                cpu[name] = min(cpu.get(name, float("inf")), used / (blob.size / 1e9))
            shutil.rmtree(dest, ignore_errors=True)
    return best


def refetched_after_a_cut(name, hub, dest, blob, hf):
    """Bytes fetched beyond the half missing after a cut at half way, on the run(s) that finish the file.

    Ours, over several connections, is killed (SIGKILL) once half the file is in, rather than cut: a cut
    connection is resumed within the run. Its part is sparse, so its allocated blocks are the bytes the
    killed run wrote; what the next run fetches beyond the rest is what the kill lost.
    """
    size = blob.size
    half = size // 2
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    if name == "ours":
        written = killed_at(hub, dest, blob, half)
        moved = ours(hub, dest, blob)
        shutil.rmtree(dest, ignore_errors=True)
        return moved - (size - written)
    hub.fault(cut_after=half, times=1)
    if name == "curl":
        curl(hub, dest, blob)
        moved = curl(hub, dest, blob)[0]
    else:
        # It resumes by itself in the same call: count all it received, less the half before the cut.
        moved = hf(hub, dest, blob) - half
    shutil.rmtree(dest, ignore_errors=True)
    hub.fault()
    return moved - (size - half)


def killed_at(hub, dest, blob, at):
    """Run ours in a process, kill it once `at` bytes of the part are listed; the bytes it had written."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from ansible_collections.ds4.fleet.plugins.module_utils._weights.hub import HubFile;"
        "from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import FileRef;"
        "HubFile(FileRef(sys.argv[2], sys.argv[3], 'main', sys.argv[4]), sys.argv[5]).ensure()"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(ROOT / "collections"), hub.endpoint, REPO, blob.name, str(dest)]
    )
    try:
        deadline = time.monotonic() + 120
        while PartState.load(str(dest), blob.name, blob.size, blob.sha256).bytes_done < at:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the fetch to kill at {at:,} bytes ended first ({proc.returncode})")
            time.sleep(0.01)
    finally:
        proc.kill()
        proc.wait()
    return (dest / f"{blob.name}.part").stat().st_blocks * 512


def ratios(rates):
    return ", ".join(f"ours/{name} {rates['ours'] / rates[name]:.2f}" for name in rates if name != "ours")


def sweep(hub, dest_root, blob, counts, link=None):
    """Ours alone by connection count, all open from the start (no ramp): MB/s (and of the link), CPU seconds
    per GB."""
    print(f"\nours by connections, all open from the start (at most {CONNECTIONS} by default), same path:")
    print("{:<13}{:>10}{:>9}{:>10}".format("connections", "MB/s", "/link" if link else "", "CPU s/GB"))
    for n in counts:
        one, cpu = {"ours": lambda *a, n=n: ours(*a, connections=n, ramp=False)}, {}
        rate = best_rates(one, hub, dest_root, blob, 1, cpu)["ours"]
        share = f"{rate / link:>9.2f}" if link else " " * 9
        print(f"{n:<13}{rate:>10.1f}{share}{cpu['ours']:>10.2f}", flush=True)


def capped(hub, clients, dest_root, blob, link_bps, rtt_ms, repeat):
    """Each client on the capped path (curl and hf take size / (link / 8) seconds), then the sweep."""
    hub.network(conn_bps=link_bps // 8, link_bps=link_bps, rtt_ms=rtt_ms)
    try:
        cpu = {}
        rates = best_rates(clients, hub, dest_root, blob, repeat, cpu)
        link = link_bps / MB
        print(f"capped: link {link:.0f} MB/s, {link / 8:.1f} MB/s per connection, round trip {rtt_ms} ms")
        print(f"best of {repeat} per client, on {blob.size:,} bytes")
        print("{:<13}{:>10}{:>9}{:>10}".format("client", "MB/s", "/link", "CPU s/GB"))
        for name, rate in rates.items():
            print(f"{name:<13}{rate:>10.1f}{rate / link:>9.2f}{cpu[name]:>10.2f}")
        print(ratios(rates))
        print(settled())
        sweep(hub, dest_root, blob, SWEEP, link)
    finally:
        hub.network()


def hash_ceiling(size):
    """One core's hashlib.sha256 rate in MB/s over `size` bytes in memory (64 MiB blocks): the rate a
    verified transfer could reach if hashing were all it did."""
    block = os.urandom(min(size, 64 << 20))
    hasher = hashlib.sha256()
    started = time.perf_counter()
    for _ in range(max(1, size // len(block))):
        hasher.update(block)
    return max(1, size // len(block)) * len(block) / (time.perf_counter() - started) / MB


class Relay:
    """_weights.relay's PeerServer in a process of its own, serving the verified files of `directory` on
    loopback (as one Spark serves another), until stop()."""

    def __init__(self, directory, work):
        self.stop_file = work / "relay.stop"
        code = (
            "import sys, time\n"
            f"sys.path.insert(0, {str(ROOT / 'collections')!r})\n"
            "from ansible_collections.ds4.fleet.plugins.module_utils._weights.relay import PeerServer\n"
            "server = PeerServer(sys.argv[1], '127.0.0.1', 0, ['127.0.0.1']).start()\n"
            "print(server.port, flush=True)\n"
            "server.serve_until(time.monotonic() + 86400, sys.argv[2])\n"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, str(directory), str(self.stop_file)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"

    def stop(self):
        self.stop_file.touch()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def from_relay(relay):
    def fetch(hub, dest, blob):
        return HubFile(
            FileRef(hub.endpoint, REPO, "main", blob.name), str(dest), expected_size=blob.size,
            expected_sha256=blob.sha256, retries=1, retry_delay=0.1, peers=[relay.url],
        ).ensure()["bytes_from"][relay.url]  # fmt: skip

    return fetch


def goals(hub, work, dest_root, blobs, link_bps, rtt_ms, repeat, baseline=None):
    """Issue 56's goals side by side: on the capped path (each connection link/8) ours against hf_transfer at
    each size; uncapped and verified, ours against one core's sha256 (the ceiling) and its CPU seconds per
    GiB (with `baseline`, a checkout of today's code, that code's beside it, each in a process of its own,
    taking turns); a relay between two local processes (_weights.relay's server, our client) against the
    same ceiling."""
    largest = max(blobs.values(), key=lambda b: b.size)
    ceiling = hash_ceiling(largest.size)
    print(f"ceiling: one core's hashlib.sha256, {ceiling:.0f} MB/s ({ceiling * MB / (1 << 30):.2f} GiB/s)")
    link = link_bps / MB
    print(f"\ncapped: link {link:.0f} MB/s, {link / 8:.1f} MB/s per connection, round trip {rtt_ms} ms; "
          f"best of {repeat}; hf_transfer with {HF_TRANSFER_GOALS_FILES} parallel ranges")  # fmt: skip
    print(
        "{:<12}{:>10}{:>14}{:>18}{:>8}".format("size", "ours MB/s", "hf_transfer", "ours/hf_transfer", "goal")
    )
    hub.network(conn_bps=link_bps // 8, link_bps=link_bps, rtt_ms=rtt_ms)
    try:
        for blob in sorted(blobs.values(), key=lambda b: b.size):
            rates = best_rates({"ours": ours, "hf_transfer": hf_transfer_16}, hub, dest_root, blob, repeat)
            goal = 1.0 if blob.size >= 4 << 30 else 0.95
            print(f"{blob.size / (1 << 30):<12.2f}{rates['ours']:>10.1f}{rates['hf_transfer']:>14.1f}"
                  f"{rates['ours'] / rates['hf_transfer']:>18.2f}{goal:>8.2f}", flush=True)  # fmt: skip
    finally:
        hub.network()
    print(settled())
    cpu = {}
    rate = best_rates({"ours": ours}, hub, dest_root, largest, repeat, cpu)["ours"]
    per_gib = cpu["ours"] * (1 << 30) / 1e9
    print(f"\nuncapped, verified, {largest.size / (1 << 30):.2f} GiB: ours {rate:.0f} MB/s, "
          f"{rate / ceiling:.2f} of the ceiling (goal 0.80), {per_gib:.2f} CPU s/GiB, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(settled())
    if baseline:
        cpu = {}
        clients = {"ours": in_a_process(ROOT), "today's code": in_a_process(baseline)}
        rates = best_rates(clients, hub, dest_root, largest, repeat, cpu)
        per_gib = {name: used * (1 << 30) / 1e9 for name, used in cpu.items()}
        print(f"each in a process of its own, taking turns (today's code: {baseline}):")
        for name in clients:
            print(f"  {name:<14}{rates[name]:>6.0f} MB/s, {rates[name] / ceiling:.2f} of the ceiling, "
                  f"{per_gib[name]:.2f} CPU s/GiB")  # fmt: skip
        ratio = per_gib["ours"] / per_gib["today's code"]
        print(f"  CPU s/GiB ours / today's code: {ratio:.2f} (goal <= 1.00), "
              f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    seed = dest_root / "relay-seed"
    seed.mkdir()
    ours(hub, seed, largest)  # a verified copy, its record beside it
    relay = Relay(seed, work)
    try:
        cpu = {}
        rate = best_rates({"relay": from_relay(relay)}, hub, dest_root, largest, repeat, cpu)["relay"]
    finally:
        relay.stop()
        shutil.rmtree(seed, ignore_errors=True)
    per_gib = cpu["relay"] * (1 << 30) / 1e9
    print(f"relay between two processes, verified, {largest.size / (1 << 30):.2f} GiB: {rate:.0f} MB/s, "
          f"{rate / ceiling:.2f} of the ceiling (goal 0.80), {per_gib:.2f} CPU s/GiB here, "
          f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="file size in MiB (default 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="fetches per client and setting (best counts)")
    parser.add_argument(
        "--capped-mib", type=int, default=256, help="the part of the file fetched when capped"
    )
    parser.add_argument("--link-mbps", type=float, default=100, help="the capped link, MB/s (default 100)")
    parser.add_argument("--rtt-ms", type=float, default=20, help="the capped path's round trip (default 20)")
    parser.add_argument("--capped-repeat", type=int, default=1, help="fetches per client when capped")
    parser.add_argument("--capped-only", action="store_true", help="only the capped setting")
    parser.add_argument("--no-sweep", action="store_true", help="no sweep of our connections uncapped")
    parser.add_argument(
        "--goals", type=int, nargs="+", metavar="MIB",
        help="only issue 56's goals, side by side, on files of these sizes in MiB (the issue's: 1024 4096)",
    )  # fmt: skip
    parser.add_argument(
        "--profile", type=int, nargs="+", metavar="N",
        help="with --goals: then where ours spends its CPU uncapped, with N connections each",
    )  # fmt: skip
    parser.add_argument(
        "--baseline", metavar="DIR",
        help="with --goals: a checkout of today's code (its collections/ link included) timed beside ours "
        "uncapped, for the CPU per GiB against it",
    )  # fmt: skip
    args = parser.parse_args()
    if args.goals:
        return run_goals(args)
    size = args.size_mib << 20

    work = Path(tempfile.mkdtemp(prefix="ds4-bench-", dir="/tmp"))
    shm = Path("/dev/shm")
    room = shutil.disk_usage(shm).free if shm.is_dir() else 0
    dest_root = Path(tempfile.mkdtemp(prefix="ds4-bench-", dir=shm if room > 3 * size else work))
    hub = None
    try:
        capped_size = args.capped_mib << 20
        print(f"writing {size + capped_size:,} random bytes to {work} ...", flush=True)
        blobs = make_data(
            work / "hub", {NAME: size, CAPPED_NAME: capped_size} if capped_size else {NAME: size}
        )
        blob = blobs[NAME]
        hub = Standin(work / "hub", work / "standin.log")
        hf = HubClient(hub.endpoint, work)
        clients = {"ours": ours, "curl+sha256sum": curl_verified, "hf": hf, "hf_transfer": hf_transfer}
        print(f"downloads to {dest_root}; the clients taking turns")
        # Ours needs a core for the hash beside the one moving bytes: other work on the machine costs it most.
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start\n")
        if capped_size:
            capped(
                hub, clients, dest_root, blobs[CAPPED_NAME], int(args.link_mbps * MB), args.rtt_ms,
                args.capped_repeat,
            )  # fmt: skip
        if args.capped_only:
            return
        print(f"\nbest of {args.repeat} per client and setting, on {size:,} bytes")
        for setting, link in (("link capped at ~1 GB/s", FAST_LINK_BPS), ("uncapped", None)):
            if link:
                hub.network(link_bps=link)
            cpu = {}
            rates = best_rates(clients, hub, dest_root, blob, args.repeat, cpu)
            print(f"\n{setting}, load average {os.getloadavg()[0]:.1f}")
            print("{:<16}{:>8}{:>10}".format("client", "MB/s", "CPU s/GB"))
            for name, rate in rates.items():
                print(f"{name:<16}{rate:>8.0f}{cpu[name]:>10.2f}")
            print(ratios(rates))
            print(settled(), flush=True)
            if not link and not args.no_sweep:
                sweep(hub, dest_root, blob, UNCAPPED_SWEEP)
            hub.network()
        print(f"\nbytes fetched again after a cut at {size // 2:,} bytes (beyond the half that was missing):")
        for name in ("ours", "curl", "hf"):
            extra = refetched_after_a_cut(name, hub, dest_root / name, blob, hf)
            print(f"  {name:<5} {extra:,}")
        print("(ours: killed once half is listed as on disk; the next run's bytes_fetched less the bytes")
        print(" the killed run had not written; curl: its size_download on the second run; hf: the body")
        print(" bytes its HTTP client received in the call that resumed by itself, less the half before")
        print(" the cut)")
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
    finally:
        if hub is not None:
            hub.stop()
        shutil.rmtree(dest_root, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


class Stages:
    """Where a verified transfer spends its CPU: each stage of _weights.transfer timed on the thread that
    runs it (time.thread_time), wrapped around the module's own functions for the time of a `with`."""

    def __init__(self):
        self.seconds, self._lock, self._saved = {}, threading.Lock(), []

    def _add(self, name, seconds):
        with self._lock:
            self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def _timed(self, name, fn):
        def timed_call(*args, **kwargs):
            started = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self._add(name, time.thread_time() - started)

        return timed_call

    def __enter__(self):
        patches = [
            (transfer, "write_all", self._timed("write (pwrite to the part)", transfer.write_all)),
            (
                transfer.Body,
                "read_into",
                self._timed("receive (socket into a buffer)", transfer.Body.read_into),
            ),
            (transfer.OrderedHash, "wrote", self._timed("hand-off to the hash", transfer.OrderedHash.wrote)),
            (transfer.OrderedHash, "_run", self._timed("hash thread (sha256)", transfer.OrderedHash._run)),
            (
                transfer.Transfer,
                "_checkpoint",
                self._timed("checkpoint (fdatasync)", transfer.Transfer._checkpoint),
            ),
            (
                transfer.Transfer,
                "_worker",
                self._timed("connection threads, in all", transfer.Transfer._worker),
            ),
        ]
        for owner, name, replacement in patches:
            self._saved.append((owner, name, getattr(owner, name)))
            setattr(owner, name, replacement)
        return self

    def __exit__(self, *exc):
        for owner, name, original in self._saved:
            setattr(owner, name, original)


def write_reference(directory, size):
    """CPU seconds per GiB of pwrite in 1 MiB blocks into new pages of a file in `directory`, then over the
    same pages again: what the transfer's writes cost beyond the copy (the kernel finding new pages)."""
    block, path = os.urandom(1 << 20), directory / "write-reference"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        seconds = []
        for _ in range(2):
            started = time.thread_time()
            for offset in range(0, size, len(block)):
                os.pwrite(fd, block, offset)
            seconds.append((time.thread_time() - started) / (size / (1 << 30)))
    finally:
        os.close(fd)
        path.unlink()
    print(f"\npwrite of 1 MiB blocks into {directory}: {seconds[0]:.2f} CPU s/GiB into new pages, "
          f"{seconds[1]:.2f} over the same pages, load average {os.getloadavg()[0]:.1f}")  # fmt: skip


def profile(hub, dest_root, blob, counts, relay=None):
    """Ours uncapped and verified, all connections open from the start, each stage's CPU seconds per GiB;
    from the hub stand-in, or with `relay` (a Relay) as a peer, its receiver's."""
    gib = blob.size / (1 << 30)
    source = "from the relay" if relay else "from the hub stand-in"
    for n in counts:
        dest = dest_root / "profiled"
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()

        def fetch(hub, dest, blob, n=n):
            return HubFile(
                FileRef(hub.endpoint, REPO, "main", blob.name), str(dest), expected_size=blob.size,
                expected_sha256=blob.sha256, retries=1, retry_delay=0.1, connections=n, ramp=False,
                peers=[relay.url] if relay else [],
            ).ensure()  # fmt: skip

        with Stages() as stages:
            wall, used = timed(fetch, hub, dest, blob)
        shutil.rmtree(dest, ignore_errors=True)
        print(f"\n{source}, {n} connection(s): {blob.size / wall / MB:.0f} MB/s, {used / gib:.2f} CPU s/GiB "
              f"in all (the sender's not counted), load average {os.getloadavg()[0]:.1f}")  # fmt: skip
        for name, seconds in sorted(stages.seconds.items(), key=lambda item: -item[1]):
            print(f"  {name:<30}{seconds / gib:>6.2f} s/GiB")


def run_goals(args):
    work = Path(tempfile.mkdtemp(prefix="ds4-bench-", dir="/tmp"))
    shm = Path("/dev/shm")
    total = sum(mib << 20 for mib in args.goals)
    room = shutil.disk_usage(shm).free if shm.is_dir() else 0
    # The relay's seed and its receiver hold the largest file at once, beside one download.
    dest_root = Path(
        tempfile.mkdtemp(prefix="ds4-bench-", dir=shm if room > 3 * max(args.goals) << 20 else work)
    )
    hub = None
    try:
        print(f"writing {total:,} random bytes to {work} ...", flush=True)
        blobs = make_data(work / "hub", {f"goal-{mib}.gguf": mib << 20 for mib in args.goals})
        hub = Standin(work / "hub", work / "standin.log")
        print(f"downloads to {dest_root}; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n")
        goals(hub, work, dest_root, blobs, int(args.link_mbps * MB), args.rtt_ms, args.repeat, args.baseline)
        if args.profile:
            largest = max(blobs.values(), key=lambda b: b.size)
            write_reference(dest_root, largest.size)
            profile(hub, dest_root, largest, args.profile)
            # The relay's receiver, the same client: its file comes from a verified copy in another process.
            seed = dest_root / "relay-seed"
            seed.mkdir()
            ours(hub, seed, largest)
            relay = Relay(seed, work)
            try:
                profile(hub, dest_root, largest, args.profile, relay)
            finally:
                relay.stop()
                shutil.rmtree(seed, ignore_errors=True)
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
    finally:
        if hub is not None:
            hub.stop()
        shutil.rmtree(dest_root, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
