"""The hosts the playbooks run on: ds4_target_hosts as one Ansible host pattern.

Pure functions of plain data, used by the filter ds4.fleet.target_hosts in every Spark play's `hosts:`.
"""

from __future__ import annotations

from typing import Any

# The group of this run's Sparks that have nothing to change (ds4_service's entry point applied_check puts
# them there): site.yml's plays after its first leave them out.
UNCHANGED = "ds4_fleet_unchanged"


class TargetError(ValueError):
    """A ds4_target_hosts that names no pattern, said in its words."""


def target_hosts(pattern: Any, groups: Any = None) -> str:
    """`pattern` (ds4_target_hosts), a host, group or pattern, without surrounding blanks, less the group
    UNCHANGED where the run's `groups` (Ansible's magic variable) has it. One that is not a string, or is
    empty or blank, is refused naming the variable: Ansible's own refusal ("Keyword 'hosts' is required")
    names none."""
    if not isinstance(pattern, str):
        raise TargetError(f"ds4_target_hosts is a host, group or pattern: {pattern!r}")
    if not pattern.strip():
        raise TargetError(
            "ds4_target_hosts is empty: name the group, hosts or pattern to run on (unset: the group sparks)"
        )
    # Only where the group is there: a pattern that names a group the inventory lacks draws a warning.
    left_out = f":!{UNCHANGED}" if UNCHANGED in (groups or {}) else ""
    return pattern.strip() + left_out
