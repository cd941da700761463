"""Filters of a site's own templates; the logic lives in module_utils/_fleet/site_template.py.

- `name | ds4.fleet.site_template(variable, role_path, playbook_dir, site_dir)` -> the path of the
  template a variable names: in the site's templates/ first, then the role's own.
- `text | ds4.fleet.env_file_problems` -> what systemd would not read in an environment file, one line
  each, naming no value.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.site_template import (
    SiteTemplateError,
    env_file_problems,
    resolve,
    site_dirs,
)


def site_template(name, variable, role_path, playbook_dir, site_dir=""):
    try:
        return resolve(
            variable, name, site_dirs(playbook_dir, site_dir), os.path.join(role_path, "templates")
        )
    except SiteTemplateError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {
            "site_template": site_template,
            "env_file_problems": lambda text: env_file_problems(str(text)),
        }
