#!/usr/bin/env python3
"""Fetch throughput of our hub client beside curl -C - and huggingface_hub, on one file of 1 GiB or more.

Ours is module_utils/ds4_hub.py's HubFile, what ds4.fleet.ds4_hub_file runs: it hashes (sha256) as it
writes, verifies, fsyncs and renames into place. curl -C - is what the shell installer runs; hf_hub_download
is the hub's own client (its Xet and hf_transfer extras off, as on a Spark without them). They fetch the
same file from the hub stand-in (tests/standins/hub, a subprocess) over loopback, one after another:

1. with the stand-in throttled to about 1 GB/s, a fast real link;
2. unthrottled, where each client is its own limit;
3. cut at half way, then fetched again: the bytes each one fetched beyond the half it was missing.

It prints throughputs and ratios (ours/curl, ours/hf) and asserts nothing. The file and the stand-in's data
go under /tmp; the downloads go to /dev/shm when it has room, so that no client waits on the disk (ours
fsyncs, the others do not). Everything is removed at the end, also after a failure or Ctrl-C.

    .venv/bin/python bench/fetch_throughput.py [--size-mib 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.ds4.fleet.plugins.module_utils.ds4_hub import (  # noqa: E402
    FileRef,
    HubFile,
    HubTransientError,
)

STANDIN = ROOT / "tests" / "standins" / "hub" / "hubstandin.py"
REPO = "ds4-bench/throughput"
NAME = "bench-throughput.gguf"
THROTTLE_BPS = 1_000_000_000
MB = 1_000_000


def make_data(directory, size):
    """A file of random bytes and the hub.json that serves it; returns its sha256."""
    blob = directory / "repos" / REPO / NAME
    blob.parent.mkdir(parents=True)
    digest = hashlib.sha256()
    block = 16 << 20
    with open(blob, "wb") as f:
        for offset in range(0, size, block):
            data = os.urandom(min(block, size - offset))
            digest.update(data)
            f.write(data)
    sha256 = digest.hexdigest()
    commit = hashlib.sha1(f"{REPO}:{NAME}:{sha256}".encode()).hexdigest()
    files = {NAME: {"blob": str(blob.relative_to(directory)), "size": size, "sha256": sha256}}
    doc = {"format": 1, "tokens": [], "repos": {REPO: {"gated": False, "refs": {"main": commit},
                                                       "commits": {commit: {"files": files}}}}}  # fmt: skip
    (directory / "hub.json").write_text(json.dumps(doc))
    return sha256


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
        method, data = ("POST", json.dumps(dict(spec, file=NAME)).encode()) if spec else ("DELETE", None)
        request = urllib.request.Request(f"{self.endpoint}/_standin/faults", data=data, method=method)
        urllib.request.urlopen(request, timeout=5).close()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def ours(hub, dest, size, sha256):
    result = HubFile(
        FileRef(hub.endpoint, REPO, "main", NAME), str(dest), expected_size=size, expected_sha256=sha256,
        retries=5, retry_delay=0.1,
    ).ensure()  # fmt: skip
    return result["bytes_fetched"]


def curl(hub, dest, size, sha256):
    out = subprocess.run(
        ["curl", "-sS", "-L", "--fail", "-C", "-", "-o", str(dest / NAME), "-w", "%{size_download}",
         f"{hub.endpoint}/{REPO}/resolve/main/{NAME}"],
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

    def __call__(self, hub, dest, size, sha256):
        self.received = 0
        self.download(REPO, NAME, cache_dir=str(dest / "hf-cache"))
        return self.received


def timed(fetch, *args):
    started = time.perf_counter()
    fetch(*args)
    return time.perf_counter() - started


def best_rates(clients, hub, dest_root, size, sha256, repeat):
    """Each client's best of `repeat` fetches into an empty dest, in MB/s. The clients take turns, so that
    a burst of load from elsewhere on the machine does not fall on one client's fetches alone."""
    best = dict.fromkeys(clients, 0.0)
    for _ in range(repeat):
        for name, fetch in clients.items():
            dest = dest_root / name
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir()
            best[name] = max(best[name], size / timed(fetch, hub, dest, size, sha256) / MB)
            shutil.rmtree(dest, ignore_errors=True)
    return best


def refetched_after_a_cut(name, hub, dest, size, sha256, hf):
    """Bytes fetched beyond the half missing after a cut at half way, on the run(s) that finish the file."""
    half = size // 2
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    hub.fault(cut_after=half, times=1)
    if name == "ours":
        with contextlib.suppress(HubTransientError):
            HubFile(FileRef(hub.endpoint, REPO, "main", NAME), str(dest), expected_size=size,
                    expected_sha256=sha256, retries=0).ensure()  # fmt: skip
        moved = ours(hub, dest, size, sha256)
    elif name == "curl":
        curl(hub, dest, size, sha256)
        moved = curl(hub, dest, size, sha256)[0]
    else:
        # It resumes by itself in the same call: count all it received, less the half before the cut.
        moved = hf(hub, dest, size, sha256) - half
    shutil.rmtree(dest, ignore_errors=True)
    hub.fault()
    return moved - (size - half)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="file size in MiB (default 1024)")
    parser.add_argument("--repeat", type=int, default=3, help="fetches per client and setting (best counts)")
    args = parser.parse_args()
    size = args.size_mib << 20

    work = Path(tempfile.mkdtemp(prefix="ds4-bench-", dir="/tmp"))
    shm = Path("/dev/shm")
    room = shutil.disk_usage(shm).free if shm.is_dir() else 0
    dest_root = Path(tempfile.mkdtemp(prefix="ds4-bench-", dir=shm if room > 3 * size else work))
    hub = None
    try:
        print(f"writing {size:,} random bytes to {work} ...", flush=True)
        sha256 = make_data(work / "hub", size)
        hub = Standin(work / "hub", work / "standin.log")
        hf = HubClient(hub.endpoint, work)
        clients = {"ours": ours, "curl": lambda *a: curl(*a)[0], "hf": hf}
        print(f"downloads to {dest_root}; best of {args.repeat} per client, the clients taking turns")
        # Ours needs a core for the hash beside the one moving bytes: other work on the machine costs it most.
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start\n")
        header = ("setting", "ours MB/s", "curl MB/s", "hf MB/s", "ours/curl", "ours/hf")
        print("{:<24}{:>11}{:>11}{:>10}{:>11}{:>9}".format(*header))
        for setting, throttle in (("throttled to ~1 GB/s", THROTTLE_BPS), ("unthrottled", None)):
            if throttle:
                hub.fault(throttle_bps=throttle, times=None)
            rates = best_rates(clients, hub, dest_root, size, sha256, args.repeat)
            hub.fault()
            print(
                f"{setting:<24}{rates['ours']:>11.0f}{rates['curl']:>11.0f}{rates['hf']:>10.0f}"
                f"{rates['ours'] / rates['curl']:>11.2f}{rates['ours'] / rates['hf']:>9.2f}",
                flush=True,
            )
        print(f"\nbytes fetched again after a cut at {size // 2:,} bytes (beyond the half that was missing):")
        for name in clients:
            extra = refetched_after_a_cut(name, hub, dest_root / name, size, sha256, hf)
            print(f"  {name:<5} {extra:,}")
        print("(ours: the resume run's bytes_fetched; curl: its size_download on the second run;")
        print(" hf: the body bytes its HTTP client received in the call that resumed by itself, less the")
        print(" half before the cut)")
        print(f"load average {os.getloadavg()[0]:.1f} at the end")
    finally:
        if hub is not None:
            hub.stop()
        shutil.rmtree(dest_root, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
