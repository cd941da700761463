#!/usr/bin/python
"""Plan an engine release before anything changes: a thin shell over module_utils/_engine/release_plan.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_release_plan
short_description: Resolve a ds4 engine release tag and plan its build and the pruning of old releases
description:
  - Resolves O(release) to a commit in O(repo) with C(git ls-remote) (the peeled commit of an annotated tag)
    and refuses a tag that resolves to a commit other than O(commit), so that a moved tag cannot slip in.
  - Refuses as well a tag that resolves to a commit other than the one this host recorded when it built
    the release (O(tags_record), else the release's build stamp), naming both, unless
    O(accept_moved_tag) is set or O(commit) pins the new commit.
  - A release pinned by commit alone (O(release) C(g<12 hex>) or C(NAME-g<12 hex>), for a source without
    tags) needs O(commit), whose first 12 hex digits it carries; the module proves O(repo) holds that
    commit with a shallow fetch of it into a scratch repository, and with O(branch), that the commit is on
    that branch, returning the branch's head and how many commits it has moved past the commit.
  - A credential in O(repo) (C(https://user:token@host/...)) is given to git only in its environment,
    never on its command line, and is masked in everything the module returns.
  - Decides the make target from the release's own Makefile at that commit (read from git, never run),
    for a GB10 or an arch O(make_targets) names a target for, C(cuda-spark) where it builds native GB10
    code, else C(cuda CUDA_ARCH=sm_121), with the reason (module_utils/_engine/make_target.py). Other arches
    keep C(cuda CUDA_ARCH=sm_NNN) without reading it.
  - Reads the release layout under O(root) (C(releases/<tag>/), the C(current) and C(previous) links) and the
    build stamp of the wanted release, and says whether it must be built and why.
  - Fails when the wanted release is the running release (C(current)) or the rollback release (C(previous))
    and its stamp differs from the wanted build, since neither is ever rebuilt in place; one that differs
    only in its make target is kept as built (RV(kept_as_built)).
  - Lists the releases to remove so that the newest O(keep) remain, never C(current), C(previous) or the
    wanted release.
  - Changes nothing.
version_added: 0.1.0
options:
  commit:
    description:
      - The 40-hex commit the tag must resolve to; empty for no pin.
      - For a release pinned by commit, the commit itself (required).
    type: str
    default: ""
  lineage:
    description:
      - The engine's lineage, V(fork) or V(upstream) (the filter C(ds4.fleet.engine_lineage)).
      - A release pinned by commit whose source at the commit shows the other lineage (only the fork serves
        C(/v1/stats); upstream's server takes C(--mtp-model)) is refused, naming C(ds4_engine_lineage).
      - So is any release, a tag's too, whose build stamp records the other lineage (its built server's
        C(--help) showed it); a tag's source is not read (upstream has no tags).
    type: str
    choices: [fork, upstream]
    default: fork
  branch:
    description:
      - For a release pinned by commit, the branch of O(repo) it follows (C(main)); empty for none.
      - The commit must be on it; RV(branch_ahead) says how far its head has moved past the commit.
    type: str
    default: ""
  accept_moved_tag:
    description: Build a tag that now resolves to another commit than the one recorded when it was built.
    type: bool
    default: false
  tags_record:
    description: The record of the commit each tag resolved to when this host built it.
    type: path
    default: /var/lib/ds4-fleet/engine-tags.json
  keep:
    description: How many of the newest releases to keep, 2 or more.
    type: int
    default: 3
  make_targets:
    description:
      - The make target to build an arch with, by arch (C(sm_121)), as C(ds4_engine_make_targets) names
        them; an arch not named follows the Makefile. A target the Makefile lacks is refused.
    type: dict
    default: {}
  gpu_compute_cap:
    description:
      - The compute capability of the building host's GPU (C(12.1)), for a C(cuda-spark) that builds for the
        GPU present (C(native)); empty for none.
    type: str
    default: ""
  log_dir:
    description: Where the build logs are (C(build-<tag>.log)); a removed release's log goes with it.
    type: path
    default: /var/log/ds4
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.build
  - ds4.fleet.proxy
"""

EXAMPLES = r"""
- name: Plan the engine release
  ds4.fleet.ds4_release_plan:
    root: /opt/ds4
    release: v0.6.5
    commit: "{{ ds4_release_commit }}"
    repo: https://github.com/Entrpi/ds4.git
    build_target: "{{ '12.1' | ds4.fleet.cuda_build_target }}"
    cuda_version: "13.0"
  register: __ds4_engine_plan
"""

RETURN = r"""
release:
  description: The release tag.
  returned: success
  type: str
commit:
  description: The commit the tag resolves to.
  returned: success
  type: str
recorded_commit:
  description: The commit this host recorded for the tag when it built it, or null.
  returned: success
  type: str
moved:
  description: Whether the tag now resolves to another commit than the recorded one (accepted).
  returned: success
  type: bool
pinned_by_commit:
  description: Whether the release is pinned by commit alone, without a tag.
  returned: success
  type: bool
lineage:
  description: The engine's lineage, as given.
  returned: success
  type: str
branch_head:
  description: The head of O(branch) now, or null without a branch.
  returned: success
  type: str
branch_ahead:
  description: How many commits O(branch) has beyond the pinned commit (0 when it is its head), or null.
  returned: success
  type: int
path:
  description: The release's directory.
  returned: success
  type: str
  sample: /opt/ds4/releases/v0.6.5
build:
  description: Whether the release must be built.
  returned: success
  type: bool
reason:
  description:
    - "Why it must be built (C(not built yet), C(stamp differs: cuda_version: 12.9 -> 13.0)), or
      C(up to date)."
  returned: success
  type: str
build_target:
  description: The build, its make target decided from the Makefile (C(arch), C(make_target), C(make_args)).
  returned: success
  type: dict
  sample: {"arch": "sm_121", "make_target": "cuda-spark", "make_args": []}
make_target_reason:
  description: Why that make target, in one line.
  returned: success
  type: str
without_spark_target:
  description: Whether a GB10 is built without the Spark target (C(cuda-spark)).
  returned: success
  type: bool
kept_as_built:
  description: Whether the running or a rollback release is kept as built with another make target.
  returned: success
  type: bool
changes:
  description: "The stamp's differences from the wanted build, one C(key: old -> new) each."
  returned: success
  type: list
  elements: str
wanted:
  description: The wanted C(release), C(commit), C(build_target) and C(cuda_version).
  returned: success
  type: dict
stamp:
  description: The release's current build stamp, or null.
  returned: success
  type: dict
current:
  description: The C(current) link, C(path), C(target) and C(release) (null when absent or foreign).
  returned: success
  type: dict
previous:
  description: The C(previous) link, as C(current).
  returned: success
  type: dict
present:
  description: The releases built now, by name.
  returned: success
  type: list
  elements: str
foreign:
  description: Other entries in the releases directory, never touched.
  returned: success
  type: list
  elements: str
prune:
  description: The releases to remove, oldest first.
  returned: success
  type: list
  elements: str
prune_paths:
  description: Their directories and build logs.
  returned: success
  type: list
  elements: str
kept:
  description: The releases there will be after the build and the pruning, oldest first.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._engine.lineage import (  # noqa: E402
    LineageError,
    built_lineage,
    check_source,
    source_lineage,
)
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_plan import (  # noqa: E402
    TAGS_RECORD,
    ReleaseError,
    as_built,
    check_commit,
    check_release,
    choose_target,
    plan_release,
    read_stamp,
    recorded_commit,
    remote_of,
    resolve_commit,
    resolve_release,
    verify_pin,
    verify_unmoved,
)
from ansible_collections.ds4.fleet.plugins.module_utils._net.proxy_env import ProxyEnvError, apply_proxy_env  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._spark.version import is_release_tag  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "release": {"type": "str", "required": True},
            "commit": {"type": "str", "default": ""},
            "branch": {"type": "str", "default": ""},
            "lineage": {"type": "str", "default": "fork", "choices": ["fork", "upstream"]},
            "accept_moved_tag": {"type": "bool", "default": False},
            "tags_record": {"type": "path", "default": TAGS_RECORD},
            "repo": {"type": "str", "required": True},
            "build_target": {"type": "dict", "required": True},
            "cuda_version": {"type": "str", "required": True},
            "keep": {"type": "int", "default": 3},
            "make_targets": {"type": "dict", "default": {}},
            "gpu_compute_cap": {"type": "str", "default": ""},
            "log_dir": {"type": "path", "default": "/var/log/ds4"},
            "proxy_env": {"type": "dict", "default": {}, "no_log": True},
        },
        supports_check_mode=True,
    )
    module.run_command_environ_update = {"LANG": "C", "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
    p = module.params
    if p["keep"] < 2:
        module.fail_json(
            msg=f"ds4_releases_keep must be 2 or more (the running and the rollback release); got {p['keep']}"
        )
    try:
        # A credential in the URL is masked in everything the module returns, its invocation included.
        module.no_log_values.update(remote_of(p["repo"]).secrets)
        # git ls-remote (run_command starts from os.environ) goes through the proxy.
        apply_proxy_env(p["proxy_env"], no_log_values=module.no_log_values)
        release = check_release(p["release"], p["commit"])
        pinned = check_commit(p["commit"])
        git = module.get_bin_path("git", required=True)
        by_commit = not is_release_tag(release)
        followed = {"branch_head": None, "branch_ahead": None}
        recorded = None
        if by_commit:
            # No tag to resolve: the commit itself must be in the repository (and on the followed branch).
            followed = resolve_commit(module.run_command, git, p["repo"], pinned, p["branch"])
            commit = pinned
            # Known from the settings before anything changes, and held to the source at the commit.
            shown = source_lineage(followed["marks"])
            check_source(p["lineage"], shown, release, commit, "its source at that commit")
        else:
            commit = resolve_release(module.run_command, git, p["repo"], release)
            verify_pin(release, p["repo"], commit, pinned)
            recorded, where = recorded_commit(p["root"], release, p["tags_record"])
            verify_unmoved(release, p["repo"], commit, recorded, where, pinned, p["accept_moved_tag"])
        target = choose_target(
            module.run_command,
            git,
            p["repo"],
            release,
            commit,
            p["build_target"],
            p["make_targets"],
            p["gpu_compute_cap"],
            p["root"],
        )
        plan = plan_release(
            p["root"], release, commit, target["build_target"], p["cuda_version"], p["keep"], p["log_dir"]
        )
        # A tag's source is not read (upstream has no tags), but a release built before says what it is.
        check_source(
            p["lineage"],
            built_lineage(read_stamp(plan["path"])[0]),
            release,
            commit,
            "the release as built (its build stamp)",
        )
        target = as_built(target, plan)
    except (ReleaseError, ProxyEnvError, LineageError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(
        changed=False,
        recorded_commit=recorded,
        moved=bool(recorded and recorded != commit),
        pinned_by_commit=by_commit,
        lineage=p["lineage"],
        branch_head=followed["branch_head"],
        branch_ahead=followed["branch_ahead"],
        build_target=target["build_target"],
        make_target_reason=target["reason"],
        without_spark_target=target["without_spark_target"],
        **plan,
    )


if __name__ == "__main__":
    main()
