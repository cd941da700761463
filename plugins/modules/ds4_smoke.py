#!/usr/bin/python
"""Ask the running ds4 engine one question and check its answer (logic in module_utils/_service/smoke.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_smoke
short_description: Smoke-test the running ds4 engine over HTTP
description:
  - Sends one chat completion to the engine's C(/v1/chat/completions) and checks the answer against a
    regular expression, as the shell installer's smoke test does, but over HTTP against the running
    service, since a second engine could share neither the Spark's memory nor the engine's lock.
  - Asks only when the socket listening where O(url) points is the engine's, and trusts the answer only when
    the same socket still listens after it (see M(ds4.fleet.ds4_listener)); fails naming whoever holds
    the port otherwise.
  - Returns the answer and the latency; fails with the answer when it does not match.
  - Changes nothing.
version_added: 0.1.0
options:
  url:
    description: Base URL of the engine, for example C(http://127.0.0.1:8000).
    type: str
    required: true
  prompt:
    description: The question.
    type: str
    default: What is the capital of France? Answer in one sentence.
  expect:
    description: Regular expression the answer must contain (Python C(re.search)).
    type: str
    default: "[Pp]aris"
  model:
    description: Model id sent in the request.
    type: str
    default: deepseek-v4-flash
  max_tokens:
    description: Token limit of the answer.
    type: int
    default: 64
  timeout:
    description: Seconds to wait for the answer.
    type: float
    default: 300
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.listener
"""

EXAMPLES = r"""
- name: Ask the engine the smoke question
  ds4.fleet.ds4_smoke:
    url: http://127.0.0.1:8000
"""

RETURN = r"""
answer:
  description: The engine's answer.
  type: str
  returned: when the engine answered
latency_s:
  description: Seconds from sending the question to the whole answer.
  type: float
  returned: success
url:
  description: The URL asked.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ds4.fleet.plugins.module_utils._service.smoke import (
    DEFAULT_EXPECT,
    DEFAULT_MODEL,
    DEFAULT_PROMPT,
    SmokeError,
    chat_url,
    smoke,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.listener import LISTENER_ARGS, engine_prover


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "prompt": {"type": "str", "default": DEFAULT_PROMPT},
            "expect": {"type": "str", "default": DEFAULT_EXPECT},
            "model": {"type": "str", "default": DEFAULT_MODEL},
            # no_log=False: token counts, which only their name makes Ansible take for a secret.
            "max_tokens": {"type": "int", "default": 64, "no_log": False},
            "timeout": {"type": "float", "default": 300},
            **LISTENER_ARGS,
        },
        supports_check_mode=True,
    )
    p = module.params
    prove = engine_prover(p["url"], p["engine_user"], p["unit"], module.run_command)
    try:
        result = smoke(p["url"], p["prompt"], p["expect"], p["model"], p["max_tokens"], p["timeout"], prove)
    except SmokeError as exc:
        module.fail_json(msg=f"Smoke test failed: {exc}", url=chat_url(p["url"]))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
