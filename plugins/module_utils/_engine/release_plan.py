"""Where ds4 engine releases live on a host, what their build stamps say, and what a run must do.

Layout under the root (ds4_root, /opt/ds4):

    releases/<tag>/              one built release: the engine's tree as built, with ds4, ds4-server and
                                 ds4-bench at its top and the build stamp .ds4-build.json
    releases/.build-<tag>/       a build in progress; renamed to releases/<tag> only once its checks pass
    current  -> releases/<tag>   the release the service runs        } both maintained by the activation
    previous -> releases/<tag>   the release current replaced         } step; read here, never written

The activation also records the last release that passed its smoke test, its rollback target
(module_utils/_engine/last_good.py, /var/lib/ds4-fleet/last-good.json). The engine role never builds into,
replaces or removes the release `current` or `previous` names, nor that last good one.
A release is the one wanted when its stamp's release, commit, build target and CUDA version all match;
a change of any of them rebuilds it. Which make target a release gets is read from its own Makefile at the
commit its tag resolved to (read_makefile, then _engine/make_target.py), before anything is built.
The running and the rollback releases are never rebuilt: one whose stamp differs from the wanted build only
in its make target (a GB10 built with `make cuda` before the role read the Makefile) is kept as built, and
the plan says so.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
from urllib.parse import urlsplit

from ansible_collections.ds4.fleet.plugins.module_utils._common import redact as ds4_redact
from ansible_collections.ds4.fleet.plugins.module_utils._common.commit import commit_id
from ansible_collections.ds4.fleet.plugins.module_utils._engine.cuda_arch import arch_for_compute_cap
from ansible_collections.ds4.fleet.plugins.module_utils._engine.git_remote import RemoteError, git_remote
from ansible_collections.ds4.fleet.plugins.module_utils._engine.last_good import RECORD_PATH, recorded_release
from ansible_collections.ds4.fleet.plugins.module_utils._engine.make_target import (
    SPARK_TARGET,
    MakeTargetError,
    choose,
    is_gb10,
)
from ansible_collections.ds4.fleet.plugins.module_utils._spark.no_follow import replace_file
from ansible_collections.ds4.fleet.plugins.module_utils._spark.version import (
    is_release_tag,
    releases_to_prune,
    sort_releases,
)

RELEASES_DIR = "releases"
STAMP_NAME = ".ds4-build.json"
# {tag: {"commit", "recorded_at"}}: the commit each tag resolved to when this host built it, kept when the
# release is pruned; a later run refuses a tag that resolves elsewhere. Root's state, beside the record of
# the last finished run.
TAGS_RECORD = "/var/lib/ds4-fleet/engine-tags.json"
STAGING_PREFIX = ".build-"
CURRENT_LINK = "current"
PREVIOUS_LINK = "previous"
PROGRAMS = ("ds4", "ds4-server", "ds4-bench")
# What makes a built release the wanted one. built_at, version_output and engine_repo are recorded but do
# not count: a mirror serving the same commit builds the same engine.
STAMP_IDENTITY = ("release", "commit", "build_target", "cuda_version")
BUILD_TARGET_KEYS = ("arch", "make_target", "make_args")


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
    pinned = commit_id(commit.strip()) if isinstance(commit, str) else None
    if pinned is None:
        raise ReleaseError(f"ds4_release_commit must be a full commit id, 40 hex digits; got {commit!r}")
    return pinned


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
        sha, _tab, ref = line.strip().partition("\t")
        if ref == f"refs/tags/{tag}^{{}}":
            peeled = sha.lower()
        elif ref == f"refs/tags/{tag}":
            own = sha.lower()
    return peeled or own


def public_url(url):
    """A repository URL as it may be printed, logged and stamped: _common.redact's rule, its userinfo as ***.

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


def remote_of(repo):
    """The GitRemote of REPO (module_utils/_engine/git_remote.py): every git command goes through it."""
    try:
        return git_remote(repo)
    except RemoteError as exc:
        raise ReleaseError(str(exc)) from None


def resolve_release(run, git, repo, tag, base_env=None):
    """The commit release TAG resolves to in REPO. RUN(argv, environ_update=) -> (rc, stdout, stderr);
    a credential in REPO goes only into the environment, never into argv."""
    remote = remote_of(repo)
    env = remote.config_env(os.environ if base_env is None else base_env)
    rc, out, err = run(ls_remote_argv(git, remote.url, tag), environ_update=env)
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


def read_makefile(run, git, repo, tag, commit, root=None, base_env=None):
    """The text of the Makefile at the top of COMMIT, the commit TAG resolved to; None when it has none.

    Read from git, never run: from the .git of ROOT/releases/TAG when that clone holds COMMIT (root's
    own, never handed to the build user), else from a shallow fetch of the tag into a scratch repository
    that is removed after. RUN(argv, environ_update=) -> (rc, stdout, stderr).
    """
    if root:
        local = os.path.join(root, RELEASES_DIR, tag, ".git")
        if os.path.isdir(local) and not os.path.islink(local):
            rc, out, _err = run([git, "--git-dir", local, "cat-file", "blob", f"{commit}:Makefile"])
            if rc == 0:
                return out
    remote = remote_of(repo)
    env = remote.config_env(os.environ if base_env is None else base_env)
    scratch = tempfile.mkdtemp(prefix="ds4-makefile-")
    try:
        rc, _out, err = run([git, "init", "--quiet", "--bare", scratch])
        if rc == 0:
            fetch = [git, "--git-dir", scratch, "fetch", "--quiet", "--depth", "1", "--no-tags", remote.url]
            rc, _out, err = run([*fetch, f"refs/tags/{tag}"], environ_update=env)
        if rc != 0:
            raise ReleaseError(
                f"cannot fetch release tag {tag} of {public_url(repo)} (ds4_engine_repo) to read its "
                f"Makefile before the build: git exited {rc}: {redact(err.strip(), repo)[-500:]}"
            )
        rc, fetched, _err = run([git, "--git-dir", scratch, "rev-parse", "FETCH_HEAD^{commit}"])
        if rc != 0 or fetched.strip().lower() != commit:
            raise ReleaseError(
                f"release tag {tag} of {public_url(repo)} was at commit {fetched.strip() or '(unknown)'} "
                f"when its Makefile was read, not at {commit}, the commit it resolved to: the tag moved "
                "meanwhile"
            )
        rc, out, _err = run([git, "--git-dir", scratch, "cat-file", "blob", f"{commit}:Makefile"])
        return out if rc == 0 else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def choose_target(run, git, repo, tag, commit, base, make_targets, compute_cap=None, root=None):
    """The make target RELEASE is built with ({'build_target', 'reason', 'without_spark_target'}):
    _engine.make_target.choose() on its Makefile, read only where it decides (a GB10, or a target the
    operator named in MAKE_TARGETS for BASE's arch). COMPUTE_CAP is the building host's GPU's."""
    base = check_build_target(base)
    if not isinstance(make_targets, dict):
        raise ReleaseError(
            f"ds4_engine_make_targets must be a mapping of arch to target; got {make_targets!r}"
        )
    chosen = make_targets.get(base["arch"])
    try:
        gpu_arch = arch_for_compute_cap(compute_cap) if compute_cap not in (None, "") else None
    except ValueError:
        gpu_arch = None
    text = None
    if chosen or is_gb10(base["arch"]):
        text = read_makefile(run, git, repo, tag, commit, root)
    try:
        return choose(base, text, chosen, gpu_arch)
    except MakeTargetError as exc:
        raise ReleaseError(f"release {tag} (commit {commit}): {exc}") from None


def as_built(target, plan):
    """TARGET (choose_target's) as the plan leaves it: the stamp's own build where the running or a rollback
    release is kept as built with another make target."""
    if not plan.get("kept_as_built"):
        return target
    built = plan["stamp"]["build_target"]
    why = plan["stamp"].get("make_target_reason") or "built before the role read make targets from Makefiles"
    return {
        "build_target": built,
        "reason": f"{plan['reason']} ({why})",
        "without_spark_target": is_gb10(built["arch"]) and built["make_target"] != SPARK_TARGET,
    }


def verify_pin(tag, repo, resolved, pinned):
    """Refuse a tag that resolves to a commit other than the pinned one: a moved tag must not slip in."""
    if pinned and resolved != pinned:
        raise ReleaseError(
            f"release tag {tag} in {public_url(repo)} resolves to commit {resolved}, not to "
            f"ds4_release_commit {pinned}: refusing to build it, since the tag may have been moved. Check "
            "the tag at its source, then correct ds4_release_commit (or ds4_release)."
        )


def recorded_commit(root, tag, record_path):
    """(commit, where) this host recorded for TAG when it built it: from RECORD_PATH, else from the build
    stamp of releases/TAG (a host built before the record existed); (None, None) when neither."""
    entry = read_tags_record(record_path).get(tag)
    if isinstance(entry, dict) and isinstance(entry.get("commit"), str):
        return entry["commit"], f"{record_path}, {entry.get('recorded_at') or 'an earlier run'}"
    stamp, _warning = read_stamp(os.path.join(root, RELEASES_DIR, tag))
    if stamp and stamp.get("release") == tag and isinstance(stamp.get("commit"), str):
        return stamp["commit"], f"the build stamp of {os.path.join(root, RELEASES_DIR, tag)}"
    return None, None


def verify_unmoved(tag, repo, resolved, recorded, where, pinned, accept):
    """Refuse a tag that resolves to another commit than the one this host built it from, unless the
    operator accepted that (ds4_release_accept_moved_tag) or pinned the new commit (ds4_release_commit)."""
    if not recorded or recorded == resolved or accept or pinned == resolved:
        return
    raise ReleaseError(
        f"release tag {tag} in {public_url(repo)} now resolves to commit {resolved}, but it resolved to "
        f"commit {recorded} when this host built it ({where}): refusing to build it, since the tag was "
        "moved. Check the tag at its source; to build the new commit, set ds4_release_accept_moved_tag: "
        "true for one run, or pin it with ds4_release_commit."
    )


def read_tags_record(path):
    """The record of the commits tags resolved to; {} when absent or unreadable, never read through a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def record_tag(path, tag, commit, now=None):
    """Write in the record at PATH that TAG resolved to COMMIT (replaced whole, never through a link; its
    directory made root's alone when missing)."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    record = read_tags_record(path)
    # Modules run on the host's python3, 3.10 on Ubuntu 22.04: no datetime.UTC there.
    when = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: UP017
    record[tag] = {"commit": commit, "recorded_at": when}
    replace_file(path, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8"), 0o644)


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


def _make_line(build_target):
    return " ".join([build_target.get("make_target", "?"), *build_target.get("make_args", [])])


def _target_only(stamp, wanted):
    """Whether STAMP differs from WANTED in its make target alone, for the same arch."""
    built = stamp.get("build_target") if stamp else None
    if not isinstance(built, dict) or built.get("arch") != wanted["build_target"]["arch"]:
        return False
    return [key for key in STAMP_IDENTITY if stamp.get(key) != wanted[key]] == ["build_target"]


def release_state(root, release, commit, build_target, cuda_version, last_good_record=RECORD_PATH):
    """Whether RELEASE must be built, and whether it may be: the part of the plan the build repeats just
    before it starts. Raises ReleaseError when a build is due on the running or a rollback release (the
    one current replaced, and the last good one LAST_GOOD_RECORD names)."""
    wanted = wanted_identity(release, commit, build_target, cuda_version)
    path = os.path.join(root, RELEASES_DIR, release)
    current = linked_release(root, CURRENT_LINK)
    previous = linked_release(root, PREVIOUS_LINK)
    last_good = recorded_release(root, last_good_record)
    exists = os.path.isdir(path)
    stamp, warning = read_stamp(path) if exists else (None, None)
    changes = stamp_changes(stamp, wanted) if stamp is not None else []
    build = stamp is None or bool(changes)
    kept = False
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
        else "rollback release (the last that passed its smoke test)"
        if release == last_good
        else None
    )
    if build and exists and role and _target_only(stamp, wanted):
        # Built with another make target (a GB10 built with `make cuda` before the role read its Makefile):
        # it still carries native code for its arch, so it stays as it is; the next release gets the target.
        build, kept = False, True
        reason = (
            f"kept as built (make {_make_line(stamp['build_target'])}), not rebuilt with make "
            f"{_make_line(wanted['build_target'])}: it is the {role}, never rebuilt in place"
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
        "kept_as_built": kept,
        "reason": reason,
        "changes": changes,
        "current": current,
        "previous": previous,
        "last_good": last_good,
    }


def plan_release(
    root, release, commit, build_target, cuda_version, keep, log_dir, last_good_record=RECORD_PATH
):
    """The whole plan of a run: release_state() plus the releases present and those to remove.

    Kept: the newest KEEP releases, the running and the rollback releases (previous, and the last that
    passed its smoke test) whatever their age, and the wanted release itself (pinning an older release must
    not build it only to remove it). The build logs of removed releases go with them.
    """
    state = release_state(root, release, commit, build_target, cuda_version, last_good_record)
    present, foreign = list_releases(root)
    after = sort_releases(set(present) | {release})
    protect = [state["current"]["release"], state["previous"]["release"], state["last_good"], release]
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
