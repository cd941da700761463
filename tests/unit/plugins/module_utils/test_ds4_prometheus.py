"""The fleet's Prometheus files as the prometheus.prometheus role's variables
(module_utils/ds4_prometheus.py)."""

from ansible_collections.ds4.fleet.plugins.module_utils.ds4_prometheus import literal, role_vars

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
