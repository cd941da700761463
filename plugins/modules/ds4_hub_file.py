#!/usr/bin/python
"""Bring one weight file from the hub to a verified state: a thin shell over module_utils/ds4_hub*.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_hub_file
short_description: Fetch one weight file from the hub, resumably, and verify it
description:
  - Brings O(dest)/O(file) to a verified state from C({endpoint}/{repo}/resolve/{revision}/{file}).
  - Reads the size, the sha256 (C(X-Linked-Etag)) and the commit (C(X-Repo-Commit)) from the hub's answer
    to a HEAD, following redirects only while they stay on the hub; when O(size) or O(sha256) are given
    too, the hub's values must agree with them.
  - Downloads into C(<file>.part) over up to O(connections) connections, each fetching 16 MiB byte ranges
    of the file in order from the storage the hub redirects to (without the token). Each completed range is
    synced and listed in C(.<file>.part.json), so a cut or killed run loses at most one range per
    connection and the next run fetches only the missing ranges. A storage that ignores C(Range) is read
    as one stream; a file whose C(ETag) changes between ranges is discarded and fetched again from the
    start.
  - Hashes the file in order as the ranges come, from memory within 256 MiB ahead of the hash and from the
    part beyond that (and for ranges already on disk); memory stays under 256 MiB plus 1 MiB per
    connection. The part is fsynced and renamed into place only once its size and sha256 match; a part
    whose hash does not match is discarded and fetched once more.
  - Transient failures (connection errors, cut transfers, HTTP 429 and 5xx) are retried with exponential
    backoff, resuming where the transfer stopped.
  - Records each verified file in C(.<file>.verified.json) beside it, keyed by size, mtime_ns, inode and
    device, so a later run neither hashes it again nor, when O(sha256) is given or O(revision) is a
    commit, asks the hub. A changed file no longer matches its record and is hashed again.
  - Refuses before the first byte when the free space of O(dest) is short of the bytes to fetch.
  - Writes its progress to O(progress_file) for a poller; see docs/weights.md for the format.
  - A file already there (adopted from an installer, fetched before) is opened once, never through a link
    but the one the roles make for a file used in place (followed once, to a target with no link at any
    component), and hashed, stat-ed, chowned and chmodded through that descriptor; a fetched part gets
    its owner and mode through its own descriptor before it takes the file's name. Nothing is changed by
    path, so a link swapped in meanwhile is never what gets owned.
version_added: 0.1.0
attributes:
  check_mode:
    support: full
    details: Asks the hub for the metadata and says what it would fetch (RV(bytes_to_fetch)); hashes nothing.
  diff_mode:
    support: full
options:
  repo:
    description: Hub repository, C(owner/name).
    type: str
    required: true
  revision:
    description: Branch, tag or commit; a 40-hex commit pins the file.
    type: str
    default: main
  file:
    description: File name in the repository and in O(dest).
    type: str
    required: true
  dest:
    description: Existing directory the file goes in.
    type: path
    required: true
  size:
    description: Expected size in bytes (the catalog's); the hub's must match.
    type: int
  sha256:
    description: Expected sha256 (the catalog's); the hub's must match.
    type: str
  progress_file:
    description: Where to write progress JSON; defaults to C(.<file>.progress.json) in O(dest).
    type: path
  progress_interval:
    description: Seconds between progress writes during a transfer or a hash.
    type: float
    default: 2.0
  retries:
    description: Retries of a transient failure, per request, before giving up (the part is kept).
    type: int
    default: 5
  retry_delay:
    description: First backoff in seconds; it doubles per retry, up to 60.
    type: float
    default: 2.0
  timeout:
    description: Seconds to wait for the hub to connect or to send the next bytes.
    type: float
    default: 30.0
  peers:
    description:
      - Base URLs of Sparks serving their verified copies (M(ds4.fleet.ds4_peer_serve)), tried in order
        before the hub, with the same client; their bytes must give the hub's sha256 like any other. A peer
        that fails, refuses or sends a wrong copy costs a try of the next one, then of the hub; the ranges
        it gave are kept unless the file fails its hash.
    type: list
    elements: str
    default: []
  peer_token:
    description:
      - The run's token, which each peer server of the run sends on every answer
        (M(ds4.fleet.ds4_peer_serve) O(ds4.fleet.ds4_peer_serve#module:token)). A peer's answer without it
        comes from another process on the peer's port, not from this run's server; that peer costs a try at
        once (its "not yet" is not waited on, none of its bytes is written), and the next source is taken.
        Omitted, any answer on a peer's port is believed until it sends no byte for 330 seconds.
    type: str
  connections:
    description:
      - Connections per file at most, each fetching its own byte ranges. CDNs cap each connection well below
        a fast link; several fill it. The transfer starts with one and opens eight times as many at each step
        while the rate grows nearly as much, then settles on as many as the rate needs (a path one
        connection fills keeps one). 1 fetches the file as one stream.
    type: int
    default: 16
  owner:
    description: The verified file's owner, by name; omitted, it stays as it is.
    type: str
  group:
    description: The verified file's group, by name; omitted, it stays as it is.
    type: str
  mode:
    description: The verified file's mode, octal in quotes; omitted, it stays as it is.
    type: str
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.heartbeat
  - ds4.fleet.hub
  - ds4.fleet.proxy
"""

EXAMPLES = r"""
- name: Fetch the 0731 base weights and verify them
  ds4.fleet.ds4_hub_file:
    endpoint: "{{ ds4_hf_endpoint }}"
    repo: antirez/deepseek-v4-gguf
    revision: main
    file: DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf
    size: 86720111488
    sha256: ca22ae2f838e14077c22bc1c1417b71b45b5e5a3687bd96c2ac6e17fdb6261c0
    dest: /var/lib/ds4/gguf
    token: "{{ ds4_hf_token }}"
    mode: "0644"
  async: 86400
  poll: 0
  register: __ds4_fetch
"""

RETURN = r"""
action:
  description: >-
    What happened: V(verified) (already verified, nothing done), V(hashed) (a file in place matched and was
    recorded), V(fetched), V(resumed); in check mode V(would_verify), V(would_fetch), V(would_resume).
  returned: always
  type: str
path:
  description: The file.
  returned: always
  type: str
size:
  description: Its size in bytes (the target size in check mode).
  returned: always
  type: int
sha256:
  description: Its verified sha256 (the target in check mode).
  returned: always
  type: str
commit:
  description: The commit the hub resolved O(revision) to (C(X-Repo-Commit)), or the recorded one.
  returned: always
  type: str
bytes_fetched:
  description: Bytes downloaded by this run.
  returned: unless check mode
  type: int
bytes_to_fetch:
  description: Bytes a real run would download.
  returned: check mode, when the file is not verified
  type: int
resumed_from:
  description: Bytes of the part on disk when this run resumed it (0 for a fresh download).
  returned: when fetched
  type: int
source:
  description: Where the bytes that completed the file came from, V(hub) or a peer's base URL.
  returned: when fetched
  type: str
bytes_from:
  description: Bytes this run received from each source (V(hub), peer URLs), discarded ones included.
  returned: when fetched
  type: dict
connections:
  description: Connections the transfer used at its end (the count the ramp settled on, or reached).
  returned: when fetched
  type: int
hashed_from_disk:
  description: >-
    Bytes hashed by reading the part back: the ranges on disk before this run, and those that came more
    than 256 MiB ahead of the hash.
  returned: when fetched
  type: int
verify_failures:
  description: Downloads discarded for a wrong sha256 before the one that verified.
  returned: when fetched
  type: int
rate_bps:
  description: Average transfer rate of this run, bytes per second.
  returned: when fetched
  type: int
attempts:
  description: HTTP requests made, retries included.
  returned: always
  type: int
sidecar:
  description: The verification record, C(.<file>.verified.json).
  returned: always
  type: str
progress_file:
  description: The progress file.
  returned: always
  type: str
shortfall_bytes:
  description: On a refusal for space, the bytes missing.
  returned: failure for lack of space
  type: int
"""


import grp  # noqa: E402
import os  # noqa: E402
import pwd  # noqa: E402
import re  # noqa: E402

from ansible.module_utils.basic import AnsibleModule, missing_required_lib  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._net.proxy_env import ProxyEnvError, apply_proxy_env  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.file_names import progress_name  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.heartbeat import HEARTBEAT_ARGS, from_params  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.hub import HubFile  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._weights.protocol import (  # noqa: E402
    REQUESTS_IMPORT_ERROR,
    FileRef,
    HubError,
    NoSpaceError,
)
from ansible_collections.ds4.fleet.plugins.module_utils._weights.transfer import CONNECTIONS  # noqa: E402


def _id(module, lookup, field, name, what):
    if name is None:
        return None
    try:
        return getattr(lookup(name), field)
    except KeyError:
        module.fail_json(msg=f"{what} {name} does not exist on this host")


def _ensure(module, progress_file):
    """Bring the file to a verified state; a failure fails the module, warnings and all."""
    p = module.params
    hub_file = None
    try:
        hub_file = HubFile(
            FileRef(p["endpoint"], p["repo"], p["revision"], p["file"]),
            p["dest"],
            token=p["token"],
            expected_size=p["size"],
            expected_sha256=p["sha256"],
            progress_path=progress_file,
            progress_interval=p["progress_interval"],
            retries=p["retries"],
            retry_delay=p["retry_delay"],
            timeout=p["timeout"],
            connections=p["connections"],
            peers=p["peers"],
            peer_token=p["peer_token"],
            heartbeat=from_params(p),
            uid=_id(module, pwd.getpwnam, "pw_uid", p["owner"], "user"),
            gid=_id(module, grp.getgrnam, "gr_gid", p["group"], "group"),
            mode=int(p["mode"], 8) if p["mode"] is not None else None,
        )
        result = hub_file.ensure(check_mode=module.check_mode)
    except (HubError, OSError) as e:
        # What went wrong before the failure (a peer's bad copy, a retry) is part of the story.
        for warning in hub_file.warnings if hub_file else []:
            module.warn(warning)
        if isinstance(e, NoSpaceError):
            module.fail_json(msg=str(e), shortfall_bytes=e.shortfall_bytes, progress_file=progress_file)
        if isinstance(e, HubError):
            module.fail_json(msg=str(e), error=type(e).__name__, progress_file=progress_file)
        module.fail_json(msg=f"{p['dest']}/{p['file']}: {e}", progress_file=progress_file)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            endpoint=dict(type="str", default="https://huggingface.co"),
            repo=dict(type="str", required=True),
            revision=dict(type="str", default="main"),
            file=dict(type="str", required=True),
            dest=dict(type="path", required=True),
            token=dict(type="str", default="", no_log=True),
            size=dict(type="int"),
            sha256=dict(type="str"),
            progress_file=dict(type="path"),
            progress_interval=dict(type="float", default=2.0),
            retries=dict(type="int", default=5),
            retry_delay=dict(type="float", default=2.0),
            timeout=dict(type="float", default=30.0),
            connections=dict(type="int", default=CONNECTIONS),
            peers=dict(type="list", elements="str", default=[]),
            peer_token=dict(type="str", no_log=True),
            owner=dict(type="str"),
            group=dict(type="str"),
            mode=dict(type="str"),
            proxy_env=dict(type="dict", default={}, no_log=True),
            **HEARTBEAT_ARGS,
        ),
        supports_check_mode=True,
    )
    if REQUESTS_IMPORT_ERROR:
        module.fail_json(
            msg=missing_required_lib("requests (python3-requests)"), exception=REQUESTS_IMPORT_ERROR
        )
    p = module.params
    if p["mode"] is not None and not re.fullmatch(r"0?[0-7]{3,4}", p["mode"]):
        module.fail_json(msg=f'mode must be an octal mode in quotes, such as "0644"; got {p["mode"]!r}')
    if p["connections"] < 1:
        module.fail_json(msg=f"connections must be 1 or more, got {p['connections']}")
    if not os.path.isdir(p["dest"]):
        module.fail_json(msg=f"dest {p['dest']} is not a directory: create it (with its owner) first")
    try:
        # The hub through the proxy (requests reads os.environ); the peers never (a direct session).
        apply_proxy_env(p["proxy_env"], no_log_values=module.no_log_values)
    except ProxyEnvError as e:
        module.fail_json(msg=str(e))
    progress_file = p["progress_file"] or os.path.join(p["dest"], progress_name(p["file"]))
    result = _ensure(module, progress_file)
    for warning in result.pop("warnings"):
        module.warn(warning)
    before = result.pop("before")
    if module._diff:
        after = {"path": result["path"], "size": result["size"], "sha256": result["sha256"]}
        result["diff"] = {"before": before, "after": after}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
