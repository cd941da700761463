"""The hosts the playbooks run on: ds4_target_hosts as one Ansible host pattern.

Pure functions of plain data, used by the filter ds4.fleet.target_hosts in every Spark play's `hosts:`.
"""

from __future__ import annotations

from typing import Any


class TargetError(ValueError):
    """A ds4_target_hosts that names no pattern, said in its words."""


def target_hosts(pattern: Any) -> str:
    """`pattern` (ds4_target_hosts), a host, group or pattern, without surrounding blanks. One that is not a
    string, or is empty or blank, is refused naming the variable: Ansible's own refusal ("Keyword 'hosts'
    is required") names none."""
    if not isinstance(pattern, str):
        raise TargetError(f"ds4_target_hosts is a host, group or pattern: {pattern!r}")
    if not pattern.strip():
        raise TargetError(
            "ds4_target_hosts is empty: name the group, hosts or pattern to run on (unset: the group sparks)"
        )
    return pattern.strip()
