"""tests/sandbox/scenarios.py: scenarios run side by side, a failure stops the rest from starting, and what
failed is printed last, read from the JUnit report a real pytest run wrote. Molecule is stood in for by a
script that runs pytest on a test file named after the scenario, as Molecule's verify step would."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCENARIOS = ROOT / "tests" / "sandbox" / "scenarios.py"
# The stand-in for `molecule test -s NAME`: after it waits for the scenarios named in NAME.waits to have
# started (each leaves NAME.started), pytest on NAME.py with the runner's PYTEST_ADDOPTS; with no NAME.py,
# it fails as a create step would, before any test.
MOLECULE = """
import os, subprocess, sys, time
from pathlib import Path
name = sys.argv[-1]
Path(name + ".started").touch()
waits = Path(name + ".waits")
deadline = time.monotonic() + 10
for other in (waits.read_text().split() if waits.exists() else []):
    while not Path(other + ".started").exists():
        if time.monotonic() > deadline:
            sys.exit(f"{other} never started beside {name}")
        time.sleep(0.05)
if not Path(name + ".py").exists():
    sys.exit(f"create failed for {name}")
print("converged", name)
pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
sys.exit(subprocess.run([*pytest, *os.environ["PYTEST_ADDOPTS"].split(), name + ".py"]).returncode)
"""
PASSES = "def test_passes():\n    assert True\n"
FAILS = "def test_fails():\n    seen = 0\n    assert seen >= 1, 'inflight_at_start was 0'\n"


def run(tmp_path, jobs, tests, waits=None):
    (tmp_path / "molecule.py").write_text(MOLECULE)
    for name, source in tests.items():
        if source is not None:
            (tmp_path / f"{name}.py").write_text(source)
    for name, others in (waits or {}).items():
        (tmp_path / f"{name}.waits").write_text(" ".join(others))
    command = [sys.executable, str(SCENARIOS), "--jobs", str(jobs), "--logs", "logs", "--reports", "reports",
               "--lock-dir", str(tmp_path), "--command", sys.executable, "molecule.py",
               "--", *tests]  # fmt: skip
    return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=False)


def test_passing_scenarios_run_side_by_side_and_pass(tmp_path):
    # a can finish only once b has started: one at a time, it would fail.
    done = run(tmp_path, 2, {"a": PASSES, "b": PASSES}, waits={"a": ["b"]})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "== a: passed" in done.stdout and "== b: passed" in done.stdout
    assert "converged a" in (tmp_path / "logs" / "a.log").read_text()
    # The last line: each scenario's time, the longest first.
    # Which of the two took longer is the machine's to say; each is there once, in that order.
    times = re.fullmatch(r"== scenarios: (\w+) (\d+) s, (\w+) (\d+) s", done.stdout.splitlines()[-1])
    assert times, done.stdout
    first, first_s, second, second_s = times.groups()
    assert {first, second} == {"a", "b"} and int(first_s) >= int(second_s), done.stdout


def test_one_job_runs_one_scenario_at_a_time(tmp_path):
    done = run(tmp_path, 1, {"a": PASSES, "b": PASSES}, waits={"a": ["b"]})
    assert done.returncode == 1 and "== a: FAILED (exit 1)" in done.stdout, done.stdout
    assert "b never started beside a" in done.stdout


def test_after_a_failure_nothing_starts_and_the_failed_test_is_printed_last(tmp_path):
    done = run(tmp_path, 1, {"good": PASSES, "bad": FAILS, "later": PASSES})
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert "== not started after the failure: later" in lines
    assert not (tmp_path / "later.started").exists()
    tail = "\n".join(lines[lines.index("== bad failed; the end of logs/bad.log:") :])
    assert "converged bad" in tail
    assert "== what failed in bad's tests:\nFAILED bad::test_fails" in tail
    assert "inflight_at_start was 0" in tail and lines[-2].strip().startswith("bad.py:")
    assert re.fullmatch(r"== scenarios: (good|bad) \d+ s, (good|bad) \d+ s", lines[-1]), lines[-1]
    assert "test_passes" not in tail


def test_a_scenario_that_fails_before_its_tests_says_so(tmp_path):
    done = run(tmp_path, 1, {"broken": None})
    assert done.returncode == 1
    assert done.stdout.splitlines()[-3:-1] == [
        "create failed for broken",
        "== broken wrote no verify report: it failed before its tests ran",
    ]
