"""Filters over the collection's own files.

module_utils_path(name)
    The path on the controller of the collection's plugins/module_utils/<name>: how the role ds4_service
    ships the modules its host scripts import to a Spark (its vars/main.yml lists them) without reaching
    outside its own folder.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError

# plugins/filter/ -> plugins/module_utils/, wherever the collection is installed.
MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")


def module_utils_path(name):
    if not isinstance(name, str) or os.path.basename(name) != name or not name.endswith(".py"):
        raise AnsibleFilterError(f"module_utils_path takes the file name of a module_utils module: {name!r}")
    path = os.path.join(MODULE_UTILS, name)
    if not os.path.isfile(path):
        raise AnsibleFilterError(f"module_utils_path: the collection has no {name} in {MODULE_UTILS}")
    return path


class FilterModule:
    def filters(self):
        return {"module_utils_path": module_utils_path}
