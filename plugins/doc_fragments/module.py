"""What every module of the collection says alike: who wrote it and what it supports.

A module that supports more or less (diff mode, no check mode) says so in its own attributes, which take
precedence over these; one that returns facts adds ds4.fleet.module.facts.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
author: ds4-fleet developers
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

    FACTS = r"""
options: {}
attributes:
  facts:
    support: full
"""
