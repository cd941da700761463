#!/usr/bin/env python3
"""Clients through the gateway during rolling upgrades: failed requests, incomplete streams, latency.

In a sandbox of its own (tests/sandbox/sandbox.py, prefix --prefix): a gateway gw01 beside three Sparks.

1. site.yml puts up the engine firewall and the gateway and provisions the Sparks on --from, the stand-in
   engine taking --load-delay seconds to load (so that a Spark is really down during its switch);
2. a quiet fleet: one client on the gateway host sends --quiet plain chat completions, once straight to
   spark01's engine and once through the gateway (TLS, key check, balancing), each over one kept-alive
   connection; the gateway's added latency is the difference of the two medians (and of the p99s);
3. --clients clients in the forge container send requests through the gateway (streamed chat completions,
   plain ones and Anthropic messages in turn, --pause seconds apart) while upgrade.yml rolls the fleet to
   --to, and then while it rolls to --bad (a release whose smoke test fails on the canary, which is rolled
   back: the rollout stops there).

It prints, for each upgrade, the requests sent, failed and by kind, the streams that did not complete, the
p50 and p99 latency, and for the quiet fleet the latencies and the gateway's added latency. Goals
(issue 16): 0 failed requests of all sent, every stream complete, added latency at p50 <= 5 ms. It
asserts nothing; it leaves the sandbox up (`tests/sandbox/sandbox.py --prefix PREFIX down` removes it).

    .venv/bin/python bench/gateway_upgrade.py [--prefix bench-gw-] [--clients 4] [--load-delay 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from sandbox_hosts import ROOT, log, playbook_command, podman, sandbox_up, write_inventory

LOAD = ROOT / "bench" / "gateway_load.py"
SPARKS = ("spark01", "spark02", "spark03")
GATEWAY = "gw01"
# A benchmark key, not a secret: the sandbox is local and thrown away.
KEY = "ds4-bench-key-0123456789abcdef"
# A hang guard only: provisioning three Sparks has taken over 20 min on a loaded machine.
RUN_TIMEOUT = 3600


class Sandbox:
    """The gateway and three Sparks, and an inventory that reaches them."""

    def __init__(self, prefix: str, workdir: Path):
        self.prefix = prefix
        options = ["--persona", f"{GATEWAY}=none", *[f"--cap-add={s}=NET_ADMIN" for s in SPARKS]]
        hosts = sandbox_up(prefix, (GATEWAY, *SPARKS), *options)
        inventory = {
            "sparks": {"hosts": {s: hosts[s] for s in SPARKS}},
            "gateways": {"hosts": {GATEWAY: hosts[GATEWAY]}, "vars": {"ds4_gateway_api_keys": [KEY]}},
        }
        self.inventory = write_inventory(workdir, inventory)
        for container in (self.container(GATEWAY), f"{prefix}forge"):
            podman("cp", str(LOAD), f"{container}:/usr/local/bin/gateway_load.py")

    def container(self, host: str) -> str:
        return f"{self.prefix}{host}"


def playbook(sandbox: Sandbox, path: str, *args: str, expect: tuple[int, ...] = (0,)) -> tuple[float, str]:
    """Run a playbook: (wall seconds, output). An exit status other than `expect` stops the benchmark with
    the output's end, as its numbers would mean nothing."""
    cmd, env = playbook_command(sandbox.inventory, path, *args)
    started = time.monotonic()
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )
    output = done.stdout + done.stderr
    if done.returncode not in expect:
        raise SystemExit(f"bench: {path} {' '.join(args)} exited {done.returncode}:\n{output[-4000:]}")
    return time.monotonic() - started, output


def load(container: str, url: str, *args: str, detach_stop: str | None = None):
    """Run the load client in a container: its JSON summary, or the process when it runs until a stop file."""
    cmd = ["podman", "exec", container, "python3", "/usr/local/bin/gateway_load.py", "--url", url, *args]
    if detach_stop:
        return subprocess.Popen([*cmd, "--stop-file", detach_stop], stdout=subprocess.PIPE, text=True)
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def under_load(
    sandbox: Sandbox, clients: int, pause: float, *upgrade_args: str, expect: tuple[int, ...] = (0,)
) -> tuple[dict, float, str]:
    """upgrade.yml with the clients sending through the gateway from the forge: their summary, the wall
    time of the upgrade and its output."""
    forge = f"{sandbox.prefix}forge"
    stop = "/tmp/ds4-bench-stop"
    podman("exec", forge, "rm", "-f", stop)
    client = load(
        forge,
        f"https://{GATEWAY}:8443",
        "--key", KEY, "--insecure", "--clients", str(clients), "--requests", "1000000",
        "--pause", str(pause), "--raw",
        detach_stop=stop,
    )  # fmt: skip
    time.sleep(2)
    try:
        wall, output = playbook(sandbox, "playbooks/upgrade.yml", *upgrade_args, expect=expect)
    finally:
        podman("exec", forge, "touch", stop)
    result = json.loads(client.communicate(timeout=300)[0])
    return result, wall, output


def fmt(ms) -> str:
    return "-" if ms is None else f"{ms:.1f} ms"


def report(title: str, result: dict, wall: float) -> None:
    requests = result.pop("requests", [])
    streams = [r for r in requests if r["kind"] == "stream"]
    broken = [r for r in streams if not r["ok"]]
    print(f"\n{title} ({wall:.0f} s)")
    print(f"  requests sent {result['sent']}, failed {result['failed']}")
    for kind, counts in result["by_kind"].items():
        print(f"    {kind:9} sent {counts['sent']:5}, failed {counts['failed']}")
    print(f"  streams complete {len(streams) - len(broken)} of {len(streams)}")
    print(f"  latency p50 {fmt(result['p50_ms'])}, p99 {fmt(result['p99_ms'])}")
    for error in result["errors"]:
        print(f"  error: {error}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="bench-gw-", help="the sandbox's name prefix")
    parser.add_argument("--from", dest="old", default="v0.6.3", help="release the Sparks start on")
    parser.add_argument("--to", dest="new", default="v0.6.5", help="release they are upgraded to")
    parser.add_argument("--bad", default="v0.6.6", help="a release whose smoke test fails")
    parser.add_argument("--load-delay", type=float, default=5, help="seconds the stand-in engine loads")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients during the upgrades")
    parser.add_argument("--pause", type=float, default=0.1, help="seconds between two requests of a client")
    parser.add_argument("--quiet", type=int, default=300, help="requests of the quiet-fleet latency runs")
    args = parser.parse_args()
    extra = ["-e", json.dumps({"ds4_extra_env": {"DS4_STANDIN_LOAD_DELAY": f"{args.load_delay:g}"}})]

    with tempfile.TemporaryDirectory(prefix="ds4-bench-gateway-") as tmp:
        sandbox = Sandbox(args.prefix, Path(tmp))
        log(f"provisioning the gateway and {', '.join(SPARKS)} on {args.old}")
        wall, _ = playbook(sandbox, "site.yml", "-e", f"ds4_release={args.old}", *extra)
        log(f"provisioned in {wall:.0f} s")

        log("measuring the gateway's added latency on the quiet fleet")
        gateway = sandbox.container(GATEWAY)
        quiet = ["--kind", "chat", "--clients", "1", "--requests", str(args.quiet)]
        direct = load(gateway, "http://spark01:8000", *quiet)
        through = load(gateway, "https://127.0.0.1:8443", "--key", KEY, "--insecure", *quiet)
        for name, result in (("straight to spark01", direct), ("through the gateway", through)):
            if result["failed"] or result["sent"] != args.quiet:
                raise SystemExit(f"bench: quiet fleet, {name}: {result['sent']} sent, {result['failed']} "
                                 f"failed of {args.quiet}: {result['errors']}")  # fmt: skip
        # Each section is printed as soon as it is measured: a later failure keeps the numbers before it.
        print(f"\nQuiet fleet, {args.quiet} plain chat completions, one client on the gateway host")
        print(f"  straight to spark01:   p50 {fmt(direct['p50_ms'])}, p99 {fmt(direct['p99_ms'])}")
        print(f"  through the gateway:   p50 {fmt(through['p50_ms'])}, p99 {fmt(through['p99_ms'])}")
        print(
            f"  added by the gateway:  p50 {fmt(through['p50_ms'] - direct['p50_ms'])} (goal <= 5 ms), "
            f"p99 {fmt(through['p99_ms'] - direct['p99_ms'])}; machine load {os.getloadavg()[0]:.1f}",
            flush=True,
        )

        log(f"upgrading the fleet to {args.new} under {args.clients} clients")
        good, good_wall, good_out = under_load(
            sandbox, args.clients, args.pause, "-e", f"ds4_release={args.new}", *extra
        )
        report(f"Upgrade {args.old} -> {args.new} under {args.clients} clients", good, good_wall)
        done = f"Upgrade to {args.new}: done" in good_out
        print(f"  upgrade: {'done' if done else 'NOT done'}", flush=True)

        log(f"upgrading the fleet to {args.bad} (its canary fails) under {args.clients} clients")
        # The canary fails: upgrade.yml fails it in its recap (exit 2), by design.
        bad, bad_wall, bad_out = under_load(
            sandbox, args.clients, args.pause, "-e", f"ds4_release={args.bad}", *extra, expect=(2,)
        )
        title = f"Upgrade -> {args.bad}, canary fails its smoke test, under {args.clients} clients"
        report(title, bad, bad_wall)
        stopped = "the rollout stopped after batch 1" in bad_out
        outcome = "stopped at the canary, rolled back" if stopped else "NOT stopped at the canary"
        print(f"  upgrade: {outcome}")


if __name__ == "__main__":
    main()
