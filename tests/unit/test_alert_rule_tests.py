"""Every alert rule that playbooks/monitoring.yml generates has promtool rule tests of its timing (issue 29):
in one of the fleet scenario's promtool files (which its tests run with `promtool test rules` on the
generated rules), a case where the alert fires, none at a later time once its condition ended (it clears),
and, for a rule with a `for:`, none at an earlier time while the condition already held."""

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "roles/ds4_monitoring/templates/ds4-alerts.yml.j2"
PROMTOOL_FILES = sorted((REPO / "molecule/fleet/tests").glob("*.promtool.yml"))
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(duration):
    return sum(int(n) * UNITS[u] for n, u in re.findall(r"([0-9]+)(ms|s|m|h|d)", duration))


def rules():
    """{alert: whether it has a for:}, from the template."""
    found = {}
    for block in re.split(r"\n      - alert: ", TEMPLATE.read_text())[1:]:
        name, body = block.split("\n", 1)
        found[name.strip()] = bool(re.search(r"^        for: ", body.split("\n      - ", 1)[0], re.M))
    return found


def timelines():
    """{alert: [[(eval seconds, fires), ...] for each case that evaluates it]}."""
    found = {}
    for path in PROMTOOL_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            evals = {}
            for check in case.get("alert_rule_test", []):
                evals.setdefault(check["alertname"], []).append(
                    (seconds(check["eval_time"]), bool(check["exp_alerts"]))
                )
            for name, points in evals.items():
                found.setdefault(name, []).append(sorted(points))
    return found


def timed(points, needs_before):
    """Whether a case shows the alert firing, not before (for a rule with a for:), and cleared after."""
    fired = [t for t, fires in points if fires]
    if not fired:
        return False
    after = any(t > max(fired) and not fires for t, fires in points)
    before = any(t < min(fired) and not fires for t, fires in points)
    return after and (before or not needs_before)


def test_the_template_has_the_rules_the_docs_list():
    documented = set(re.findall(r"^\| `(Ds4\w+)` \|", (REPO / "docs/monitoring.md").read_text(), re.M))
    assert set(rules()) == documented


def test_each_rule_has_a_promtool_case_that_times_its_firing_and_its_clearing():
    cases = timelines()
    untimed = [
        name
        for name, has_for in rules().items()
        if not any(timed(points, has_for) for points in cases.get(name, []))
    ]
    assert untimed == []


def test_a_case_without_a_clearing_is_found_wanting():
    assert not timed([(300, False), (420, True)], needs_before=True)
    assert not timed([(420, True), (540, False)], needs_before=True)
    assert timed([(60, True), (660, False)], needs_before=False)
