#!/usr/bin/python
"""Wait until the running ds4 engine has no request in flight (logic in module_utils/_service/drain.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_drain
short_description: Wait until the running ds4 engine has no request in flight, or a time limit passes
description:
  - Polls the engine on the Spark, reading C(ds4_requests_inflight) from C(/metrics), or
    C(server.requests_inflight) from C(/v1/stats) (JSON) where C(/metrics) lacks it, until nothing is in
    flight or I(timeout) seconds pass, and reports what it saw.
  - Never fails for a busy engine. A drain that times out returns C(timed_out=true), and the caller goes
    on (the engine finishes what it holds after its SIGTERM). An engine that does not answer holds nothing
    to wait for (C(answering=false)). An engine that answers without saying what it holds is not waited for.
  - Changes nothing. In check mode it reads once and does not wait.
  - Run it with the Spark already out of the load balancer, or new requests keep arriving.
version_added: 0.1.0
options:
  timeout:
    description: Seconds to wait at most for the requests in flight to finish.
    type: float
    default: 300
  interval:
    description: Seconds between two looks.
    type: float
    default: 1
  request_timeout:
    description: Seconds one look may take before the engine counts as not answering.
    type: float
    default: 5
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.engine
"""

EXAMPLES = r"""
- name: Wait for the requests in flight to finish, five minutes at most
  ds4.fleet.ds4_drain:
    host: "{{ ansible_facts.ansible_local.ds4.host }}"
    port: "{{ ansible_facts.ansible_local.ds4.port }}"
    timeout: 300
  register: __ds4_drain
"""

RETURN = r"""
drained:
  description: True when nothing was in flight at the end, or the engine did not answer at all.
  type: bool
  returned: always
answering:
  description: Whether the engine answered HTTP.
  type: bool
  returned: always
timed_out:
  description: True when the time limit passed with requests still in flight.
  type: bool
  returned: always
inflight_at_start:
  description: Requests in flight at the first look; null when the engine did not answer.
  type: int
  returned: always
inflight_at_end:
  description: Requests in flight at the last look.
  type: int
  returned: always
inflight_max:
  description: The most requests in flight at any look.
  type: int
  returned: always
polls:
  description: How many looks answered.
  type: int
  returned: always
source:
  description: Where the count was read, C(/metrics) or C(/v1/stats); null when it could not be.
  type: str
  returned: always
waited_s:
  description: Seconds from the first look to the last.
  type: float
  returned: always
url:
  description: The engine's base URL.
  type: str
  returned: always
message:
  description: One sentence saying what the drain saw.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.fleet.plugins.module_utils._service.drain import drain
from ansible_collections.ds4.fleet.plugins.module_utils._spark.engine_http import engine_url


def main():
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str", "default": "127.0.0.1"},
            "port": {"type": "int", "default": 8000},
            "timeout": {"type": "float", "default": 300},
            "interval": {"type": "float", "default": 1},
            "request_timeout": {"type": "float", "default": 5},
        },
        supports_check_mode=True,
    )
    p = module.params
    for name in ("timeout", "interval", "request_timeout"):
        if p[name] < 0 or (name != "timeout" and p[name] == 0):
            module.fail_json(msg=f"{name} must be a positive number of seconds: {p[name]}")
    if not 0 < p["port"] < 65536:
        module.fail_json(msg=f"port must be 1 to 65535: {p['port']}")
    report = drain(
        engine_url(p["host"], p["port"]),
        timeout=p["timeout"],
        interval=p["interval"],
        request_timeout=p["request_timeout"],
        wait=not module.check_mode,
    )
    module.exit_json(changed=False, **report)


if __name__ == "__main__":
    main()
