#!/usr/bin/python
"""Which of some Debian packages a host lacks (module_utils/_host/packages.py), asked of dpkg-query."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_packages_missing
short_description: Find which of some Debian packages a host lacks, quickly
description:
  - Asks dpkg-query which of O(names) are installed and returns the others, in order, so that the role's
    own apt task runs only when one is missing. The package manager takes seconds to say that a package
    is already there; dpkg-query takes a fraction of one.
  - Changes nothing but the record O(record) names, and nothing in check mode.
version_added: 0.1.0
extends_documentation_fragment: [ds4.fleet.module]
options:
  names:
    description: The packages, by their Debian names.
    type: list
    elements: str
    required: true
  record:
    description:
      - A file where the missing ones are recorded, as the packages the roles install (the role's apt task
        installs them next), so that playbooks/remove.yml knows which it may purge; and, the first time,
        every package installed then, before the roles installed any, so that it knows what apt brought in
        beside them. Not in check mode.
    type: path
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
recorded:
  description: Whether O(record) gained a package, or the packages installed before.
  returned: always
  type: bool
missing:
  description: The packages of O(names) that are not installed, in the order given.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.remove import RemoveError, record_missing  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._host.packages import (  # noqa: E402
    PackagesError,
    dpkg_query_argv,
    every_installed,
    missing,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "names": {"type": "list", "elements": "str", "required": True},
            "record": {"type": "path"},
        },
        supports_check_mode=True,
    )
    names = module.params["names"]
    rc, out, err = module.run_command(dpkg_query_argv(names), environ_update={"LC_ALL": "C"})

    def before():
        return every_installed(*module.run_command(dpkg_query_argv([]), environ_update={"LC_ALL": "C"}))

    try:
        lacking = missing(names, rc, out, err)
        recorded = record_missing(lacking, module.params["record"], module.check_mode, before=before)
    except (PackagesError, RemoveError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=recorded, recorded=recorded, missing=lacking)


if __name__ == "__main__":
    main()
