"""The fleet's Prometheus files offered to a site's own Prometheus in the shape the prometheus.prometheus
collection's role takes: its variables prometheus_scrape_configs (a list of scrape configurations) and
prometheus_alert_rules (a list of rules, which it writes into one group of its own).

Ansible templates the values of variables, and an alert's annotations are Go templates ({{ $labels.spark }}),
so every string holding Jinja's delimiters is kept literal in {% raw %}...{% endraw %}, as that role's own
defaults are written.
"""

from __future__ import annotations

import re

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


# What Prometheus's rule file loader (rulefmt, as `promtool check rules` runs it) refuses, without its
# PromQL parser: the shape of the file, its names and durations, and an expression whose brackets or
# quotes do not close. A site's rule file is judged so before it is written.
_GROUP_KEYS = {"name", "interval", "limit", "query_offset", "labels", "rules"}
_RULE_KEYS = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
_DURATION = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_PAIRS = {")": "(", "]": "[", "}": "{"}


def _expr_problem(expr):
    """Why an expression cannot parse, as far as its brackets and quotes tell, or None."""
    if not isinstance(expr, (str, int, float)) or isinstance(expr, bool) or not str(expr).strip():
        return "has no expr"
    stack, quote, escaped = [], None, False
    for char in str(expr):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\" and quote != "`":
                escaped = True
            elif char == quote:
                quote = None
        elif char in "\"'`":
            quote = char
        elif char in "([{":
            stack.append(char)
        elif char in _PAIRS and (not stack or stack.pop() != _PAIRS[char]):
            return f"expr has an unmatched {char!r}"
    if quote:
        return f"expr leaves a {quote} string open"
    if stack:
        return f"expr leaves {stack[-1]!r} open"
    return None


def _labels_problem(what, labels):
    if labels is None:
        return None
    if not isinstance(labels, dict):
        return f"{what} is not a mapping"
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL.fullmatch(key):
            return f"{what} has an invalid name {key!r}"
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            return f"{what} {key} is not a string"
    return None


def _rule_problems(where, rule):
    if not isinstance(rule, dict):
        return [f"{where} is not a mapping"]
    problems = [f"{where} has an unknown field {key!r}" for key in sorted(set(rule) - _RULE_KEYS, key=str)]
    if ("alert" in rule) == ("record" in rule):
        problems.append(f"{where} needs exactly one of alert and record")
    elif "record" in rule and not (isinstance(rule["record"], str) and _METRIC.fullmatch(rule["record"])):
        problems.append(f"{where} record {rule['record']!r} is not a metric name")
    elif "alert" in rule and not (isinstance(rule["alert"], str) and rule["alert"].strip()):
        problems.append(f"{where} has an empty alert name")
    name = rule.get("alert") or rule.get("record")
    where = f"{where} ({name})" if isinstance(name, str) and name else where
    expr = _expr_problem(rule.get("expr"))
    if expr:
        problems.append(f"{where} {expr}")
    for key in ("for", "keep_firing_for"):
        if key in rule and not (isinstance(rule[key], str) and _DURATION.fullmatch(rule[key])):
            problems.append(f"{where} {key} {rule[key]!r} is not a duration such as 5m")
        elif key in rule and "record" in rule:
            problems.append(f"{where} is a recording rule: it takes no {key}")
    if "annotations" in rule and "record" in rule:
        problems.append(f"{where} is a recording rule: it takes no annotations")
    for key in ("labels", "annotations"):
        problem = _labels_problem(f"{where} {key}", rule.get(key))
        if problem:
            problems.append(problem)
    return problems


def rules_problems(document):
    """What Prometheus would refuse in a rule file (its parsed YAML): one line per problem, [] for a file it
    loads."""
    if document is None:
        return []
    if (
        not isinstance(document, dict)
        or set(document) != {"groups"}
        or not isinstance(document["groups"], list)
    ):
        return ["the file must hold one key, groups, a list"]
    problems, names = [], set()
    for number, group in enumerate(document["groups"], 1):
        if not isinstance(group, dict) or not isinstance(group.get("name"), str) or not group["name"]:
            problems.append(f"group {number} has no name")
            continue
        where = f"group {group['name']}"
        if group["name"] in names:
            problems.append(f"{where} is named twice")
        names.add(group["name"])
        problems += [
            f"{where} has an unknown field {key!r}" for key in sorted(set(group) - _GROUP_KEYS, key=str)
        ]
        if "interval" in group and not (
            isinstance(group["interval"], str) and _DURATION.fullmatch(group["interval"])
        ):
            problems.append(f"{where} interval {group['interval']!r} is not a duration such as 1m")
        rules = group.get("rules") or []
        if not isinstance(rules, list):
            problems.append(f"{where} rules is not a list")
            continue
        for index, rule in enumerate(rules, 1):
            problems += _rule_problems(f"{where} rule {index}", rule)
    return problems
