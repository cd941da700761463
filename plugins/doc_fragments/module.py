"""What every module of the collection says alike: who wrote it and what it supports.

A module that supports more or less (diff mode, no check mode) says so in its own attributes, which take
precedence over these; one that returns facts adds ds4.fleet.module.facts.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
author: ds4-fleet developers (@ds4-fleet)
attributes:
  check_mode:
    description: Runs in check mode and says what it would change, changing nothing.
    support: full
  diff_mode:
    description: Returns what it changed, or would change in check mode, as a diff.
    support: none
"""

    FACTS = r"""
options: {}
attributes:
  facts:
    description: Returns an C(ansible_facts) dictionary that updates the host's facts.
    support: full
"""
