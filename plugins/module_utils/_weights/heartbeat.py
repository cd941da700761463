"""Whether the run that started a long job still lives: the run touches a file while it waits for the job.

Ansible's async jobs outlive the run that started them: a controller killed mid-run left its weight
fetches and peer server running for up to a day. Such a job watches a file of root's that its run touches
(ds4_hub_wait, every few seconds while it waits; the role, before it starts the jobs) and ends, keeping
what it made for the next run, once the file is older than its timeout. A missing file, or one older than
the job, counts from the job's start.
"""

from __future__ import annotations

import os
import time


class Heartbeat:
    def __init__(self, path, timeout, clock=time.time):
        self.path, self.timeout, self._clock = path, timeout, clock
        self._started = clock()

    def age(self):
        """Seconds since the run was last heard of (the file's own time: never a link's target's)."""
        try:
            touched = os.lstat(self.path).st_mtime
        except FileNotFoundError:
            touched = self._started
        return self._clock() - max(touched, self._started)

    def alive(self):
        return self.age() < self.timeout

    def why(self):
        return f"the run that started it is gone: {self.path} was not touched for {self.timeout} s"


# The modules' options (doc fragment ds4.fleet.heartbeat).
HEARTBEAT_ARGS = {
    "heartbeat": {"type": "path"},
    "heartbeat_timeout": {"type": "int", "default": 300},
}


def from_params(params):
    """The Heartbeat a module's options ask for, or None."""
    if not params.get("heartbeat"):
        return None
    return Heartbeat(params["heartbeat"], params["heartbeat_timeout"])
