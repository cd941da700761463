"""The options of the async jobs that end once the run that started them is gone (_weights.heartbeat)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  heartbeat:
    description:
      - A file of root's that the run touches while it waits for this job (M(ds4.fleet.ds4_hub_wait)
        O(ds4.fleet.ds4_hub_wait#module:heartbeat)). Once it is older than O(heartbeat_timeout) seconds
        (missing or older than the job, it counts from the job's start), the run that started the job is
        taken as gone (a controller killed mid-run) and the job ends, keeping what it made for the next
        run. Omitted, the job runs until it ends or its C(async) limit.
    type: path
  heartbeat_timeout:
    description: Seconds without a touch of O(heartbeat) after which the job ends.
    type: int
    default: 300
"""
