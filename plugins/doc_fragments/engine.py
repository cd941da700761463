"""The options of the modules that call the running engine on its Spark."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  host:
    description:
      - The engine's listen address (C(ds4_host)); a wildcard address is asked on loopback.
    type: str
    default: 127.0.0.1
  port:
    description: The engine's port (C(ds4_port)).
    type: int
    default: 8000
"""
