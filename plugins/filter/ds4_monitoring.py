"""Filters of the fleet's Prometheus files; the logic lives in module_utils/_fleet/prometheus.py.

- `rules_text | ds4.fleet.prometheus_role_vars(scrape_text)` -> {prometheus_scrape_configs,
  prometheus_alert_rules} for the prometheus.prometheus role, from the rule file's and the scrape
  configuration file's YAML.
- `rules_text | ds4.fleet.prometheus_rules_problems` -> what Prometheus would refuse in a rule file, one
  line each ([] for a file it loads).
"""

from __future__ import annotations

import yaml
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.prometheus import role_vars, rules_problems


def prometheus_role_vars(rules_text, scrape_text) -> dict:
    return role_vars(yaml.safe_load(str(rules_text)), yaml.safe_load(str(scrape_text)))


def prometheus_rules_problems(rules_text) -> list:
    try:
        document = yaml.safe_load(str(rules_text))
    except yaml.YAMLError as exc:
        return [f"not YAML: {' '.join(str(exc).split())}"]
    return rules_problems(document)


class FilterModule:
    def filters(self):
        return {
            "prometheus_role_vars": prometheus_role_vars,
            "prometheus_rules_problems": prometheus_rules_problems,
        }
