#!/usr/bin/python
"""Clear the engine's on-disk KV cache at a swap of model family (module_utils/_service/kv_cache.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_kv_cache
short_description: Clear the engine's on-disk KV cache when the model family changes
description:
  - The engine keeps its KV banks on disk (C(--kv-disk-dir)) across a model swap; banks of one family served
    to another are wrong. The family the cache is of is recorded in O(record) (root's, mode 0600, in root's
    0700 directory; never written through a link).
  - With O(state=read), says whether starting O(family) is a swap, changing nothing.
  - With O(state=switched), with the engine stopped, removes the entries of O(kv_dir) when the cache is of
    another family (a link is removed, never followed; the directory stays) and records O(family).
  - With O(state=restored), after a rollback put back the family before the last switch (engine stopped),
    removes what the failed family wrote and records the family restored.
  - A cache recorded by no run is of C(deepseek-v4-flash), the one family before families.
version_added: 0.2.0
options:
  state:
    description: C(read), C(switched) or C(restored).
    type: str
    choices: [read, switched, restored]
    default: read
  kv_dir:
    description: The engine's KV cache directory (C(ds4_kv_disk_dir)).
    type: path
    required: true
  record:
    description: The record of the family the cache is of.
    type: path
    default: /var/lib/ds4-fleet/kv-family.json
  family:
    description: The model family the engine starts (C(ds4_model_family)); not with O(state=restored).
    type: str
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Clear the KV cache of the model family served before
  ds4.fleet.ds4_kv_cache:
    state: switched
    kv_dir: "{{ ds4_kv_disk_dir }}"
    family: "{{ ds4_model_family }}"
"""

RETURN = r"""
swap:
  description: Whether the cache is (or, with O(state=restored), was last switched to) of another family.
  returned: success
  type: bool
from:
  description: The family the cache was of; null with O(state=restored) where no record is.
  returned: success
  type: str
removed:
  description: The paths removed (in check mode, that would be); a directory named alone when all of it went.
  returned: success
  type: list
  elements: str
"""

# Ansible's convention puts DOCUMENTATION, EXAMPLES and RETURN before the imports.
from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._service.kv_cache import (  # noqa: E402
    KvCacheError,
    restored,
    switched,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["read", "switched", "restored"], "default": "read"},
            "kv_dir": {"type": "path", "required": True},
            "record": {"type": "path", "default": "/var/lib/ds4-fleet/kv-family.json"},
            "family": {"type": "str"},
        },
        required_if=[("state", "read", ["family"]), ("state", "switched", ["family"])],
        supports_check_mode=True,
    )
    params = module.params
    try:
        if params["state"] == "restored":
            result = restored(params["kv_dir"], params["record"], module.check_mode)
        else:
            check_mode = module.check_mode or params["state"] == "read"
            result = switched(params["kv_dir"], params["record"], params["family"], check_mode)
            if params["state"] == "read":
                result["changed"] = False
    except (KvCacheError, OSError) as exc:
        module.fail_json(msg=f"the engine's KV cache {params['kv_dir']}: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
