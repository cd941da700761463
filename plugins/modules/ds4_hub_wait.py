#!/usr/bin/python
"""Documentation of the ds4_hub_wait action (plugins/action/ds4_hub_wait.py), which runs on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_hub_wait
short_description: Wait for ds4_hub_file jobs started with async, printing their progress
description:
  - Polls each job of O(jobs) (the registered result of a C(ds4.fleet.ds4_hub_file) task run with C(async)
    and C(poll) 0, looped or not) with C(async_status) until all have finished, then cleans their job files.
  - Every O(interval) seconds, prints one line per file still running, read from its progress file (state,
    bytes done of the total, percentage, rate, time left, where it resumed and the attempt), so that an
    operator sees numbers during a download of many GiB rather than a silent task.
  - Jobs of other modules that keep a progress file with a C(message) (M(ds4.fleet.ds4_release_build)) are
    waited for the same way; the message is printed as it stands.
  - Fails when any job failed, with each failed file's message; the other jobs are still waited for.
  - Runs on the controller as an action; this file only documents it.
version_added: 0.1.0
attributes:
  check_mode:
    support: none
    details: There is nothing to wait for in check mode, where the fetch does not start.
options:
  jobs:
    description: >-
      The async start results: a registered loop's C(results), or a list of one registered result. Skipped
      ones are ignored.
    type: list
    elements: dict
    required: true
  progress_files:
    description: >-
      Each job's progress file (O(ds4.fleet.ds4_hub_file#module:progress_file)), in the order of O(jobs).
    type: list
    elements: str
    required: true
  interval:
    description: Seconds between progress lines.
    type: float
    default: 20.0
  heartbeat:
    description: >-
      A file on the host touched while this waits (at most every 10 seconds), which the jobs watch
      (O(ds4.fleet.ds4_hub_file#module:heartbeat)): they end once the run that waited for them is gone.
    type: path
  labels:
    description: >-
      What each job's lines and failures are called, in the order of O(jobs); by default the loop item's
      C(name), else the progress file.
    type: list
    elements: str
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Start fetching the weight files
  ds4.fleet.ds4_hub_file:
    endpoint: "{{ ds4_hf_endpoint }}"
    repo: "{{ item.repo }}"
    file: "{{ item.name }}"
    dest: /var/lib/ds4/gguf
  loop: "{{ files }}"
  async: 86400
  poll: 0
  register: __ds4_weights_jobs

- name: Wait for the weight files, printing their progress
  ds4.fleet.ds4_hub_wait:
    jobs: "{{ __ds4_weights_jobs.results }}"
    progress_files: >-
      {{ files | map(attribute='name') | map('ds4.fleet.weight_file_path', '/var/lib/ds4/gguf', 'progress') }}
    interval: 20
"""

RETURN = r"""
results:
  description: >-
    Each job's final result (that of C(ds4_hub_file): action, path, size, sha256, commit, bytes_fetched, ...),
    with the loop C(item) it was started for.
  returned: always
  type: list
  elements: dict
msg:
  description: How many files were verified, or each failed file's message.
  returned: always
  type: str
"""
