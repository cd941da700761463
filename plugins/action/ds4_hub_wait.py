"""Wait for ds4_hub_file jobs started with `async` and `poll: 0`, printing their progress as they run.

Ansible shows nothing of a module until it returns, and an `until` loop over async_status only prints
"FAILED - RETRYING". This action runs on the controller: it polls each job with async_status and, every
`interval` seconds, reads the job's progress file (_weights.progress.write_progress) and prints one line
per file that is still running, through Ansible's display, so an operator sees numbers while 87 GiB come
down:

    spark01: DeepSeek-V4-Flash-…-0731.gguf: fetching 41.2 GiB of 80.8 GiB (51%), 940.1 MiB/s, 43 s left
      over 16 connections

Any other job whose module keeps such a file may be waited for the same way: a record with a `message`
(the engine build's, ds4_release_build) is printed as it stands.

While it waits it touches `heartbeat` on the host, if given: the jobs watch it (_weights.heartbeat) and end,
keeping what they made, once the run that waited for them is gone.
"""

from __future__ import annotations

import base64
import json
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.ds4.fleet.plugins.module_utils._common.bytes import human_bytes

display = Display()

# Status checks start quick (a verified file is done in a second) and back off to this many seconds.
MAX_POLL = 5.0
# The heartbeat file is touched at most this often: the jobs end once it is left far longer
# (_weights.heartbeat).
HEARTBEAT_EVERY = 10.0


def human_seconds(s):
    s = round(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def describe(progress):
    """One line for a progress record (see docs/weights.md, "Progress file")."""
    if progress.get("message"):
        return progress["message"]
    done, total = progress.get("bytes_done") or 0, progress.get("total") or 0
    line = f"{progress.get('state', 'working')} {human_bytes(done)} of {human_bytes(total)}"
    if total:
        line += f" ({100 * done // total}%)"
    if progress.get("rate_bps"):
        line += f", {human_bytes(progress['rate_bps'])}/s"
    if progress.get("eta_s") is not None:
        line += f", {human_seconds(progress['eta_s'])} left"
    if (progress.get("connections") or 1) > 1:
        line += f" over {progress['connections']} connections"
    if progress.get("resumed_from"):
        line += f", resumed with {progress['resumed_from']:,} bytes on disk"
    if (progress.get("attempt") or 1) > 1:
        line += f", attempt {progress['attempt']}"
    if progress.get("error"):
        line += f" ({progress['error']})"
    return line


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _result, args = self.validate_argument_spec(
            argument_spec={
                "jobs": {"type": "list", "elements": "dict", "required": True},
                "progress_files": {"type": "list", "elements": "str", "required": True},
                "interval": {"type": "float", "default": 20.0},
                "labels": {"type": "list", "elements": "str"},
                "heartbeat": {"type": "path"},
            }
        )
        _check(args)
        self._task_vars = task_vars
        self._host = (task_vars or {}).get("inventory_hostname", "")
        self._async_dir = self.get_shell_option("async_dir", default="~/.ansible_async")
        self._heartbeat, self._beaten = args["heartbeat"], None
        finished = self._wait(_pending(args), args["interval"])
        result.update(_outcome(finished))
        return result

    def _wait(self, pending, interval):
        """Poll the jobs until all finished, printing each running one's progress every `interval` s."""
        finished = []
        poll = 0.5
        next_print = time.monotonic() + interval
        while pending:
            self._beat()
            for job in list(pending):
                status = self._job(job["jid"], "status")
                if status.get("finished"):
                    self._job(job["jid"], "cleanup")
                    pending.remove(job)
                    finished.append((job, status))
            if not pending:
                break
            now = time.monotonic()
            if now >= next_print:
                for job in pending:
                    display.display(f"{self._host}: {job['label']}: {self._progress_line(job)}")
                next_print = now + interval
            time.sleep(min(poll, max(0.1, next_print - time.monotonic())))
            poll = min(MAX_POLL, poll * 2)
        return finished

    def _beat(self):
        """Touch the heartbeat file (never through a link), at most every HEARTBEAT_EVERY seconds."""
        now = time.monotonic()
        if self._heartbeat is None or (self._beaten is not None and now - self._beaten < HEARTBEAT_EVERY):
            return
        self._module("file", path=self._heartbeat, state="touch", mode="0600", follow=False)
        self._beaten = now

    def _module(self, name, **module_args):
        return self._execute_module(
            module_name=f"ansible.legacy.{name}", module_args=module_args, task_vars=self._task_vars
        )

    def _job(self, jid, mode):
        return self._module("async_status", jid=jid, mode=mode, _async_dir=self._async_dir)

    def _progress_line(self, job):
        """The job's progress file, unless it is a previous run's (older than this job's start)."""
        if job["started_at"] is None and job["results_file"]:
            stat = self._module("stat", path=job["results_file"], get_checksum=False).get("stat", {})
            job["started_at"] = stat.get("mtime", 0)
        slurped = self._module("slurp", src=job["progress_file"])
        try:
            progress = json.loads(base64.b64decode(slurped["content"]))
        except (KeyError, ValueError):
            return "starting"
        if job["started_at"] and (progress.get("updated") or 0) < job["started_at"] - 1:
            return "asking the hub"
        return describe(progress)


def _check(args):
    if len(args["jobs"]) != len(args["progress_files"]):
        raise AnsibleActionFail(
            f"jobs ({len(args['jobs'])}) and progress_files ({len(args['progress_files'])}) must pair up"
        )
    if args["labels"] is not None and len(args["labels"]) != len(args["jobs"]):
        raise AnsibleActionFail(f"jobs ({len(args['jobs'])}) and labels ({len(args['labels'])}) must pair up")
    if args["interval"] <= 0:
        raise AnsibleActionFail(f"interval must be a positive number of seconds, got {args['interval']}")


def _pending(args):
    """The jobs to wait for, each with its label and files; skipped ones are left out."""
    pending = []
    labels = args["labels"] or [None] * len(args["jobs"])
    for job, progress_file, given in zip(args["jobs"], args["progress_files"], labels, strict=True):
        if job.get("skipped"):
            continue
        if "ansible_job_id" not in job:
            raise AnsibleActionFail(f"not an async job started with poll 0: {sorted(job)}")
        item = job.get("item")
        label = given or (item.get("name") if isinstance(item, dict) and item.get("name") else progress_file)
        pending.append(
            {"jid": job["ansible_job_id"], "label": label, "item": item, "progress_file": progress_file,
             "results_file": job.get("results_file"), "started_at": None}
        )  # fmt: skip
    return pending


def _outcome(finished):
    """The action's result from the finished jobs: their results, warnings and failures."""
    results, failures, warnings = [], [], []
    for job, status in finished:
        outcome = {k: v for k, v in status.items() if not k.startswith("_ansible") and k != "invocation"}
        outcome["item"] = job["item"]
        results.append(outcome)
        warnings.extend(status.get("warnings") or [])
        if status.get("failed"):
            failures.append(f"{job['label']}: {status.get('msg', 'failed')}")
    result = {"changed": any(r.get("changed") for r in results), "results": results}
    if warnings:
        result["warnings"] = warnings
    if failures:
        result.update(failed=True, msg="; ".join(failures))
    else:
        result["msg"] = f"{len(results)} file(s) verified"
    return result
