"""Read the files of a ds4_files task on the controller and hand their contents to the module.

A source is found as ansible.builtin.copy finds its src (a role's files/ first, else the path as given),
and must be text: these are programs and Python modules the service role installs on a Spark.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.plugins.action import ActionBase

MODULE = "ds4.fleet.ds4_files"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        sources = args.pop("src", None)
        if sources is None:
            return self._execute_module(MODULE, module_args=args, task_vars=task_vars)
        if not isinstance(sources, dict) or not sources:
            raise AnsibleActionFail(f"src must map each file to install to its mode; got {sources!r}")
        content = {}
        for source, mode in sources.items():
            name = os.path.basename(source)
            if name in content:
                raise AnsibleActionFail(f"src names two files {name}: each is installed under its own name")
            try:
                path = self._find_needle("files", source)
                with open(path, encoding="utf-8") as handle:
                    content[name] = {"content": handle.read(), "mode": str(mode)}
            except (AnsibleError, OSError, UnicodeDecodeError) as e:
                raise AnsibleActionFail(f"cannot read {source} to install it: {e}") from e
        args["content"] = content
        result.update(self._execute_module(MODULE, module_args=args, task_vars=task_vars))
        return result
