"""Hold a Spark for this run: the controller's side of the lock (module ds4_run_lock on the host).

It names the run (this controller, the pid of ansible-playbook, the user, the playbook), asks the host for
the lock, and while another run holds it: takes the lock over when that run was of this controller and has
ended (its process is gone: a failed or killed run), else asks again every few seconds until `wait` runs
out, then fails naming the holder.
"""

from __future__ import annotations

import getpass
import os
import socket
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_run_lock import describe

MODULE = "ds4.fleet.ds4_run_lock"
POLL = 2.0


def this_run(playbook):
    """The holder record of this ansible-playbook run (a worker's parent is the run's main process)."""
    now = time.time()
    return {
        "controller": socket.gethostname(),
        "pid": os.getppid(),
        "user": getpass.getuser(),
        "playbook": playbook,
        "since": now,
        "since_text": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(now)),
    }


def ended(holder):
    """Whether HOLDER was a run of this controller whose process is gone."""
    if holder.get("controller") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        state = args.get("state", "held")
        wait = float(args.get("wait", 600))
        playbook = os.path.basename(str(task_vars.get("ansible_play_name") or "ds4-fleet"))
        args["holder"] = this_run(playbook)
        if state == "released":
            return self._execute_module(MODULE, module_args=args, task_vars=task_vars)
        deadline = time.monotonic() + wait
        while True:
            answer = self._execute_module(MODULE, module_args=args, task_vars=task_vars)
            if answer.get("failed") or answer.get("held"):
                result.update(answer)
                return result
            other = answer.get("holder") or {}
            if ended(other):
                args["stale"] = other
                continue
            if time.monotonic() >= deadline:
                path = args.get("path", "/run/ds4-fleet.lock")
                raise AnsibleActionFail(
                    f"another ds4-fleet run holds this Spark: {describe(other)}; waited {wait:g} s "
                    f"(ds4_run_lock_wait). Run again when it has ended; if no run holds it any more, remove "
                    f"{path} on the Spark."
                )
            time.sleep(POLL)
