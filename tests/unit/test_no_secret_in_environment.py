"""No task, play or block hands a secret-bearing setting (_common.redact.SECRETS: the proxy, the token, the
keys, the engine's extra environment) to a module through `environment:`: Ansible writes that keyword onto
the remote shell's command line, which `ps` shows every local user and -vvv prints. Such a value reaches a
module as a no_log option (the proxy: `proxy_env`, module_utils/_net/proxy_env.py)."""

from pathlib import Path

import yaml
from ansible_collections.ds4.fleet.plugins.module_utils._common.redact import SECRETS

REPO = Path(__file__).resolve().parents[2]


def yaml_files():
    yield REPO / "site.yml"
    yield from sorted((REPO / "playbooks").glob("*.yml"))
    for part in ("tasks", "handlers"):
        yield from sorted(REPO.glob(f"roles/*/{part}/*.yml"))


def environments(node, where):
    """(where, the text of each `environment:`) in NODE, a loaded YAML document, at any depth."""
    if isinstance(node, dict):
        if "environment" in node:
            yield where, yaml.safe_dump(node["environment"])
        for value in node.values():
            yield from environments(value, where)
    elif isinstance(node, list):
        for item in node:
            yield from environments(item, where)


def test_no_environment_keyword_carries_a_secret_bearing_setting():
    found = [
        f"{where.relative_to(REPO)}: environment {text.strip()!r} names {name}"
        for path in yaml_files()
        for where, text in environments(yaml.safe_load(path.read_text()), path)
        for name in sorted(SECRETS)
        if name in text
    ]
    assert not found, "\n".join(found)
