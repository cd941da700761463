#!/usr/bin/env python3
"""A no-op re-converge of a serving Spark against 25 unchanged `copy` tasks over the same connection.

On one sandbox Spark of its own (tests/sandbox/sandbox.py with --prefix), site.yml first provisions it
(not timed). Then, in one run and alternating for --rounds rounds:

1. `site.yml -l spark01` on the serving Spark, where nothing is to change;
2. a play of 25 `copy` tasks (become, no fact gathering) whose files are already in place, over the same
   inventory, SSH settings and ansible.cfg: the cost of 25 tasks that only check.

A round's reference is the mean of the copy plays just before and just after its site.yml run, so that
a machine whose load changes over minutes weighs on both sides alike; the ratio of the totals is printed
beside the rounds' median. Each site.yml run's recap must say changed=0 and failed=0, and ds4.service
must keep its invocation (no restart); a round that breaks either is reported. After the rounds, a
drifted managed file (a line appended to /etc/ds4/ds4.env) must be found and put back by the next
site.yml run, so that a fast no-op is not one that stopped looking.

It prints each round's wall times and their ratio (site.yml / copy), the median ratio (issue 12's goal:
<= 1.0 with 0 restarts and changed=0; issue 43's: <= 0.2), site.yml's task counts, and asserts nothing.
The sandbox is removed at the end unless --keep. With ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks
and --log DIR, each site.yml run's output (with its slowest tasks) is kept in DIR.

    .venv/bin/python bench/noop.py [--prefix bench-noop-] [--rounds 3] [--keep] [--log DIR]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from sandbox_hosts import ROOT, log, playbook_command, podman, sandbox_down, sandbox_up, write_inventory

HOST = "spark01"
COPIES = 25
ENV_FILE = "/etc/ds4/ds4.env"
DRIFT = "DS4_BENCH_DRIFT=1"
# A hang guard only: the first provision builds the stand-in engine and fetches the stand-in weights.
RUN_TIMEOUT = 1800

COPY_PLAY = """---
- name: Check {n} files that are already in place
  hosts: {host}
  become: true
  gather_facts: false
  tasks:
{tasks}
"""
COPY_TASK = """    - name: Keep file {i} in place
      ansible.builtin.copy:
        dest: /var/tmp/ds4-bench-noop-{i}.txt
        content: "unchanged {i}\\n"
        mode: "0644"
"""


class Spark:
    """The sandbox's spark01 (and its forge), and an inventory that reaches it."""

    def __init__(self, prefix: str, workdir: Path):
        self.prefix = prefix
        self.inventory = write_inventory(workdir, {"sparks": {"hosts": sandbox_up(prefix, (HOST,))}})

    def sh(self, script: str, check: bool = True) -> str:
        return podman("exec", f"{self.prefix}{HOST}", "sh", "-c", script, check=check)

    def invocation(self) -> str:
        return self.sh("systemctl show -p InvocationID --value ds4.service").strip()

    def down(self) -> None:
        sandbox_down(self.prefix)


def playbook(spark: Spark, path: Path, *args: str) -> tuple[float, str]:
    """Run a playbook; (wall seconds, output)."""
    cmd, env = playbook_command(spark.inventory, path, *args)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    return time.monotonic() - started, proc.stdout + proc.stderr


def recap(output: str) -> dict:
    """The recap's counts for spark01 (ok, changed, failed, skipped, ...); {} when there is none."""
    match = re.search(rf"^{HOST}\s+:(.*)$", output, re.M)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(1))} if match else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="bench-noop-", help="the sandbox's name prefix")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the sandbox up")
    parser.add_argument("--log", type=Path, help="a directory to write each site.yml run's output to")
    opts = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="ds4-bench-noop-") as tmp:
        workdir = Path(tmp)
        log(f"bringing up {opts.prefix}{HOST}")
        spark = Spark(opts.prefix, workdir)
        try:
            run_bench(spark, workdir, opts.rounds, opts.log)
        finally:
            if not opts.keep:
                spark.down()


def run_bench(spark: Spark, workdir: Path, rounds: int, log_dir: Path | None) -> None:
    site = ROOT / "site.yml"
    copies = workdir / "copies.yml"
    tasks = "".join(COPY_TASK.format(i=i) for i in range(1, COPIES + 1))
    copies.write_text(COPY_PLAY.format(n=COPIES, host=HOST, tasks=tasks))

    log("provisioning (not timed)")
    _, out = playbook(spark, site, "-l", HOST)
    if recap(out).get("failed", 1) != 0:
        raise SystemExit(f"bench: the first provision failed:\n{out[-3000:]}")
    # The first copy play writes the files; from the second on, every copy only checks.
    _, out = playbook(spark, copies)
    if recap(out).get("failed", 1) != 0:
        raise SystemExit(f"bench: the copy play failed:\n{out[-3000:]}")
    copy_before, _ = playbook(spark, copies)

    results = []
    for n in range(1, rounds + 1):
        before = spark.invocation()
        site_s, out = playbook(spark, site, "-l", HOST)
        if log_dir:
            (log_dir / f"site-{n}.log").write_text(out)
        counts = recap(out)
        restarted = spark.invocation() != before
        copy_after, copy_out = playbook(spark, copies)
        copy_counts = recap(copy_out)
        copy_s = (copy_before + copy_after) / 2
        results.append((site_s, copy_s, counts, restarted, copy_counts))
        log(
            f"round {n}: site.yml {site_s:.1f} s {counts}, copy {copy_before:.1f} s and {copy_after:.1f} s,"
            f" restarted={restarted}"
        )
        copy_before = copy_after

    log("drifting a managed file, then converging again")
    spark.sh(f"echo {DRIFT} >> {ENV_FILE}")
    _, out = playbook(spark, site, "-l", HOST)
    drift_counts = recap(out)
    drift_left = DRIFT in spark.sh(f"cat {ENV_FILE}")

    print(f"\nno-op re-converge of a serving Spark ({HOST}) against {COPIES} unchanged copy tasks")
    head = ("round", "site.yml", f"copy x{COPIES}", "ratio", "tasks", "changed")
    print("{:>5}  {:>9}  {:>9}  {:>6}  {:>5}  {:>7}  restart".format(*head))
    for n, (site_s, copy_s, counts, restarted, _) in enumerate(results, 1):
        tasks_run = counts.get("ok", 0) + counts.get("changed", 0) + counts.get("skipped", 0)
        print(
            f"{n:>5}  {site_s:>7.1f} s  {copy_s:>7.1f} s  {site_s / copy_s:>6.2f}  {tasks_run:>5}"
            f"  {counts.get('changed', '-'):>7}  {'yes' if restarted else 'no'}"
        )
    ratios = [site_s / copy_s for site_s, copy_s, *_ in results]
    last = results[-1][2]
    total = sum(r[0] for r in results) / sum(r[1] for r in results)
    print(
        f"median ratio site.yml / copy x{COPIES}: {statistics.median(ratios):.2f}, ratio of the totals:"
        f" {total:.2f} (goals: <= 1.0, issue 12; <= 0.2, issue 43)"
    )
    print(
        f"site.yml tasks: ok={last.get('ok')} skipped={last.get('skipped')};"
        f" changed in any round: {sum(r[2].get('changed', 0) for r in results)};"
        f" failed in any round: {sum(r[2].get('failed', 0) for r in results)};"
        f" restarts: {sum(r[3] for r in results)};"
        f" copy changed: {sum(r[4].get('changed', 0) for r in results)}"
    )
    print(
        f"drifted {ENV_FILE}: changed={drift_counts.get('changed')} failed={drift_counts.get('failed')},"
        f" {'still drifted' if drift_left else 'put back'}"
    )


if __name__ == "__main__":
    main()
