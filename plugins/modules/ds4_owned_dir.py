#!/usr/bin/python
"""A directory handed to a user, made and chowned through descriptors: a thin shell over
module_utils/_spark/no_follow.py (owned_dir)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_owned_dir
short_description: Make a directory for a user without following a link, and hand it over
description:
  - Makes O(path) a directory owned by O(owner) and O(group) with O(mode), for a directory the roles hand
    to a user other than root (the engine's KV banks, the weights directory of C(ds4_weights_owner)).
  - Walks from C(/) one component at a time (C(openat) with C(O_NOFOLLOW)) and refuses a symbolic link at
    any component, and any existing directory on the way that is owned by neither root nor O(owner), or
    that its group or others may write, since such a user could swap what lies below for a link to
    C(/etc).
  - Missing directories on the way are made by root, mode C(0755); the directory itself is chowned and
    chmodded through the descriptor that opened it (C(fchown), C(fchmod)), never by path.
  - Where a path may be at all (never a directory the system or the roles keep for root) is the settings
    check's to say, before anything changes (C(ds4.fleet.ds4_settings_check)).
version_added: 0.1.0
extends_documentation_fragment: [ds4.fleet.module]
attributes:
  check_mode:
    support: full
    details: Walks and checks the same, and says what it would make or change.
  diff_mode:
    support: full
options:
  path:
    description: The directory, a normalised absolute path.
    type: str
    required: true
  owner:
    description: The user it is handed to, by name.
    type: str
    required: true
  group:
    description: Its group, by name.
    type: str
    required: true
  mode:
    description: Its mode, octal in quotes.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Create the directory of the KV banks, the one place the engine writes
  ds4.fleet.ds4_owned_dir:
    path: /var/lib/ds4/kv
    owner: ds4
    group: ds4
    mode: "0750"
"""

RETURN = r"""
path:
  description: The directory.
  returned: always
  type: str
created:
  description: The directories made (in check mode, those that would be), from the top.
  returned: always
  type: list
  elements: str
uid:
  description: Its owner's uid afterwards (the one it would have, in check mode).
  returned: success
  type: int
gid:
  description: Its group's gid afterwards.
  returned: success
  type: int
mode:
  description: Its mode afterwards, four octal digits.
  returned: success
  type: str
"""

import grp  # noqa: E402
import pwd  # noqa: E402
import re  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import (  # noqa: E402
    UnsafePath,
    owned_dir,
)


def _id(module, lookup, name, what):
    try:
        return lookup(name)
    except KeyError:
        # In check mode the user task before this one only said it would create the user.
        if module.check_mode:
            module.exit_json(
                changed=True, path=module.params["path"], created=[], msg=f"{what} {name} does not exist yet"
            )
        module.fail_json(msg=f"{what} {name} does not exist on this host")


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "str", "required": True},
            "owner": {"type": "str", "required": True},
            "group": {"type": "str", "required": True},
            "mode": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not re.fullmatch(r"0?[0-7]{3,4}", p["mode"]):
        module.fail_json(msg=f'mode must be an octal mode in quotes, such as "0750"; got {p["mode"]!r}')
    uid = _id(module, lambda name: pwd.getpwnam(name).pw_uid, p["owner"], "user")
    gid = _id(module, lambda name: grp.getgrnam(name).gr_gid, p["group"], "group")
    try:
        result = owned_dir(p["path"], uid, gid, int(p["mode"], 8), check_mode=module.check_mode)
    except (UnsafePath, OSError) as e:
        module.fail_json(msg=f"refusing to hand {p['path']} to {p['owner']}: {e}")
    after = result["after"]
    out = {"changed": result["changed"], "path": p["path"], "created": result["created"], **after}
    if module._diff:
        before = dict(
            result["before"] or {}, path=p["path"], state="directory" if result["before"] else "absent"
        )
        out["diff"] = {"before": before, "after": dict(after, path=p["path"], state="directory")}
    module.exit_json(**out)


if __name__ == "__main__":
    main()
