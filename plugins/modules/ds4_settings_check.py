#!/usr/bin/python
"""Documentation of the ds4_settings_check action (plugins/action/ds4_settings_check.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_settings_check
short_description: Refuse bad ds4 settings of several roles at once, before anything changes
description:
  - Checks every public variable of the ds4 roles named in O(roles) (and of C(ds4_common), which they all
    share) against the role's C(meta/argument_specs.yml) (type, elements, choices) and the rules of
    C(module_utils/_run/settings.py) (ranges, confined paths, URLs, regular expressions, the catalog, the
    launch settings, rules between variables).
  - A variable the play leaves unset is checked at its argument spec's default.
  - Fails with one line per refused variable, naming it, its value and what would be accepted; nothing
    of a secret-bearing variable is shown, whatever its type (C(module_utils/_common/redact.py)); tokens,
    keys, C(ds4_extra_env) and C(ds4_proxy_env) are shown as C(********), URLs with their userinfo as
    C(***@).
  - Runs on the controller as an action and needs no connection; this file only documents it.
version_added: 0.1.0
attributes:
  check_mode:
    support: full
    details: It only reads variables.
options:
  roles:
    description: The ds4 roles whose variables to check, by name (their C(main) entry point).
    type: list
    elements: str
    required: true
  gateway_sparks:
    description:
      - On a gateway, the Sparks behind it. Given, the keys of C(ds4_gateway_api_keys) and of the file
        C(ds4_gateway_api_keys_file) are judged together (at least one, each 16 or more of
        C(A-Z a-z 0-9 . _ ~ + / = -), a bad one named by its position), as are the certificate's files on the
        controller, and an empty list is refused; each Spark's C(ds4_gateway_backend_address) (else its
        C(ansible_host)) must be a host name, an IPv4 or an IPv6 address, as HAProxy's server line takes it.
    type: list
    elements: str
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Refuse bad settings of every role of the play before any change
  ds4.fleet.ds4_settings_check:
    roles: [ds4_preflight, ds4_engine, ds4_weights, ds4_service, ds4_activate]

- name: Refuse gateway settings that cannot be used, before anything on the gateway changes
  ds4.fleet.ds4_settings_check:
    roles: [ds4_gateway]
    gateway_sparks: "{{ query('ansible.builtin.inventory_hostnames', ds4_target_hosts | default('sparks')) }}"
"""

RETURN = r"""
checked:
  description: The variables checked, by name.
  returned: always
  type: list
  elements: str
refused:
  description: One message per refused variable or rule between variables.
  returned: failed
  type: list
  elements: str
"""
