#!/usr/bin/python
"""Files installed whole into a directory of root's, in one run: a thin shell over
module_utils/_host/files.py. The action of the same name (plugins/action/ds4_files.py) reads O(src) on the
controller and hands the module their contents."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_files
short_description: Install a set of files into a directory in one run, never through a link
description:
  - Installs each file of O(src) into O(dest) under its own name, owned by the user the module runs as
    (root) and its group, with the mode given for it.
  - A file whose content, mode and owner already match is left alone; any other is written beside its
    name and renamed over it, so a link put at the name is replaced, never written through.
  - O(dest) must be a directory of that user which no one else may write into; it is refused otherwise,
    as is anything but a regular file or a link at a file's name.
  - One module run for the whole set, where M(ansible.builtin.copy) takes two for each file (a stat, then
    a copy or a file). No file is removed.
version_added: 0.1.0
extends_documentation_fragment: [ds4.fleet.module]
attributes:
  check_mode:
    support: full
    details: Compares the same and says which files would be written.
  diff_mode:
    support: full
    details: One diff for each file written, with its mode in the headers.
options:
  dest:
    description: The directory, an absolute path; it must exist.
    type: path
    required: true
  src:
    description:
      - Each file to install, by its path on the controller (found as M(ansible.builtin.copy) finds O(src),
        a role's C(files/) first), mapped to its mode, octal in quotes.
      - Read by the action on the controller; the module receives them as O(content).
    type: dict
  content:
    description:
      - Each file by name, as C(content) (its text) and C(mode) (octal in quotes). The action fills it
        from O(src); give one or the other.
    type: dict
"""

EXAMPLES = r"""
- name: Install the readiness probe and the module it imports
  ds4.fleet.ds4_files:
    dest: /usr/local/lib/ds4-fleet
    src:
      ds4-ready: "0755"
      /path/to/plugins/module_utils/_spark/version.py: "0644"
"""

RETURN = r"""
written:
  description: The names of the files written (in check mode, those that would be), in order.
  returned: success
  type: list
  elements: str
"""

import re  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._host.files import install  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import UnsafePath  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "src": {"type": "dict"},
            "content": {"type": "dict"},
        },
        required_one_of=[("src", "content")],
        mutually_exclusive=[("src", "content")],
        supports_check_mode=True,
    )
    if module.params["src"] is not None:
        module.fail_json(msg="src is read on the controller by the action ds4.fleet.ds4_files; use it there")
    files = {}
    for name, item in module.params["content"].items():
        mode = str(item.get("mode", "")) if isinstance(item, dict) else ""
        if not re.fullmatch(r"0?[0-7]{3,4}", mode) or not isinstance(item.get("content"), str):
            module.fail_json(msg=f"{name}: each file of content needs its text as content and an octal mode")
        files[name] = (item["content"].encode("utf-8"), int(mode, 8))
    dest = module.params["dest"]
    try:
        done = install(dest, files, check_mode=module.check_mode)
    except (UnsafePath, OSError) as e:
        module.fail_json(msg=f"refusing to install files into {dest}: {e}")
    result = {"changed": bool(done["changed"]), "written": done["changed"]}
    if module._diff:
        result["diff"] = done["diff"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
