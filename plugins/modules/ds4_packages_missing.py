#!/usr/bin/python
"""Which of some Debian packages a host lacks (module_utils/ds4_packages.py), asked of dpkg-query."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_packages_missing
short_description: Find which of some Debian packages a host lacks, quickly
description:
  - Asks dpkg-query which of O(names) are installed and returns the others, in order, so that the role's
    own apt task runs only when one is missing. The package manager takes seconds to say that a package
    is already there; dpkg-query takes a fraction of one.
  - Changes nothing, in check mode too.
version_added: 0.1.0
extends_documentation_fragment: [ds4.fleet.module]
options:
  names:
    description: The packages, by their Debian names.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Find which engine build prerequisites are missing
  ds4.fleet.ds4_packages_missing:
    names: [build-essential, git, ca-certificates]
  register: __ds4_engine_packages

- name: Install the missing engine build prerequisites
  ansible.builtin.apt:
    name: "{{ __ds4_engine_packages.missing }}"
    update_cache: true
  when: __ds4_engine_packages.missing | length > 0
"""

RETURN = r"""
missing:
  description: The packages of O(names) that are not installed, in the order given.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_packages import (  # noqa: E402
    PackagesError,
    dpkg_query_argv,
    missing,
)


def main():
    module = AnsibleModule(
        argument_spec={"names": {"type": "list", "elements": "str", "required": True}},
        supports_check_mode=True,
    )
    names = module.params["names"]
    rc, out, err = module.run_command(dpkg_query_argv(names), environ_update={"LC_ALL": "C"})
    try:
        module.exit_json(changed=False, missing=missing(names, rc, out, err))
    except PackagesError as exc:
        module.fail_json(msg=str(exc))


if __name__ == "__main__":
    main()
