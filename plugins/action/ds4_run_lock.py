"""Hold a Spark for this run: the controller's side of the lock (module ds4_run_lock on the host).

It names the run (this controller, the pid of ansible-playbook, the user, the playbook), asks the host for
the lock, and while another run holds it: takes the lock over when that run was of this controller and has
ended (its process is gone: a failed or killed run), else asks again every few seconds until the other
run releases it or its lease runs out (the module then takes it over, and this action names the old
holder), or until `wait` runs out, then fails naming the holder.

The lease is renewed from the controller, by a renewer this action leaves behind when it takes the lock.
Why there: Ansible has no hook that runs while a long task does (the engine build, a weight fetch of
hours), and a task boundary comes too seldom to bound the lease; a renewer on the Spark could not tell a
live controller from a dead one. The renewer is a process of its own on the controller, detached from the
task's worker, that asks the Spark every lease/4 seconds (through this task's connection, so with the
same user, become and transport) and stops as soon as the run's ansible-playbook process is gone or the
Spark says the lock is no longer this run's (released). So the lease lives exactly as long as the run's
process and its controller: SIGKILL, an AWX job's container removed, a controller that crashed, and the
renewals stop with it; the lease then runs out at most `lease` seconds after the last one. A renewal that
fails (a connection that drops for a moment) is tried again at the next period, three more before the
lease could run out.
"""

from __future__ import annotations

import getpass
import os
import secrets
import socket
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.ds4.fleet.plugins.module_utils._run.lock import PATH, describe

MODULE = "ds4.fleet.ds4_run_lock"
POLL = 2.0
# Renewals per lease: three may fail in a row and the run still holds the Spark.
RENEWALS = 4
# The fact that carries this run's token from one lock task to the next, and across plays.
TOKEN_FACT = "_ds4_run_lock_token"

display = Display()


def this_run(playbook, token=None):
    """The holder record of this ansible-playbook run (a worker's parent is the run's main process), with
    the run's TOKEN, or a new random one for its first lock task."""
    now = time.time()
    return {
        "controller": socket.gethostname(),
        "pid": os.getppid(),
        "user": getpass.getuser(),
        "playbook": playbook,
        "since": now,
        "since_text": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(now)),
        "token": token or secrets.token_hex(16),
    }


def run_token(task_vars):
    """This run's token, kept as a fact of each host by its first lock task: that of this process only (a
    fact cache may hold an earlier run's)."""
    kept = task_vars.get(TOKEN_FACT) or (task_vars.get("ansible_facts") or {}).get(TOKEN_FACT)
    if isinstance(kept, dict) and kept.get("pid") == os.getppid() and isinstance(kept.get("token"), str):
        return kept["token"]
    return None


def alive(pid):
    """Whether process PID of this controller still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ended(holder):
    """Whether HOLDER was a run of this controller whose process is gone."""
    if holder.get("controller") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    return not alive(holder["pid"])


def renew_while(run_pid, renew, period, sleep=time.sleep):
    """Call RENEW every PERIOD seconds while process RUN_PID lives and RENEW says the lock is still held
    (True); None (a renewal that failed) is tried again at the next period. The run's process is looked
    at every second, so that the renewer outlives the run by a second at most."""
    waited = 0.0
    while True:
        sleep(1.0)
        waited += 1.0
        if not alive(run_pid):
            return
        if waited >= period:
            waited = 0.0
            if renew() is False:
                return


def taken_over_message(old):
    """What the run that took OLD's lock over says of it."""
    if ended(old):
        why = "that run of this controller ended without releasing it"
    else:
        why = (
            f"that run stopped renewing its lease of {old.get('lease', '?')} s (ds4_run_lock_lease), as one "
            f"does when it is killed or its controller is gone"
        )
    return f"took this Spark over from {describe(old)}: {why}"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        state = args.get("state", "held")
        wait = float(args.get("wait", 600))
        lease = int(args.get("lease", 300))
        playbook = os.path.basename(str(task_vars.get("ansible_play_name") or "ds4-fleet"))
        args["holder"] = this_run(playbook, run_token(task_vars))
        if state != "held":
            return self._execute_module(MODULE, module_args=args, task_vars=task_vars)
        deadline = time.monotonic() + wait
        while True:
            answer = self._execute_module(MODULE, module_args=args, task_vars=task_vars)
            # A Spark with nothing to change (unless_unchanged) was held and let go in that one call.
            if answer.get("failed") or answer.get("held") or answer.get("unchanged"):
                result.update(answer)
                if answer.get("held"):
                    token = {"pid": args["holder"]["pid"], "token": args["holder"]["token"]}
                    result["ansible_facts"] = {TOKEN_FACT: token}
                old = answer.get("taken_over")
                if old:
                    result["msg"] = taken_over_message(old)
                    display.warning(f"{task_vars.get('inventory_hostname')}: {result['msg']}")
                if answer.get("held") and answer.get("new") and not self._task.check_mode:
                    self._leave_renewer(args, task_vars, lease / RENEWALS)
                return result
            other = answer.get("holder") or {}
            if ended(other):
                args["stale"] = other
                continue
            if time.monotonic() >= deadline:
                path = args.get("path", PATH)
                left = answer.get("lease_left")
                runs_out = (
                    f"; its lease runs out in {left:.0f} s unless that run renews it"
                    if isinstance(left, (int, float))
                    else ""
                )
                raise AnsibleActionFail(
                    f"another ds4-fleet run holds this Spark: {describe(other)}{runs_out}; waited {wait:g} s "
                    f"(ds4_run_lock_wait). Run again when it has ended; if no run holds it any more, remove "
                    f"{path} on the Spark."
                )
            time.sleep(POLL)

    def _leave_renewer(self, args, task_vars, period):
        """Fork the renewer, detached (its own session, reparented), and go on with the task at once."""
        child = os.fork()
        if child:
            os.waitpid(child, 0)
            return
        try:
            os.setsid()
            if os.fork():
                return
            # Nothing of the run's output or of the worker's pipes: ansible-playbook, and whatever reads
            # its output, must not wait for the renewer to end.
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            display.set_queue(None)  # type: ignore[arg-type]  # what it says goes to /dev/null, not the run
            renew_args = dict(args, state="renewed")
            renew_args.pop("stale", None)

            def renew():
                # A remote directory of its own for each renewal (where the connection needs one): the
                # task's was removed when the task ended.
                self._connection._shell.tmpdir = None
                try:
                    answer = self._execute_module(MODULE, module_args=renew_args, task_vars=task_vars)
                except Exception:  # noqa: BLE001 - a renewal that failed is tried again, never fatal
                    return None
                finally:
                    self.cleanup(force=True)
                if answer.get("failed") or answer.get("unreachable"):
                    return None
                return bool(answer.get("held"))

            renew_while(args["holder"]["pid"], renew, period)
        finally:
            os._exit(0)
