"""The fleet's Prometheus files as the prometheus.prometheus role's variables
(module_utils/_fleet/prometheus.py)."""

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.prometheus import (
    literal,
    role_vars,
    rules_problems,
)

RULES = {
    "groups": [
        {
            "name": "a",
            "rules": [{"alert": "A", "expr": "up == 0", "annotations": {"summary": "{{ $labels.spark }}"}}],
        },
        {"name": "b", "rules": [{"alert": "B", "expr": "x > 1", "labels": {"severity": "info"}}]},
        {"name": "empty", "rules": []},
    ]
}
SCRAPE = {"scrape_configs": [{"job_name": "ds4-sparks", "static_configs": [{"targets": ["s1:9100"]}]}]}


def test_every_rule_of_every_group_in_order_and_the_scrape_configurations():
    result = role_vars(RULES, SCRAPE)
    assert [rule["alert"] for rule in result["prometheus_alert_rules"]] == ["A", "B"]
    assert result["prometheus_scrape_configs"] == SCRAPE["scrape_configs"]


def test_go_templates_are_kept_from_ansibles_templating():
    result = role_vars(RULES, SCRAPE)
    summary = result["prometheus_alert_rules"][0]["annotations"]["summary"]
    assert summary == "{% raw %}{{ $labels.spark }}{% endraw %}"
    assert literal({"k": ["plain", "{% if %}", "{# c #}", 3]}) == {
        "k": ["plain", "{% raw %}{% if %}{% endraw %}", "{% raw %}{# c #}{% endraw %}", 3]
    }


def test_no_rules_no_scrape_configurations():
    assert role_vars({}, {}) == {"prometheus_scrape_configs": [], "prometheus_alert_rules": []}


# A rule file as Prometheus's loader judges it (rules_problems, filter prometheus_rules_problems): a site's
# alert rules template is refused before any file is written.
def test_the_roles_own_rules_and_a_recording_rule_load():
    assert rules_problems(RULES) == []
    assert rules_problems(None) == []
    recording = {
        "groups": [{"name": "r", "interval": "1m", "rules": [{"record": "a:b:sum", "expr": "sum(x)"}]}]
    }
    assert rules_problems(recording) == []
    braces = {"groups": [{"name": "q", "rules": [{"alert": "Q", "expr": 'x{a="}(["} > 1', "for": "1h30m"}]}]}
    assert rules_problems(braces) == []


def rule(**fields):
    return {"groups": [{"name": "g", "rules": [fields]}]}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "the file must hold one key, groups, a list"),
        ({"groups": [], "extra": 1}, "the file must hold one key, groups, a list"),
        ({"groups": [{"rules": []}]}, "group 1 has no name"),
        ({"groups": [{"name": "g"}, {"name": "g"}]}, "group g is named twice"),
        ({"groups": [{"name": "g", "evaluation": "1m"}]}, "group g has an unknown field 'evaluation'"),
        (
            {"groups": [{"name": "g", "interval": "1 m"}]},
            "group g interval '1 m' is not a duration such as 1m",
        ),
        ({"groups": [{"name": "g", "rules": {"alert": "A"}}]}, "group g rules is not a list"),
        (rule(expr="up == 0"), "group g rule 1 needs exactly one of alert and record"),
        (rule(alert="A", record="a", expr="up"), "group g rule 1 needs exactly one of alert and record"),
        (rule(record="not a name", expr="up"), "group g rule 1 record 'not a name' is not a metric name"),
        (rule(alert="A"), "group g rule 1 (A) has no expr"),
        (rule(alert="A", expr="sum(up"), "group g rule 1 (A) expr leaves '(' open"),
        (rule(alert="A", expr="sum(up))"), "group g rule 1 (A) expr has an unmatched ')'"),
        (rule(alert="A", expr='up{job="x} == 0'), 'group g rule 1 (A) expr leaves a " string open'),
        (
            rule(alert="A", expr="up", **{"for": "5 minutes"}),
            "group g rule 1 (A) for '5 minutes' is not a duration such as 5m",
        ),
        (
            rule(record="a", expr="up", **{"for": "5m"}),
            "group g rule 1 (a) is a recording rule: it takes no for",
        ),
        (rule(alert="A", expr="up", severity="page"), "group g rule 1 has an unknown field 'severity'"),
        (
            rule(alert="A", expr="up", labels={"bad-name": "x"}),
            "group g rule 1 (A) labels has an invalid name 'bad-name'",
        ),
        (
            rule(alert="A", expr="up", annotations={"summary": ["x"]}),
            "group g rule 1 (A) annotations summary is not a string",
        ),
    ],
)
def test_what_prometheus_refuses_is_named(document, problem):
    assert problem in rules_problems(document)


def test_the_filter_names_yaml_that_does_not_parse():
    from ansible_collections.ds4.fleet.plugins.filter.ds4_monitoring import prometheus_rules_problems

    assert prometheus_rules_problems("groups:\n  - name: a\n   rules: [")[0].startswith("not YAML: ")
    assert prometheus_rules_problems("groups: []\n") == []
