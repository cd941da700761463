"""Where ds4 engine releases live on a host, what their build stamps say, and what a run must do.

Layout under the root (ds4_root, /opt/ds4):

    releases/<tag>/              one built release: the engine's tree as built, with ds4, ds4-server and
                                 ds4-bench at its top and the build stamp .ds4-build.json
    releases/.build-<tag>/       a build in progress; renamed to releases/<tag> only once its checks pass
    current  -> releases/<tag>   the release the service runs        } both maintained by the activation
    previous -> releases/<tag>   the release current replaced         } step; read here, never written

The engine role never builds into, replaces or removes the release `current` or `previous` names.
A release is the one wanted when its stamp's release, commit, build target and CUDA version all match;
a change of any of them rebuilds it.
"""

from __future__ import annotations

import json
import os
import re
from urllib.parse import urlsplit

from ansible_collections.ds4.fleet.plugins.module_utils import ds4_redact
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_version import (
    is_release_tag,
    releases_to_prune,
    sort_releases,
)

RELEASES_DIR = "releases"
STAMP_NAME = ".ds4-build.json"
STAGING_PREFIX = ".build-"
CURRENT_LINK = "current"
PREVIOUS_LINK = "previous"
PROGRAMS = ("ds4", "ds4-server", "ds4-bench")
# What makes a built release the wanted one. built_at, version_output and engine_repo are recorded but do
# not count: a mirror serving the same commit builds the same engine.
STAMP_IDENTITY = ("release", "commit", "build_target", "cuda_version")
BUILD_TARGET_KEYS = ("arch", "make_target", "make_args")

_COMMIT = re.compile(r"[0-9a-f]{40}")


class ReleaseError(ValueError):
    """A release that cannot or must not be built; the message names the variable and the values."""


def check_release_tag(tag):
    if not is_release_tag(tag):
        raise ReleaseError(
            f"ds4_release must be an engine release tag: v and three or more numbers, like v0.6.5 or "
            f"v0.6.5.1; got {tag!r}"
        )
    return tag


def check_commit(commit):
    """A pinned commit as 40 lowercase hex digits; None or '' for no pin."""
    if commit in (None, ""):
        return None
    if not isinstance(commit, str) or not _COMMIT.fullmatch(commit.strip().lower()):
        raise ReleaseError(f"ds4_release_commit must be a full commit id, 40 hex digits; got {commit!r}")
    return commit.strip().lower()


def check_build_target(target):
    """The build as ds4.fleet.cuda_build_target gives it: {'arch', 'make_target', 'make_args'}."""
    if (
        not isinstance(target, dict)
        or sorted(target) != sorted(BUILD_TARGET_KEYS)
        or not all(isinstance(target[key], str) and target[key] for key in ("arch", "make_target"))
        or not isinstance(target["make_args"], list)
        or not all(isinstance(arg, str) for arg in target["make_args"])
    ):
        raise ReleaseError(
            "the build target must be {arch, make_target, make_args} as ds4.fleet.cuda_build_target "
            f"returns it; got {target!r}"
        )
    return {key: target[key] for key in BUILD_TARGET_KEYS}


def ls_remote_argv(git, repo, tag):
    # The peeled pattern must be asked for by name: an annotated tag's own line names the tag object,
    # and only `TAG^{}` names the commit it points at.
    return [git, "ls-remote", "--tags", repo, f"refs/tags/{tag}", f"refs/tags/{tag}^{{}}"]


def parse_ls_remote(text, tag):
    """The commit TAG names in `git ls-remote` output: the peeled one for an annotated tag, the tag's own
    for a lightweight one; None when the tag is not listed."""
    own = peeled = None
    for line in text.splitlines():
        sha, _, ref = line.strip().partition("\t")
        if ref == f"refs/tags/{tag}^{{}}":
            peeled = sha.lower()
        elif ref == f"refs/tags/{tag}":
            own = sha.lower()
    return peeled or own


def public_url(url):
    """A repository URL as it may be printed, logged and stamped: ds4_redact's rule, its userinfo as ***.

    `https://user:token@host/x.git` and `https://token@host/x.git` become `https://***@host/x.git`."""
    return ds4_redact.url(url)


def redact(text, url):
    """TEXT (a tool's output) with URL's userinfo (a password, or a token given as the user) masked."""
    try:
        parts = urlsplit(url)
        secrets = [part for part in (parts.password, parts.username) if part]
    except ValueError:
        return text
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def resolve_release(run, git, repo, tag):
    """The commit release TAG resolves to in REPO. RUN(argv) -> (rc, stdout, stderr)."""
    rc, out, err = run(ls_remote_argv(git, repo, tag))
    shown = public_url(repo)
    if rc != 0:
        raise ReleaseError(
            f"cannot list the tags of {shown} (ds4_engine_repo): git ls-remote exited {rc}: "
            f"{redact((err or out).strip(), repo)[-500:]}"
        )
    commit = parse_ls_remote(out, tag)
    if commit is None:
        raise ReleaseError(f"release tag {tag} (ds4_release) does not exist in {shown} (ds4_engine_repo)")
    return commit


def verify_pin(tag, repo, resolved, pinned):
    """Refuse a tag that resolves to a commit other than the pinned one: a moved tag must not slip in."""
    if pinned and resolved != pinned:
        raise ReleaseError(
            f"release tag {tag} in {public_url(repo)} resolves to commit {resolved}, not to "
            f"ds4_release_commit {pinned}: refusing to build it, since the tag may have been moved. Check "
            "the tag at its source, then correct ds4_release_commit (or ds4_release)."
        )


def linked_release(root, name):
    """{'path', 'target', 'release'} of the link ROOT/NAME (current, previous). release is the tag of the
    releases/<tag> directory it points at, or None: no link, or a link to anything else."""
    path = os.path.join(root, name)
    info = {"path": path, "target": None, "release": None}
    if not os.path.islink(path):
        return info
    info["target"] = os.readlink(path)
    target = os.path.realpath(path)
    releases = os.path.realpath(os.path.join(root, RELEASES_DIR))
    if os.path.dirname(target) == releases and is_release_tag(os.path.basename(target)):
        info["release"] = os.path.basename(target)
    return info


def list_releases(root):
    """(tags, foreign): directories of ROOT/releases named as release tags, and any other visible entries,
    which the role reports and never touches. Hidden entries (builds in progress) are neither."""
    try:
        names = sorted(os.listdir(os.path.join(root, RELEASES_DIR)))
    except FileNotFoundError:
        return [], []
    tags, foreign = [], []
    for name in names:
        if name.startswith("."):
            continue
        path = os.path.join(root, RELEASES_DIR, name)
        if is_release_tag(name) and os.path.isdir(path) and not os.path.islink(path):
            tags.append(name)
        else:
            foreign.append(name)
    return tags, foreign


def read_stamp(release_dir):
    """(stamp, warning): the build stamp of a release directory, or None with why it cannot be used."""
    path = os.path.join(release_dir, STAMP_NAME)
    try:
        with open(path, encoding="utf-8") as handle:
            stamp = json.load(handle)
    except FileNotFoundError:
        return None, f"{path} is missing"
    except (OSError, ValueError) as exc:
        return None, f"{path} is unreadable: {exc}"
    if not isinstance(stamp, dict):
        return None, f"{path} is not a JSON object"
    return stamp, None


def wanted_identity(release, commit, build_target, cuda_version):
    return {
        "release": release,
        "commit": commit,
        "build_target": check_build_target(build_target),
        "cuda_version": cuda_version,
    }


def _show(value):
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def stamp_changes(stamp, wanted):
    """What differs between a release's stamp and the wanted identity, as 'key: old -> new' lines."""
    return [
        f"{key}: {_show(stamp.get(key))} -> {_show(wanted[key])}"
        for key in STAMP_IDENTITY
        if stamp.get(key) != wanted[key]
    ]


def release_state(root, release, commit, build_target, cuda_version):
    """Whether RELEASE must be built, and whether it may be: the part of the plan the build repeats just
    before it starts. Raises ReleaseError when a build is due on the running or the rollback release."""
    wanted = wanted_identity(release, commit, build_target, cuda_version)
    path = os.path.join(root, RELEASES_DIR, release)
    current = linked_release(root, CURRENT_LINK)
    previous = linked_release(root, PREVIOUS_LINK)
    exists = os.path.isdir(path)
    stamp, warning = read_stamp(path) if exists else (None, None)
    changes = stamp_changes(stamp, wanted) if stamp is not None else []
    build = stamp is None or bool(changes)
    if not exists:
        reason = "not built yet"
    elif stamp is None:
        reason = f"its build stamp cannot be used ({warning})"
    else:
        reason = "stamp differs: " + "; ".join(changes) if changes else "up to date"
    role = (
        "running release (current)"
        if release == current["release"]
        else "rollback release (previous)"
        if release == previous["release"]
        else None
    )
    if build and exists and role:
        raise ReleaseError(
            f"release {release} is the {role} and must be rebuilt ({reason}), but the engine role never "
            f"rebuilds, replaces or removes the running or the rollback release in {path}. Activate "
            "another release first, or set ds4_release to a release that is neither."
        )
    return {
        "release": release,
        "commit": commit,
        "path": path,
        "wanted": wanted,
        "stamp": stamp,
        "build": build,
        "reason": reason,
        "changes": changes,
        "current": current,
        "previous": previous,
    }


def plan_release(root, release, commit, build_target, cuda_version, keep, log_dir):
    """The whole plan of a run: release_state() plus the releases present and those to remove.

    Kept: the newest KEEP releases, the running and the rollback release whatever their age, and the
    wanted release itself (pinning an older release must not build it only to remove it). The build
    logs of removed releases go with them.
    """
    state = release_state(root, release, commit, build_target, cuda_version)
    present, foreign = list_releases(root)
    after = sort_releases(set(present) | {release})
    protect = [state["current"]["release"], state["previous"]["release"], release]
    prune = releases_to_prune(after, keep, protect)
    prune_paths = []
    for tag in prune:
        prune_paths += [os.path.join(root, RELEASES_DIR, tag), build_log_path(log_dir, tag)]
    return dict(
        state,
        present=present,
        foreign=foreign,
        prune=prune,
        prune_paths=prune_paths,
        kept=[tag for tag in after if tag not in prune],
    )


def build_log_path(log_dir, release):
    return os.path.join(log_dir, f"build-{release}.log")
