"""tests/sandbox/failures.py reads the JUnit report a real pytest run wrote."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
FAILURES = ROOT / "tests" / "sandbox" / "failures.py"


def run_pytest(tmp_path, source):
    (tmp_path / "test_case.py").write_text(source)
    report = tmp_path / "verify.xml"
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    subprocess.run([*pytest, "test_case.py"], cwd=tmp_path, capture_output=True, check=False)
    return report


def printed(report):
    command = [sys.executable, str(FAILURES), str(report)]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def test_a_failed_test_is_named_with_its_assertion(tmp_path):
    report = run_pytest(
        tmp_path,
        "def test_passes():\n    assert True\n\n"
        "def test_fails():\n    seen = 0\n    assert seen >= 1, 'inflight_at_start was 0'\n",
    )
    out = printed(report)
    assert out.splitlines()[0] == "== what failed in verify's tests:"
    assert "FAILED test_case::test_fails" in out
    assert "inflight_at_start was 0" in out
    assert "test_passes" not in out


def test_a_report_of_passed_tests_says_so(tmp_path):
    out = printed(run_pytest(tmp_path, "def test_passes():\n    assert True\n"))
    assert out.strip() == "== verify's tests all passed"


def test_no_report_means_the_scenario_failed_before_its_tests(tmp_path):
    out = printed(tmp_path / "missing.xml")
    assert "failed before its tests ran" in out
