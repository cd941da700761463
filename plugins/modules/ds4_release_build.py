#!/usr/bin/python
"""Build an engine release beside the others: a thin shell over module_utils/_engine/release_build.py."""

from __future__ import annotations

DOCUMENTATION = r"""
module: ds4_release_build
short_description: Build a ds4 engine release into its own directory, beside the running one
description:
  - Makes C(ROOT/releases/RELEASE) the release O(release) at O(commit), built with O(build_target) by the
    CUDA O(cuda_version) toolkit's O(nvcc), unless its build stamp (C(.ds4-build.json)) already says so.
  - Builds in C(ROOT/releases/.build-RELEASE) (shallow clone of the tag, whose commit must be O(commit),
    then C(make) with the target and arguments of O(build_target), as M(ds4.fleet.ds4_release_plan) decided
    them from the release's Makefile); checks that C(ds4), C(ds4-server) and C(ds4-bench) were produced,
    answer C(--help) and hold native GPU code (SASS cubins) for the arch, as C(cuobjdump --list-elf) of the
    toolkit beside O(nvcc) lists it (a build without it is refused); records C(ds4-server --version) where
    the release has it; writes the stamp, with the cubin archs found, the make target and
    O(make_target_reason); and only then renames the build
    into place.
  - Never builds into, replaces or removes the release the C(current) or C(previous) link names; a
    release that would need it fails instead.
  - With O(build_user), the engine's own code never runs as root. The clone (as root, the only user whose
    environment holds a credential of O(repo) and the proxy of O(proxy_env)) is handed to that user, all
    but its C(.git), in a tree only it may enter; C(make) runs as that user, with no proxy variable; then
    each of its processes is ended, the tree is made root's and writable by no one else (no set-user-ID
    bits, a link to a file outside refused), and the built programs are checked as that user.
  - A credential in O(repo) (C(https://user:token@host/...)) is given to git only in its environment; it
    is in no command line, and the clone, the build log and the stamp record the URL without it.
  - Records the commit the tag resolved to in O(tags_record), which M(ds4.fleet.ds4_release_plan) holds
    later runs to.
  - A failed build leaves every release as it was and fails with a message that holds the last lines of
    the build log and its path (C(LOG_DIR/build-RELEASE.log)).
version_added: 0.1.0
attributes:
  check_mode:
    support: full
    details: Reports whether it would build, and why; builds nothing.
  diff_mode:
    support: full
    details: The stamp's release, commit, build target and CUDA version, before and after.
options:
  commit:
    description: The 40-hex commit the tag resolved to (see M(ds4.fleet.ds4_release_plan)).
    type: str
    required: true
  nvcc:
    description: The CUDA compiler; passed to make as C(NVCC), its folder put first on C(PATH).
    type: path
    required: true
  jobs:
    description: Parallel make jobs; V(0) for every CPU the build may use.
    type: int
    default: 0
  make_target_reason:
    description:
      - Why the release is built with that make target, for its stamp
        (RV(ds4.fleet.ds4_release_plan#module:make_target_reason)).
    type: str
    default: ""
  log_dir:
    description: Where the build log C(build-RELEASE.log) is written.
    type: path
    default: /var/log/ds4
  build_user:
    description:
      - The unprivileged user that runs C(make) and the built programs (the engine role makes C(ds4-build)).
        Not root, nor in root's group. Unset, they run as the module's user.
    type: str
  tags_record:
    description: The record of the commit each tag resolved to when this host built it.
    type: path
    default: /var/lib/ds4-fleet/engine-tags.json
  progress_file:
    description: >-
      A file rewritten every few seconds while the build runs, with the step and the build log's last
      line, for M(ds4.fleet.ds4_hub_wait) to print when the build runs with C(async).
    type: path
extends_documentation_fragment:
  - ds4.fleet.module
  - ds4.fleet.build
  - ds4.fleet.proxy
"""

EXAMPLES = r"""
- name: Build the engine release
  ds4.fleet.ds4_release_build:
    root: /opt/ds4
    release: v0.6.5
    commit: "{{ __ds4_engine_plan.commit }}"
    repo: https://github.com/Entrpi/ds4.git
    build_target: "{{ '12.1' | ds4.fleet.cuda_build_target }}"
    cuda_version: "13.0"
    nvcc: /usr/local/cuda/bin/nvcc
"""

RETURN = r"""
built:
  description: Whether a build ran (false when the stamp already matched, and in check mode).
  returned: success
  type: bool
path:
  description: The release's directory.
  returned: always
  type: str
reason:
  description: "Why it was built (C(not built yet), C(stamp differs: ...)), or C(up to date)."
  returned: success
  type: str
stamp:
  description: The release's build stamp (null in check mode before a first build).
  returned: success
  type: dict
  sample:
    release: v0.6.5
    commit: 0e05c4f2672023b3d6aa0cba32b1aaa8465d10b3
    build_target: {arch: sm_121, make_target: cuda, make_args: [CUDA_ARCH=sm_121]}
    cuda_version: "13.0"
    built_at: "2026-09-01T12:00:00Z"
    version_output: ds4-server v0.6.5 (cuda sm_121, CUDA 13.0)
    engine_repo: https://github.com/Entrpi/ds4.git
    make_command: make cuda CUDA_ARCH=sm_121 -j20 NVCC=/usr/local/cuda/bin/nvcc
    sass_archs: {ds4: [sm_121], ds4-server: [sm_121], ds4-bench: [sm_121]}
log_path:
  description: The build log, when a build ran or failed.
  returned: when a build ran or failed
  type: str
"""

import json  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_build import (  # noqa: E402
    BuildError,
    build_release,
    default_jobs,
)
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_plan import (  # noqa: E402
    TAGS_RECORD,
    ReleaseError,
    check_commit,
    check_release_tag,
    release_state,
    remote_of,
)
from ansible_collections.ds4.fleet.plugins.module_utils._net.proxy_env import (  # noqa: E402
    ProxyEnvError,
    apply_proxy_env,
)


def _identity(stamp):
    return json.dumps(stamp, indent=2, sort_keys=True) + "\n" if stamp else ""


def _stamp_diff(state):
    """The build stamp's fields before and after, for diff mode."""
    before = {key: state["stamp"].get(key) for key in state["wanted"]} if state["stamp"] else None
    return {
        "before_header": f"{state['path']} (build stamp)",
        "after_header": f"{state['path']} (build stamp)",
        "before": _identity(before),
        "after": _identity(state["wanted"]),
    }


def _build(module, release, commit, state, path):
    """Run the build; a failed one fails the module with its log's path."""
    p = module.params
    try:
        return build_release(
            root=p["root"],
            release=release,
            commit=commit,
            repo=p["repo"],
            build_target=state["wanted"]["build_target"],
            cuda_version=p["cuda_version"],
            nvcc=p["nvcc"],
            jobs=p["jobs"] or default_jobs(),
            log_dir=p["log_dir"],
            git=module.get_bin_path("git", required=True),
            make=module.get_bin_path("make", required=True),
            env=os.environ,
            progress_file=p["progress_file"],
            build_user=p["build_user"],
            tags_record=p["tags_record"],
            make_target_reason=p["make_target_reason"],
        )
    except BuildError as exc:
        module.fail_json(msg=str(exc), path=path, log_path=exc.log_path)
    except ReleaseError as exc:
        module.fail_json(msg=str(exc), path=path)


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "release": {"type": "str", "required": True},
            "commit": {"type": "str", "required": True},
            "repo": {"type": "str", "required": True},
            "build_target": {"type": "dict", "required": True},
            "cuda_version": {"type": "str", "required": True},
            "nvcc": {"type": "path", "required": True},
            "jobs": {"type": "int", "default": 0},
            "log_dir": {"type": "path", "default": "/var/log/ds4"},
            "progress_file": {"type": "path"},
            "build_user": {"type": "str"},
            "tags_record": {"type": "path", "default": TAGS_RECORD},
            "make_target_reason": {"type": "str", "default": ""},
            "proxy_env": {"type": "dict", "default": {}, "no_log": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    path = os.path.join(p["root"], "releases", str(p["release"]))
    try:
        # A credential in the URL is masked in everything the module returns, its invocation included.
        module.no_log_values.update(remote_of(p["repo"]).secrets)
        # The clone (its environment is built from os.environ) goes through the proxy.
        apply_proxy_env(p["proxy_env"], no_log_values=module.no_log_values)
        release = check_release_tag(p["release"])
        commit = check_commit(p["commit"])
        if commit is None:
            raise ReleaseError("the commit the release tag resolved to is required")
        state = release_state(p["root"], release, commit, p["build_target"], p["cuda_version"])
    except (ReleaseError, ProxyEnvError) as exc:
        module.fail_json(msg=str(exc), path=path)
    diff = _stamp_diff(state)
    result = {"path": state["path"], "reason": state["reason"], "stamp": state["stamp"]}
    if not state["build"]:
        module.exit_json(changed=False, built=False, msg=f"{release} is up to date", **result)
    if module.check_mode:
        module.exit_json(
            changed=True, built=False, diff=diff, msg=f"would build {release} ({state['reason']})", **result
        )
    if not os.access(p["nvcc"], os.X_OK):
        module.fail_json(msg=f"the CUDA compiler {p['nvcc']} is not an executable file", path=path)
    built = _build(module, release, commit, state, path)
    for left in built.get("cleared") or []:
        module.warn(f"an earlier build left this of the build user, now removed: {left}")
    if not built["built"]:
        # Another run built it while this one waited for the build lock.
        module.exit_json(changed=False, built=False, msg=f"{release} is up to date", **result)
    module.exit_json(
        changed=True,
        built=True,
        diff=diff,
        msg=f"built {release} ({state['reason']})",
        path=state["path"],
        reason=state["reason"],
        stamp=built["stamp"],
        log_path=built["log_path"],
    )


if __name__ == "__main__":
    main()
