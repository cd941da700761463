"""The options of the modules that ask the weight hub."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
requirements:
  - requests (C(python3-requests) on Ubuntu), on the target host
options:
  endpoint:
    description: The hub, or a mirror serving the same C(resolve) URLs (C(ds4_hf_endpoint)).
    type: str
    default: https://huggingface.co
  token:
    description: Hub token (C(ds4_hf_token)), sent as a bearer token to the hub only; never logged.
    type: str
    default: ""
"""
