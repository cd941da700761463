#!/usr/bin/python
"""Compute the ds4-server environment file and command line from the launch settings.

A module rather than a filter, though it touches nothing: the roles call modules for logic (house
style), its options are documented and shown by ansible-doc, and its result is registered once and
read by both the environment-file template and the unit template. Options are `raw` so that every
message comes from module_utils/_service/launch.py and names the role variable (`ds4_port`), instead of
Ansible's own conversions, which would also split a string on commas into a list.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_launch_config
short_description: Compute the ds4-server environment file and arguments
description:
  - Validates the launch settings of the ds4 engine and returns the content of its environment file
    (C(/etc/ds4/ds4.env)), its argument list and a systemd C(ExecStart=) line, as the installer's
    C(ds4-serve) launcher would start it.
  - Touches nothing on the host but the key of O(digest_key), made once; the caller writes the files.
  - Every error names the role variable (for example C(ds4_port)) and the bad value, and all errors
    are reported together.
  - C(DS4_NO_UPDATE_CHECK=1) is always set, because the ds4-update-check timer replaces the engine's
    own check.
version_added: 0.1.0
options:
  release_dir:
    description: Directory holding the C(ds4-server) binary (absolute).
    type: raw
    required: true
  base_model:
    description: Base GGUF file (absolute).
    type: raw
    required: true
  dspark_model:
    description:
      - Drafter GGUF of the same generation; required when O(speculation=dspark).
      - Upstream (O(lineage=upstream)) takes its DSpark support GGUF here.
    type: raw
  mtp_model:
    description: Legacy MTP GGUF; required when O(speculation=mtp).
    type: raw
  speculation:
    description: V(dspark), V(mtp) (legacy generation only) or V(plain) (C(--no-spec)).
    type: raw
    default: dspark
  lineage:
    description:
      - The engine's lineage, V(fork) or V(upstream) (C(ds4_engine_lineage), the filter
        C(ds4.fleet.engine_lineage)).
      - The fork's V(dspark) is C(DS4_CONT_DSPARK=1 DS4_DSPARK_MODEL=FILE) with its drafter; upstream's is
        C(--dspark --mtp-model FILE) with its DSpark support GGUF, and takes no V(mtp). Upstream's own flags
        in O(extra_args) are refused on the fork.
    type: raw
    default: fork
  model_generation:
    description: V(0731) or V(legacy). Quote V('0731') in YAML, where a bare 0731 is a number.
    type: raw
    default: "0731"
  ctx:
    description: Context length in tokens; an int or a string of digits.
    type: raw
    default: 524288
  host:
    description: Address to listen on.
    type: raw
    default: 127.0.0.1
  port:
    description: Port to listen on, 1 to 65535.
    type: raw
    default: 8000
  kv_disk_dir:
    description: Directory for disk-persisted KV banks; V('') leaves C(--kv-disk-dir) out.
    type: raw
    default: /var/lib/ds4/kv
  kv_disk_space_mb:
    description: Disk budget for the KV banks in MiB, passed with C(--kv-disk-dir).
    type: raw
    default: 4096
  mem_floor_gb:
    description: C(--mem-floor-gb); V('') leaves the flag out.
    type: raw
    default: 4
  extra_args:
    description:
      - More ds4-server arguments (strings or ints).
      - Flags this module manages (C(--port), C(-c), C(--no-spec), ...) are refused; set their variables.
    type: raw
    default: []
  extra_env:
    description:
      - More environment, UPPERCASE names to strings or ints.
      - Names this module manages (C(DS4_LOCK_FILE), C(DS4_CONT_DSPARK), ...) are refused.
    type: raw
    default: {}
  lock_file:
    description: C(DS4_LOCK_FILE), outside the unit's private /tmp so a second engine sees it.
    type: raw
    default: /run/ds4/ds4.lock
  dist_role:
    description: A pair member's role (C(ds4_pairs)), V(coordinator) or V(worker); omitted, it serves alone.
    type: raw
  dist_layers:
    description: The member's slice, C(0:K) for the coordinator, C(K:output) for the worker.
    type: raw
  dist_host:
    description: The coordinator's C(--listen) address on the pair's link (the worker's C(--coordinator)).
    type: raw
  dist_port:
    description: The coordinator's C(--listen) port on the pair's link.
    type: raw
  vision_model:
    description: The model family's vision encoder (C(--vision FILE)), an absolute path; omitted, none.
    type: raw
    version_added: 0.2.0
  ssd_streaming_cache_gb:
    description:
      - A streamed family's pinned expert cache in GB (C(--ssd-streaming --ssd-streaming-cache-experts NGB));
        omitted, the model is resident.
    type: raw
    version_added: 0.2.0
  power:
    description: The C(--power) percentage the model family requires; omitted, the flag is left out.
    type: raw
    version_added: 0.2.0
  builtin_mtp:
    description: The family's MTP is a block of the model itself (GLM 5.3), so V(mtp) passes C(--mtp) alone.
    type: raw
    default: false
    version_added: 0.2.0
  dist_mode:
    description:
      - The pair's mode (C(ds4_pairs)), V(pipeline) (C(--layers); the default) or V(tensor)
        (C(--tensor-parallel), upstream's engine only), where the worker runs C(ds4), the CLI, and the
        coordinator serves with C(--batched-session 8).
    type: raw
  dist_transport:
    description:
      - A tensor pair's transport, V(rdma) (the default; the device and GID index found at each start by
        O(rdma_launcher), which falls back to tcp with a warning) or V(tcp).
    type: raw
  dist_address:
    description: A tensor member's own address on the pair's link, whose RDMA device the launcher seeks.
    type: raw
  rdma_launcher:
    description:
      - The absolute path of the RDMA launcher (C(ds4-rdma-launch)), which the unit runs before the engine
        with rdma.
    type: raw
  rdma_sysfs_root:
    description:
      - Where the RDMA launcher reads sysfs (its C(--root)); the real V(/sys) on a Spark, a stand-in
        device's tree in the sandbox.
    type: raw
    default: /sys
  rdma_limit_memlock:
    description:
      - The unit's C(LimitMEMLOCK) over rdma, where the NIC pins the engine's buffers; V(infinity) unless
        the host cannot raise it.
    type: raw
    default: infinity
  digest_key:
    description:
      - The Spark's key of the digests in RV(public) (HMAC-SHA256), a file of root's alone (mode 0600) in
        a directory of root's alone; made, random, when there is none (not in check mode). A link, or a
        file anyone else may read, is refused.
      - Without it, or in check mode before the key exists, the digests are keyed by a key of this call
        alone, so they tell a change within the result, never across runs.
    type: path
    version_added: 0.1.0
extends_documentation_fragment:
  - ds4.fleet.module
"""

EXAMPLES = r"""
- name: Compute how ds4-server is launched
  ds4.fleet.ds4_launch_config:
    release_dir: /opt/ds4/current
    base_model: "{{ models }}/DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
    dspark_model: "{{ models }}/DSpark-drafter-Q2K-Q8-0731.gguf"
    port: "{{ ds4_port }}"
  vars:
    models: /var/lib/ds4/models
  register: __ds4_launch
  # Its result holds the ds4_extra_env values, which may be secrets.
  no_log: "{{ ds4_extra_env | length > 0 }}"

- name: Write the ds4-server environment file
  ansible.builtin.copy:
    content: "{{ __ds4_launch.env_content }}"
    dest: /etc/ds4/ds4.env
    mode: "0640"
  diff: false
"""

RETURN = r"""
settings:
  description: The validated settings with defaults filled in; turned-off options are null.
  returned: success
  type: dict
env:
  description: The environment of ds4-server, name to value, in file order.
  returned: success
  type: dict
  sample: {"DS4_NO_UPDATE_CHECK": "1", "DS4_LOCK_FILE": "/run/ds4/ds4.lock", "DS4_CONT_DSPARK": "1"}
env_lines:
  description: The lines of the environment file, quoted for systemd's EnvironmentFile=.
  returned: success
  type: list
  elements: str
env_content:
  description: The environment file, one line per variable, ending in a newline; no header.
  returned: success
  type: str
binary:
  description: Path of the ds4-server binary.
  returned: success
  type: str
  sample: /opt/ds4/current/ds4-server
args:
  description: The ds4-server arguments, without the program.
  returned: success
  type: list
  elements: str
  sample: ["--cuda", "-m", "/m/base.gguf", "-c", "524288", "--host", "127.0.0.1", "--port", "8000"]
exec_start:
  description: Binary and arguments quoted for a systemd ExecStart= line (% and $ doubled).
  returned: success
  type: str
unit:
  description:
    - What the unit allows beyond its own settings for this launch, C(device_allow) (a list of
      DeviceAllow= entries) and C(limit_memlock) (null, or V(infinity)); the RDMA device nodes and
      unlimited locked memory for a tensor pair over rdma alone.
  returned: success
  type: dict
public:
  description: >-
    C(settings), C(env), C(env_lines) and C(args) with each C(extra_env) value replaced by
    C(hmac-sha256:) and the first 16 hex digits of its HMAC under O(digest_key), to show or record where
    others may read (a diff, the speed records): a change is told, the value never, and no value can be
    guessed by hashing candidates without the Spark's key.
  returned: success
  type: dict
"""

# Ansible's convention puts DOCUMENTATION, EXAMPLES and RETURN before the imports.
from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._common.digest import (  # noqa: E402
    DigestKeyError,
    load_key,
)
from ansible_collections.ds4.fleet.plugins.module_utils._service.launch import (  # noqa: E402
    DEFAULTS,
    REQUIRED,
    LaunchConfigError,
    launch_config,
    validate,
)


def main():
    # The defaults come from module_utils, which also fills them in for an option given as null.
    spec = {key: {"type": "raw", "default": default} for key, default in DEFAULTS.items()}
    for key in REQUIRED:
        spec[key] = {"type": "raw", "required": True}
    spec["digest_key"] = {"type": "path"}
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    settings = {key: module.params[key] for key in DEFAULTS}
    try:
        # Bad settings are refused before the key is made.
        validate(settings)
        key, made = None, False
        if module.params["digest_key"]:
            key, made = load_key(module.params["digest_key"], create=not module.check_mode)
        result = launch_config(settings, key)
    except LaunchConfigError as exc:
        module.fail_json(msg=str(exc), errors=exc.errors)
    except DigestKeyError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=made, **result)


if __name__ == "__main__":
    main()
