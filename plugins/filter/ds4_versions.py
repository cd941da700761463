"""Filters on ds4 release tags; the ordering itself lives in module_utils/_spark/version.py.

- `tags | ds4.fleet.release_sort` -> the tags oldest first (`| last` is the newest).
- `candidate | ds4.fleet.release_newer(running)` -> true when `candidate` is strictly newer.
- `present | ds4.fleet.releases_to_prune(keep, protect)` -> the releases that may be removed, oldest
  first: all but the newest `keep`, never one in `protect` (the running and the rollback release).

v0.5.6.1 is newer than v0.5.6, and v0.10.0 newer than v0.9.9. Errors name the bad value; Ansible
adds the filter's name.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ds4.fleet.plugins.module_utils._spark.version import (
    is_newer,
    releases_to_prune,
    sort_releases,
)


def release_sort(tags):
    try:
        return sort_releases(tags)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def release_newer(candidate, running):
    try:
        return is_newer(candidate, running)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def release_prune(present, keep, protect=()):
    try:
        return releases_to_prune(present, keep, protect)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {
            "release_sort": release_sort,
            "release_newer": release_newer,
            "releases_to_prune": release_prune,
        }
