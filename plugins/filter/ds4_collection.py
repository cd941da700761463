"""Filters over the collection's own files.

module_utils_path(name)
    The path on the controller of plugins/module_utils/_spark/<name>, one of the modules copied onto each
    Spark: how the roles ds4_service and ds4_gateway ship those their host scripts import (their
    vars/main.yml list them) without reaching outside their own folders.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError

# plugins/filter/ -> plugins/module_utils/_spark/, wherever the collection is installed: the one package
# whose modules run on a Spark outside Ansible (standard library only), so the only one a host is given.
SPARK_PACKAGE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils", "_spark"
)


def module_utils_path(name):
    if not isinstance(name, str) or os.path.basename(name) != name or not name.endswith(".py"):
        raise AnsibleFilterError(f"module_utils_path takes the file name of a module_utils module: {name!r}")
    path = os.path.join(SPARK_PACKAGE, name)
    if name == "__init__.py" or not os.path.isfile(path):
        raise AnsibleFilterError(f"module_utils_path: the collection has no {name} in {SPARK_PACKAGE}")
    return path


class FilterModule:
    def filters(self):
        return {"module_utils_path": module_utils_path}
