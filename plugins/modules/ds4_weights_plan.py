#!/usr/bin/python
"""Plan the weights before any byte moves: a thin shell over _weights.survey and _weights.disk_plan."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_weights_plan
short_description: Decide what to fetch, adopt, keep and remove for the model weights
description:
  - Gathers the sizes of the catalog's files in O(gguf_dir) (and of their C(.part) files), the free space,
    the files any process has open or mapped, and copies of the wanted files in O(adopt_dirs) (a shell
    installer's C(~/gguf)); then computes the disk plan. Changes nothing.
  - Sizes the catalog lacks come from the file's verification record or, failing that, from the hub.
  - Fails, before any byte moves, when even the removals O(policy) allows would not make room, with the
    shortfall in bytes and GiB.
  - Removal is only ever proposed for files of the other generation in O(gguf_dir) that no process uses.
version_added: 0.1.0
options:
  catalog:
    description: The model catalog (C(ds4_model_catalog)).
    type: dict
    required: true
  generation:
    description: The generation to run (C(ds4_model_generation)).
    type: str
    required: true
  speculation:
    description: The speculation mode (C(ds4_speculation)).
    type: str
    required: true
  quantization:
    description: The base model's quantization (C(ds4_quantization)); omitted, the generation's base one.
    type: str
  extra:
    description: The operator's quantizations (C(ds4_extra_quantizations)).
    type: dict
    default: {}
  gguf_dir:
    description: Directory the service reads its weights from (C(ds4_gguf_dir)); it need not exist yet.
    type: path
    default: /var/lib/ds4/gguf
  policy:
    description: >-
      What may happen to the other generation (C(ds4_old_weights)): V(keep) never removes it and fails if
      the new files do not fit beside it; V(remove) removes it after the smoke test, or before the download
      when space demands it; V(auto) removes it first only when space demands it, otherwise keeps it.
    type: str
    choices: [keep, remove, auto]
    default: auto
  adopt_dirs:
    description: >-
      Directories where a shell installer left GGUFs (C(~/gguf)); their files are adopted, never fetched
      again.
    type: list
    elements: path
    default: []
  in_use:
    description: Files the running service is known to use, beyond those found open or mapped by a process.
    type: list
    elements: path
    default: []
  timeout:
    description: Seconds to wait for the hub.
    type: float
    default: 30.0
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.hub
  - ds4.fleet.proxy
"""

EXAMPLES = r"""
- name: Plan the weights before any byte moves
  ds4.fleet.ds4_weights_plan:
    catalog: "{{ ds4_model_catalog }}"
    generation: "{{ ds4_model_generation }}"
    speculation: "{{ ds4_speculation }}"
    gguf_dir: "{{ ds4_gguf_dir }}"
    policy: "{{ ds4_old_weights }}"
    adopt_dirs: ["~{{ ansible_user }}/gguf"]
    endpoint: "{{ ds4_hf_endpoint }}"
    token: "{{ ds4_hf_token }}"
  register: __ds4_weights_plan
"""

RETURN = r"""
files:
  description: >-
    The wanted files in launcher order (catalog entry plus role, generation, size_source, dir, path).
  returned: success
  type: list
  elements: dict
fetch:
  description: Files to download (name, size, resume_from, bytes, replaces).
  returned: success
  type: list
  elements: dict
adopt:
  description: Files taken from O(adopt_dirs) (name, src, dest, action move/copy/in_place, bytes, partial).
  returned: success
  type: list
  elements: dict
skipped:
  description: >-
    What was found in O(adopt_dirs) and not adopted, and why (a symbolic link is never adopted); each is
    also a warning.
  returned: success
  type: list
  elements: str
remove_before:
  description: Other-generation files to remove before the download (name, path, bytes, paths).
  returned: success
  type: list
  elements: dict
remove_after_smoke:
  description: Other-generation files to remove once the new generation passed its smoke test.
  returned: success
  type: list
  elements: dict
keep:
  description: Files left as they are, each with its reason.
  returned: success
  type: list
  elements: dict
need_bytes:
  description: Bytes the fetches and copies will write to O(gguf_dir)'s filesystem.
  returned: always
  type: int
free_bytes:
  description: Bytes free there now.
  returned: always
  type: int
free_after_bytes:
  description: Bytes free once the plan has run (removals after the smoke test not counted).
  returned: success
  type: int
fits:
  description: Whether the plan fits (always true on success).
  returned: always
  type: bool
message:
  description: The plan in one sentence.
  returned: always
  type: str
in_use:
  description: Catalog files in O(gguf_dir) that a process uses.
  returned: success
  type: list
  elements: str
shortfall_bytes:
  description: On refusal, the bytes missing even after the allowed removals.
  returned: failure for lack of space
  type: int
shortfall_gib:
  description: The same in GiB.
  returned: failure for lack of space
  type: float
"""


from ansible.module_utils.basic import AnsibleModule, missing_required_lib  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._net.proxy_env import ProxyEnvError, apply_proxy_env  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.catalog import (  # noqa: E402
    CatalogError,
    model_files,
    other_generation_files,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.disk_plan import (  # noqa: E402
    POLICIES,
    DiskPlanError,
    plan,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import (  # noqa: E402
    REQUESTS_IMPORT_ERROR,
    FileRef,
    HubError,
    fetch_metadata,
    new_session,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.survey import survey  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            catalog=dict(type="dict", required=True),
            generation=dict(type="str", required=True),
            speculation=dict(type="str", required=True),
            quantization=dict(type="str"),
            extra=dict(type="dict", default={}),
            gguf_dir=dict(type="path", default="/var/lib/ds4/gguf"),
            policy=dict(type="str", choices=list(POLICIES), default="auto"),
            adopt_dirs=dict(type="list", elements="path", default=[]),
            in_use=dict(type="list", elements="path", default=[]),
            endpoint=dict(type="str", default="https://huggingface.co"),
            token=dict(type="str", default="", no_log=True),
            timeout=dict(type="float", default=30.0),
            proxy_env=dict(type="dict", default={}, no_log=True),
        ),
        supports_check_mode=True,
    )
    if REQUESTS_IMPORT_ERROR:
        module.fail_json(
            msg=missing_required_lib("requests (python3-requests)"), exception=REQUESTS_IMPORT_ERROR
        )
    p = module.params
    try:
        # requests takes the proxy from os.environ at each request.
        apply_proxy_env(p["proxy_env"], no_log_values=module.no_log_values)
    except ProxyEnvError as e:
        module.fail_json(msg=str(e))
    session = new_session(p["token"])

    def size_of(entry):
        ref = FileRef(p["endpoint"], entry["repo"], entry["revision"], entry["name"])
        size = fetch_metadata(session, ref, p["timeout"]).size
        if size is None:
            raise HubError(f"the hub gave no size for {ref.describe()}")
        return size

    try:
        wanted = model_files(p["catalog"], p["generation"], p["speculation"], p["quantization"], p["extra"])
        other = [f["name"] for f in other_generation_files(p["catalog"], p["generation"])]
        host = survey(p["gguf_dir"], wanted, other, size_of, p["adopt_dirs"], p["in_use"])
        skipped = host.pop("skipped")
        for line in skipped:
            module.warn(line)
        result = plan(policy=p["policy"], **host)
    except DiskPlanError as e:
        failed = {k: v for k, v in e.plan.items() if k != "message"}
        module.fail_json(msg=str(e), shortfall_gib=e.shortfall_gib, **failed)
    except (CatalogError, HubError) as e:
        module.fail_json(msg=str(e))
    except OSError as e:  # requests' errors are OSErrors too
        module.fail_json(msg=f"cannot survey {p['gguf_dir']} or ask the hub for a size: {e}")
    module.exit_json(changed=False, in_use=host["in_use"], skipped=skipped, **result)


if __name__ == "__main__":
    main()
