"""The fleet's Prometheus files offered to a site's own Prometheus in the shape the prometheus.prometheus
collection's role takes: its variables prometheus_scrape_configs (a list of scrape configurations) and
prometheus_alert_rules (a list of rules, which it writes into one group of its own).

Ansible templates the values of variables, and an alert's annotations are Go templates ({{ $labels.spark }}),
so every string holding Jinja's delimiters is kept literal in {% raw %}...{% endraw %}, as that role's own
defaults are written.
"""

from __future__ import annotations

_JINJA = ("{{", "{%", "{#")


def literal(value):
    """VALUE with each string that holds a Jinja delimiter wrapped in {% raw %}...{% endraw %}."""
    if isinstance(value, str):
        if any(mark in value for mark in _JINJA):
            return "{% raw %}" + value + "{% endraw %}"
        return value
    if isinstance(value, dict):
        return {key: literal(item) for key, item in value.items()}
    if isinstance(value, list):
        return [literal(item) for item in value]
    return value


def role_vars(rules: dict, scrape: dict) -> dict:
    """{prometheus_scrape_configs, prometheus_alert_rules} from the rule file's document (RULES: {groups:
    [{name, rules}]}) and the scrape configuration file's (SCRAPE: {scrape_configs: [...]}); every rule of
    every group, in order."""
    alert_rules = [rule for group in rules.get("groups") or [] for rule in group.get("rules") or []]
    return {
        "prometheus_scrape_configs": literal(list(scrape.get("scrape_configs") or [])),
        "prometheus_alert_rules": literal(alert_rules),
    }
