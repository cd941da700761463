#!/usr/bin/env python3
"""A fleet upgrade against the same upgrade on one Spark, and each Spark's downtime against its engine start.

On three sandbox Sparks (tests/sandbox/sandbox.py; the built-in sandbox unless --prefix names another):

1. provision all three on --from with site.yml, the stand-in engine taking --load-delay seconds to load
   (DS4_STANDIN_LOAD_DELAY through ds4_extra_env), so that a start is long enough to measure;
2. upgrade spark01 alone to --to (playbooks/upgrade.yml -l spark01), then put it back on --from and delete
   the --to build, so that the fleet upgrade starts from the same state;
3. upgrade all three to --to.

During each upgrade a loop inside every Spark asks /v1/models every 0.2 s and logs whether it answered.
A Spark's downtime is the span from its first unanswered probe to the next answered one. Its engine's start
time comes from its journal: systemd's `Starting ds4.service` to the engine's `listening on` line. Play
starts are stamped as the playbook prints them, which splits each upgrade into staging (everything before
the switch play), switching (the switch play, all its batches) and the cleanup and summary.

It prints the timings and the ratios (fleet/one Spark wall time, staging and switching; downtime/engine
start per Spark) and asserts nothing. It stops the probe loops it started, and leaves the sandbox up.

    .venv/bin/python bench/fleet_upgrade.py [--prefix bench-] [--from v0.6.3] [--to v0.6.5] [--load-delay 5]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path

from sandbox_hosts import ROOT, log, playbook_command, podman, sandbox_up, write_inventory

HOSTS = ("spark01", "spark02", "spark03")
SANDBOX_INVENTORY = ROOT / "inventory" / "sandbox"
PROBE_LOG = "/run/ds4-bench-probe.log"
PROBE_PID = "/run/ds4-bench-probe.pid"
SWITCH_PLAY = "PLAY [Switch the staged Sparks"
CLEANUP_PLAY = "PLAY [Clean up on the Sparks that switched"
# Seconds an upgrade may take before the benchmark gives up on it.
RUN_TIMEOUT = 1800


class Fleet:
    """The sandbox's Sparks (three unless told): their containers and an inventory that reaches them."""

    def __init__(self, prefix: str, workdir: Path, *options: str, hosts=HOSTS):
        """OPTIONS: more of sandbox.py up's (--small-disk HOST=SIZE)."""
        self.prefix, self.hosts = prefix, tuple(hosts)
        hosts = sandbox_up(prefix, self.hosts, *options)
        # A separate sandbox has random ports: an inventory of its own.
        self.inventory = (
            write_inventory(workdir, {"sparks": {"hosts": hosts}}) if prefix else SANDBOX_INVENTORY
        )

    def container(self, host: str) -> str:
        return f"{self.prefix}{host}"

    def sh(self, host: str, script: str, check: bool = True) -> str:
        return podman("exec", self.container(host), "sh", "-c", script, check=check)


def playbook(fleet: Fleet, path: str, *args: str) -> tuple[float, dict, str]:
    """Run a playbook; (wall seconds, seconds from the run's start to each play's first header, output).

    A play with serial prints its header again for every batch; the first is its start."""
    cmd, env = playbook_command(fleet.inventory, path, *args, PYTHONUNBUFFERED="1")
    started = time.monotonic()
    plays, lines = {}, []
    with subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        for line in proc.stdout:
            lines.append(line)
            name = line.split("]")[0] + "]"
            if line.startswith("PLAY [") and name not in plays:
                plays[name] = time.monotonic() - started
            if time.monotonic() - started > RUN_TIMEOUT:
                proc.kill()
                raise SystemExit(f"bench: {path} ran longer than {RUN_TIMEOUT} s")
    return time.monotonic() - started, plays, "".join(lines)


def start_probes(fleet: Fleet) -> None:
    """A loop in each Spark asking /v1/models every 0.2 s; its pid is kept so that only it is stopped."""
    loop = (
        f"echo $$ > {PROBE_PID}; : > {PROBE_LOG}; while :; do t=$(date +%s.%N); "
        "if curl -fs -m 1 -o /dev/null http://127.0.0.1:8000/v1/models; then r=1; else r=0; fi; "
        f'echo "$t $r" >> {PROBE_LOG}; sleep 0.2; done'
    )
    for host in HOSTS:
        podman("exec", "-d", fleet.container(host), "sh", "-c", loop)
    time.sleep(1)


def stop_probes(fleet: Fleet) -> dict:
    """Stop each Spark's probe loop by its pid; its samples, [(epoch seconds, answered)]."""
    samples = {}
    for host in HOSTS:
        fleet.sh(host, f"kill $(cat {PROBE_PID}) 2>/dev/null; rm -f {PROBE_PID}", check=False)
        text = fleet.sh(host, f"cat {PROBE_LOG}", check=False)
        samples[host] = [
            (float(t), r == "1") for t, r in (line.split() for line in text.splitlines() if line)
        ]
    return samples


def downtime(samples) -> float | None:
    """The longest span from an unanswered probe to the next answered one; None when every probe answered."""
    longest, down_since = None, None
    for stamp, answered in samples:
        if not answered and down_since is None:
            down_since = stamp
        elif answered and down_since is not None:
            longest = max(longest or 0.0, stamp - down_since)
            down_since = None
    if down_since is not None:
        longest = max(longest or 0.0, samples[-1][0] - down_since)
    return longest


def engine_start(fleet: Fleet, host: str, since: float) -> float | None:
    """Seconds from systemd's last `Starting ds4.service` since `since` to the engine's `listening on`."""
    journal = fleet.sh(host, f"journalctl -u ds4.service -o short-unix --no-pager --since @{int(since)}")
    starting = listening = None
    for line in journal.splitlines():
        stamp = float(line.split()[0])
        if re.search(r"Starting ds4\.service", line):
            starting, listening = stamp, None
        elif "listening on" in line and starting is not None and listening is None:
            listening = stamp
    return listening - starting if starting and listening else None


def upgrade(fleet: Fleet, release: str, extra: list[str], hosts, limit: str | None) -> dict:
    since = time.time()
    start_probes(fleet)
    args = ["-e", f"ds4_release={release}", *extra, *(["-l", limit] if limit else [])]
    wall, plays, output = playbook(fleet, "playbooks/upgrade.yml", *args)
    samples = stop_probes(fleet)
    if f"Upgrade to {release}: done" not in output or re.search(r"^spark0\d\s+:.*failed=[1-9]", output, re.M):
        raise SystemExit(f"bench: the upgrade to {release} did not succeed:\n{output[-3000:]}")
    switch_at = next((t for name, t in plays.items() if name.startswith(SWITCH_PLAY)), wall)
    cleanup_at = next((t for name, t in plays.items() if name.startswith(CLEANUP_PLAY)), wall)
    return {
        "wall": wall,
        "stage": switch_at,
        "switch": cleanup_at - switch_at,
        "after": wall - cleanup_at,
        "hosts": {
            host: {"down": downtime(samples[host]), "engine": engine_start(fleet, host, since)}
            for host in hosts
        },
    }


def fmt(value, unit="s") -> str:
    return "-" if value is None else f"{value:.1f} {unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="", help="a sandbox of its own (default: the built-in one)")
    parser.add_argument("--from", dest="old", default="v0.6.3", help="release the Sparks start on")
    parser.add_argument("--to", dest="new", default="v0.6.5", help="release they are upgraded to")
    parser.add_argument("--load-delay", type=float, default=5, help="seconds the stand-in engine loads")
    args = parser.parse_args()
    extra = ["-e", json.dumps({"ds4_extra_env": {"DS4_STANDIN_LOAD_DELAY": f"{args.load_delay:g}"}})]

    with tempfile.TemporaryDirectory(prefix="ds4-bench-fleet-") as tmp:
        fleet = Fleet(args.prefix, Path(tmp))
        log(f"provisioning {', '.join(HOSTS)} on {args.old} (engine load {args.load_delay:g} s)")
        wall, _, output = playbook(fleet, "site.yml", "-e", f"ds4_release={args.old}", *extra)
        if re.search(r"^spark0\d\s+:.*(failed|unreachable)=[1-9]", output, re.M):
            raise SystemExit(f"bench: provisioning failed:\n{output[-3000:]}")

        log(f"upgrading spark01 alone to {args.new}")
        one = upgrade(fleet, args.new, extra, ["spark01"], "spark01")
        log(f"putting spark01 back on {args.old} and deleting its {args.new} build")
        upgrade(fleet, args.old, extra, ["spark01"], "spark01")
        fleet.sh("spark01", f"rm -rf /opt/ds4/releases/{args.new} /var/log/ds4/build-{args.new}.log")

        log(f"upgrading the fleet to {args.new}")
        three = upgrade(fleet, args.new, extra, HOSTS, None)

    print(f"\nUpgrade {args.old} -> {args.new}, stand-in engine load {args.load_delay:g} s")
    print(f"{'':24}{'one Spark':>12}{'three Sparks':>14}{'ratio':>8}")
    phases = (
        ("wall", "wall time"),
        ("stage", "  staging"),
        ("switch", "  switching"),
        ("after", "  cleanup, summary"),
    )
    for key, label in phases:
        print(f"{label:24}{fmt(one[key]):>12}{fmt(three[key]):>14}{three[key] / one[key]:>8.2f}")
    print(f"\n{'downtime per Spark':24}{'down':>12}{'engine start':>14}{'ratio':>8}{'extra':>10}")
    for label, run in (("one Spark", one), ("three Sparks", three)):
        for host, seen in run["hosts"].items():
            down, engine = seen["down"], seen["engine"]
            ratio = f"{down / engine:.2f}" if down and engine else "-"
            more = fmt(down - engine) if down is not None and engine is not None else "-"
            print(f"{label + ' ' + host:24}{fmt(down):>12}{fmt(engine):>14}{ratio:>8}{more:>10}")


if __name__ == "__main__":
    main()
