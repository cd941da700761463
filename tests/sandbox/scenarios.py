#!/usr/bin/env python3
"""Run the Molecule scenarios for `make molecule`, a few side by side, and say what failed last.

Scenarios are independent: each has its own containers, network and ports (the prefix mol-<scenario>-),
and each holds a lock of its name (/tmp/ds4-mol-<scenario>.lock) so that two checkouts on one machine
never run the same scenario at once. Each one's output goes to <logs>/<scenario>.log; this prints a line
as each starts and ends. After a failure no other scenario starts and those running finish; then, last
(CI shows only the last lines of `make test`), each failed scenario's last log lines and its failed tests,
with their assertions, from the JUnit report its verify step wrote (Molecule's recap names only the step).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

# Lines of a failure's message (the assertion's own message first) that are printed, at most.
MESSAGE_LINES = 12
# Lines of a failed scenario's log printed before its failed tests: where it stopped, when no test ran.
LOG_LINES = 25


def failures(report: Path) -> list[str]:
    """Each failed or erroring test of a JUnit report, with its message and where it was raised."""
    lines = []
    for case in ET.parse(report).getroot().iter("testcase"):
        for outcome in case:
            if outcome.tag not in ("failure", "error"):
                continue
            word = "FAILED" if outcome.tag == "failure" else "ERROR"
            lines.append(f"{word} {case.get('classname')}::{case.get('name')}")
            message = [line for line in (outcome.get("message") or "").splitlines() if line.strip()]
            # The text's last line says where: "tests/test_x.py:12: AssertionError".
            where = [line for line in (outcome.text or "").splitlines() if line.strip()][-1:]
            lines += [f"    {line[:300]}" for line in message[:MESSAGE_LINES] + where]
    return lines


def what_failed(scenario: str, log: Path, report: Path) -> list[str]:
    lines = [f"== {scenario} failed; the end of {log}:"]
    lines += log.read_text(errors="replace").splitlines()[-LOG_LINES:]
    if not report.is_file():
        return [*lines, f"== {scenario} wrote no verify report: it failed before its tests ran"]
    tests = failures(report)
    return [
        *lines,
        f"== what failed in {scenario}'s tests:" if tests else f"== {scenario}'s tests all passed",
        *tests,
    ]


def run_one(scenario: str, args: argparse.Namespace) -> tuple[int, float]:
    log, report = args.logs / f"{scenario}.log", args.reports / f"{scenario}.xml"
    report.unlink(missing_ok=True)
    env = dict(os.environ, PYTEST_ADDOPTS=f"--junitxml={report.resolve()}")
    command = [
        "flock",
        str(args.lock_dir / f"ds4-mol-{scenario}.lock"),
        *args.command,
        "test",
        "-s",
        scenario,
    ]
    started = time.monotonic()
    with log.open("w") as out:
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
        )
    return done.returncode, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="scenarios run side by side")
    parser.add_argument("--logs", type=Path, required=True, help="directory of each scenario's log")
    parser.add_argument("--reports", type=Path, required=True, help="directory of each verify's JUnit report")
    parser.add_argument("--lock-dir", type=Path, default=Path("/tmp"))
    parser.add_argument("--command", nargs="+", default=["molecule"], help="Molecule, as it is run")
    parser.add_argument("scenarios", nargs="+", help="in the order they start: the longest first")
    args = parser.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    args.reports.mkdir(parents=True, exist_ok=True)

    waiting, running, failed, took = list(args.scenarios), {}, [], {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:

        def start_next():
            scenario = waiting.pop(0)
            print(f"== molecule test -s {scenario} (log: {args.logs / scenario}.log)", flush=True)
            running[pool.submit(run_one, scenario, args)] = scenario

        while True:
            while waiting and not failed and len(running) < args.jobs:
                start_next()
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                scenario = running.pop(future)
                rc, seconds = future.result()
                took[scenario] = seconds
                print(
                    f"== {scenario}: {'passed' if rc == 0 else f'FAILED (exit {rc})'} in {seconds:.0f} s",
                    flush=True,
                )
                if rc != 0:
                    failed.append(scenario)
    if waiting:
        print(f"== not started after the failure: {' '.join(waiting)}")
    for scenario in failed:
        print(
            "\n".join(what_failed(scenario, args.logs / f"{scenario}.log", args.reports / f"{scenario}.xml"))
        )
    # Last, beside make test's phases: where the time went, the longest first.
    longest = sorted(took, key=took.__getitem__, reverse=True)
    print("== scenarios: " + ", ".join(f"{name} {took[name]:.0f} s" for name in longest), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
