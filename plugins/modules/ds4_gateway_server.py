#!/usr/bin/python
"""Read or change a Spark's state at the gateway, through HAProxy's runtime API (logic in ds4_haproxy.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_gateway_server
short_description: Read the Sparks' state at the gateway, take one out of service or put it back
description:
  - Talks to HAProxy's runtime API on the gateway (role ds4_gateway), whose backend holds one server per
    Spark, named as the Spark is in the inventory.
  - Without I(state) it reads the backend's servers and changes nothing.
  - C(state=maint) drains the server (no new request goes to it), waits until its sessions ended or
    I(timeout) passed, then puts it in maintenance. Sessions still open at the limit are not cut; the
    result says so (C(sessions_ended=false)).
  - C(state=ready) puts the server back into service and waits until its health check says it is up; the
    module fails when that does not happen within I(timeout).
  - The runtime state lives in the running HAProxy only; a restart of HAProxy forgets it and lets the health
    checks decide again.
  - In check mode it reads the server and reports the change it would make, without waiting.
version_added: 0.1.0
attributes:
  diff_mode:
    support: full
options:
  socket:
    description: HAProxy's runtime API socket, at level admin.
    type: path
    default: /run/haproxy/admin.sock
  backend:
    description: The backend that holds the Sparks.
    type: str
    default: ds4_sparks
  server:
    description: The Spark's server in the backend; required with I(state).
    type: str
  state:
    description: C(maint) takes the server out after draining it, C(ready) puts it back; omitted, only read.
    type: str
    choices: [maint, ready]
  timeout:
    description: Seconds to wait at most for the sessions to end (maint) or for the server to be up (ready).
    type: float
    default: 300
  interval:
    description: Seconds between two looks.
    type: float
    default: 0.5
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Take spark01 out of the gateway, letting its sessions end first
  ds4.fleet.ds4_gateway_server:
    server: spark01
    state: maint
    timeout: 300
  delegate_to: gw01

- name: Read every Spark's state at the gateway
  ds4.fleet.ds4_gateway_server:
  register: __ds4_gateway
"""

RETURN = r"""
servers:
  description:
    - The backend's servers as read at the end, each with name, address, status (HAProxy's, e.g. UP, DOWN,
      DRAIN, MAINT), admin (ready, drain or maint), up (whether it gets new requests), sessions, queued and
      check (the last health check's result).
  type: list
  elements: dict
  returned: always
server:
  description: The named server as read at the end.
  type: dict
  returned: when server is given
sessions_at_start:
  description: The server's sessions when the drain began.
  type: int
  returned: when state is maint
sessions_ended:
  description: Whether the sessions ended before the server went into maintenance.
  type: bool
  returned: when state is maint
up:
  description: Whether the server was up at the end.
  type: bool
  returned: when state is ready
waited_s:
  description: Seconds waited for the sessions to end or the server to come up.
  type: float
  returned: when state is given
message:
  description: One sentence saying what happened.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.fleet.plugins.module_utils._net.haproxy import (
    RuntimeApiError,
    put_back,
    server,
    servers,
    take_out,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "socket": {"type": "path", "default": "/run/haproxy/admin.sock"},
            "backend": {"type": "str", "default": "ds4_sparks"},
            "server": {"type": "str"},
            "state": {"type": "str", "choices": ["maint", "ready"]},
            "timeout": {"type": "float", "default": 300},
            "interval": {"type": "float", "default": 0.5},
        },
        required_by={"state": "server"},
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] < 0 or p["interval"] <= 0:
        module.fail_json(msg=f"timeout must be 0 or more, interval positive: {p['timeout']}, {p['interval']}")
    sock, backend, state = p["socket"], p["backend"], p["state"]
    try:
        if state is None or module.check_mode:
            module.exit_json(**_look(module))
        report, message = (_take_out if state == "maint" else _put_back)(module)
    except RuntimeApiError as exc:
        module.fail_json(msg=str(exc))
    result = {
        "changed": report["changed"],
        "server": report["after"],
        "servers": servers(sock, backend),
        "waited_s": report["waited_s"],
        "message": message,
    }
    if state == "maint":
        result.update(sessions_at_start=report["sessions_at_start"], sessions_ended=report["sessions_ended"])
    else:
        result["up"] = report["up"]
    if module._diff:
        result["diff"] = {
            "before": {"admin": report["before"]["admin"]},
            "after": {"admin": report["after"]["admin"]},
        }
    module.exit_json(**result)


def _look(module) -> dict:
    """Read the backend, and the server with what its wanted state would change (check mode)."""
    p = module.params
    sock, backend, name, state = p["socket"], p["backend"], p["server"], p["state"]
    result = {"changed": False}
    if name:
        result["server"] = server(sock, backend, name)
        wanted = {"maint": "maint", "ready": "ready"}.get(state)
        result["changed"] = wanted is not None and result["server"]["admin"] != wanted
    result["servers"] = servers(sock, backend)
    result["message"] = _summary(result["servers"])
    if state and module._diff:
        result["diff"] = {"before": {"admin": result["server"]["admin"]}, "after": {"admin": state}}
    return result


def _take_out(module) -> tuple[dict, str]:
    p = module.params
    name, backend = p["server"], p["backend"]
    report = take_out(p["socket"], backend, name, p["timeout"], p["interval"])
    message = f"{name} is out of {backend}: " + (
        f"{report['sessions_at_start']} session(s) ended within {report['waited_s']:g} s"
        if report["sessions_ended"]
        else f"{report['after']['sessions']} session(s) still open after "
        f"{report['waited_s']:g} s, left to end on the Spark"
    )
    return report, message


def _put_back(module) -> tuple[dict, str]:
    p = module.params
    name, backend = p["server"], p["backend"]
    report = put_back(p["socket"], backend, name, p["timeout"], p["interval"])
    if not report["up"]:
        module.fail_json(
            msg=f"{name} was put back into {backend} but its health check did not say it is up "
            f"within {p['timeout']:g} s: {report['after']['status']} ({report['after']['check']})",
            server=report["after"],
        )
    return report, f"{name} is back in {backend} and up after {report['waited_s']:g} s"


def _summary(entries: list[dict]) -> str:
    return "; ".join(f"{s['name']} {s['status']} ({s['admin']}, {s['sessions']} session(s))" for s in entries)


if __name__ == "__main__":
    main()
