#!/usr/bin/env python3
"""Print what failed in a scenario's verify step, from the JUnit report pytest wrote there.

`make molecule` calls it after a scenario failed: CI shows only the last lines of what `make test` printed,
and Molecule's own recap there names the step that failed, not the test or its assertion.
"""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# Lines of a failure's message (the assertion's own message first) that are printed, at most.
MESSAGE_LINES = 12


def failures(report: Path) -> list[str]:
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


def main() -> int:
    report = Path(sys.argv[1])
    if not report.is_file():
        print(f"(no verify report at {report}: the scenario failed before its tests ran; see above)")
        return 0
    lines = failures(report)
    print(f"== what failed in {report.stem}'s tests:" if lines else f"== {report.stem}'s tests all passed")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
