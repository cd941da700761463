"""The options of the modules that trust an answer on the engine's port only from ds4.service's engine."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  engine_user:
    description: The user ds4.service runs the engine as, who alone may hold its port.
    type: str
    default: ds4
  unit:
    description: The engine's unit, whose main process must hold the port.
    type: str
    default: ds4.service
"""
