#!/usr/bin/python
"""Hold, renew or release a Spark for one ds4-fleet run (module_utils/_run/lock.py). The action of the
same name (plugins/action/ds4_run_lock.py) names the holder, waits, keeps the lease renewed and takes over
a dead run's lock."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_run_lock
short_description: Hold a Spark for one ds4-fleet run at a time
description:
  - Writes the lock file O(path) naming the run that holds the Spark (controller, its pid, user,
    playbook, since when) and its lease (O(lease) seconds from its last renewal, on the Spark's boot
    clock), whole and never through a link; renews it; or removes it, when O(holder) holds it.
  - A lock whose lease has run out (its run stopped renewing it, killed or its controller gone) is taken
    over, and the result names its holder in RV(taken_over).
  - The action of the same name, which runs on the controller, fills in O(holder), waits up to O(wait)
    seconds for another run to end or its lease to run out, takes over at once the lock of a run of this
    controller that has ended without releasing it, and otherwise refuses, naming the holder. While its
    run lasts, it renews the lease every O(lease)/4 seconds from the controller.
  - In check mode nothing is written; a lock held by another run is reported all the same.
version_added: 0.1.0
options:
  state:
    description: C(held) to take the lock, C(renewed) to renew the lease of the run that holds it,
      C(released) to give it back, C(checked) to fail, naming the holder, when another run holds it now
      (asked before each step that destroys; no lock at all passes, for a role run alone).
    type: str
    choices: [held, renewed, released, checked]
    default: held
  path:
    description: The lock file, in a directory of root's alone (0700) that a reboot empties.
    type: path
    default: /run/ds4-fleet/run.lock
  holder:
    description: The run, as the action fills it in (controller, pid, user, playbook, since, since_text).
    type: dict
  wait:
    description: Seconds to wait for another run to end before refusing.
    type: int
    default: 600
  lease:
    description: Seconds after its last renewal that the lock runs out, should its run stop renewing it.
    type: int
    default: 300
  stale:
    description: A holder record the controller found ended; its lock is taken over if still recorded.
    type: dict
  unless_unchanged:
    description:
      - With O(state=held), the options of the module ds4.fleet.ds4_applied (as with its O(state=checked)).
        Once the lock is taken, the Spark is compared with the last finished run's record in the same call,
        and a Spark that is as that run left it, with the same inputs and its engine answering, is let go
        at once (RV(unchanged)); otherwise the run holds it and RV(reason) says why the whole run follows.
      - One module run in place of three (take, compare, give back) on a Spark with nothing to change.
    type: dict
    suboptions:
      path:
        description: The record file.
        type: path
        default: /var/lib/ds4-fleet/applied.json
      fingerprint:
        description: The run's inputs, secrets left out.
        type: str
        required: true
      secrets:
        description: The secret settings (name -> value), compared only as one keyed digest under
          O(unless_unchanged.digest_key).
        type: dict
        default: {}
      digest_key:
        description: The Spark's key of the digests of secret settings (made when missing, not in check mode).
        type: path
        default: /var/lib/ds4-fleet/digest.key
      paths:
        description: Files, links and directories (globs allowed) compared; a directory's alone.
        type: list
        elements: path
        default: []
      trees:
        description: Directories compared with everything below them.
        type: list
        elements: path
        default: []
      units:
        description: Units whose unit-file state and active state are compared.
        type: list
        elements: str
        default: []
      user:
        description: The service user, whose ids, home and shell are compared.
        type: str
        default: ds4
      host:
        description: The engine's listen address (C(ds4_host)), asked for its stats; a wildcard is asked on
          loopback.
        type: str
        default: 127.0.0.1
      port:
        description: The engine's port (C(ds4_port)).
        type: int
        default: 8000
      engine_answers:
        description: Whether the engine answers HTTP on O(unless_unchanged.host) and
          O(unless_unchanged.port) here and is asked for its stats; a pair's worker serves no HTTP (its
          units' active states, compared, say whether it runs).
        type: bool
        default: true
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Hold this Spark for this run
  ds4.fleet.ds4_run_lock:
    wait: 600

- name: Let other runs have this Spark
  ds4.fleet.ds4_run_lock:
    state: released
"""

RETURN = r"""
held:
  description: Whether this run holds the lock (after O(state=held)).
  returned: always
  type: bool
holder:
  description: The run recorded in the lock file (this one, or the other one that holds it), without its
    token.
  returned: when the lock is held
  type: dict
new:
  description: Whether this run took the lock now (it held it not before this call).
  returned: after O(state=held)
  type: bool
taken_over:
  description: The run whose lock this one took over (its lease had run out, or it had ended), or null.
  returned: after O(state=held)
  type: dict
unchanged:
  description: Whether the Spark is as the last finished run left it (O(unless_unchanged)), and so was let
    go again.
  returned: after O(state=held) with O(unless_unchanged)
  type: bool
reason:
  description: Why the whole run follows (O(unless_unchanged)), in words; null when unchanged.
  returned: after O(state=held) with O(unless_unchanged)
  type: str
lease_left:
  description: Seconds until the lease of the run that holds the lock runs out (null for a lock without one).
  returned: when another run holds the lock
  type: float
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._run.lock import (  # noqa: E402
    PATH,
    LockError,
    checked,
    clock,
    lease_left,
    read,
    release,
    renew,
    same,
    try_hold,
)
from ansible_collections.ds4.fleet.plugins.module_utils._run.record import (  # noqa: E402
    OPTIONS,
    AppliedError,
    compare,
)


def _shown(record):
    """A holder record as the output shows it: without its token, known to the lock file and its run alone."""
    return None if record is None else {key: value for key, value in record.items() if key != "token"}


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {
                "type": "str",
                "choices": ["held", "renewed", "released", "checked"],
                "default": "held",
            },
            "path": {"type": "path", "default": PATH},
            "holder": {"type": "dict"},
            "wait": {"type": "int", "default": 600},
            "lease": {"type": "int", "default": 300},
            "stale": {"type": "dict"},
            "unless_unchanged": {"type": "dict", "options": OPTIONS},
        },
        supports_check_mode=True,
    )
    p = module.params
    holder = dict(p["holder"] or {}, lease=p["lease"])
    compared = p["unless_unchanged"] if p["state"] == "held" else None
    try:
        now = clock()
        if p["state"] == "checked":
            mine = checked(p["path"], holder)
            module.exit_json(changed=False, held=mine is not None, holder=_shown(mine))
        if module.check_mode:
            current = read(p["path"])
            mine = current is None or same(current, holder) or lease_left(current, now) == 0
            module.exit_json(
                changed=False,
                held=mine,
                holder=_shown(current or holder),
                taken_over=None,
                **(_compared(module, compared) if mine and compared else {}),
            )
        if p["state"] == "released":
            released = release(p["path"], holder)
            module.exit_json(changed=False, held=False, released=released)
        if p["state"] == "renewed":
            module.exit_json(changed=False, held=renew(p["path"], holder, now))
        held, current, before = try_hold(p["path"], holder, p["stale"], now)
        took = held and (before is None or not same(before, holder))
        outcome = {}
        if held and compared:
            outcome = _compared(module, compared, on_failure=lambda: release(p["path"], holder))
            if outcome["unchanged"]:
                # Let go at once: this run changes nothing here.
                release(p["path"], holder)
    except LockError as exc:
        module.fail_json(msg=str(exc), held=False)
    # Not a change of the Spark: the run removes the file again at its end, and a second run must be
    # able to say changed=0.
    module.exit_json(
        changed=False,
        held=held and not outcome.get("unchanged"),
        new=took and not outcome.get("unchanged"),
        holder=_shown(current),
        taken_over=_shown(before) if took else None,
        lease_left=None if held else lease_left(current, now),
        **outcome,
    )


def _compared(module, options, on_failure=None):
    """{unchanged, reason}: the Spark against the last finished run's record (module_utils/ds4_applied)."""
    try:
        reason = compare(options, module.run_command, module.check_mode)
    except AppliedError as exc:
        if on_failure:
            on_failure()
        module.fail_json(msg=str(exc), held=False)
    return {"unchanged": reason is None, "reason": reason}


if __name__ == "__main__":
    main()
