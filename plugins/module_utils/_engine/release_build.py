"""Build one ds4 engine release beside the others, so that nothing but a finished, checked release appears.

The release is cloned at its tag into a hidden staging directory (releases/.build-<tag>), its commit is
checked against the one the tag resolved to, it is built with make, its programs must answer `--help`
and hold native GPU code for the arch built for (module_utils/_engine/cubin.py), and its stamp is written;
only then is it renamed to releases/<tag>, and the commit the tag resolved to is recorded (the tags
record, ds4_release_plan.TAGS_RECORD).

The engine's own code (its Makefile, the programs it builds) is not trusted with root. Given a build
user, the clone (by root, whose environment alone holds the repository's credential) is handed to that
user, except its .git, and make runs as that user in a tree only it may enter; then every process of
the user is ended, the tree is made root's and writable by no one else, and the checks of the built
programs run as that user again, read-only. Before and after each build, nothing of that user remains: no
process, cron or at job, nor file in a shared directory (_engine.build_user.clear); what an earlier build
left is named in the log and the result. A failure at any step removes the
staging directory and leaves every release, `current` and `previous` as they were. Every step's
command and output go to one build log, whose last lines the error carries. Where a progress file is
given, every step rewrites it at least every PROGRESS_EVERY seconds (the ds4_hub_wait action prints it).

Builds on one host take turns through an flock on /run/ds4-fleet/build.lock, a file of root's alone that no
other user can open to hold it (_common.flock), which also makes it safe to clear what an interrupted build
left behind; a build that waited BUILD_LOCK_WAIT for it fails naming the holder.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import time

from ansible_collections.ds4.fleet.plugins.module_utils._common.flock import LOCK_DIR, LockBusy, held
from ansible_collections.ds4.fleet.plugins.module_utils._engine import build_user as ds4_build_user
from ansible_collections.ds4.fleet.plugins.module_utils._engine.cubin import (
    CubinError,
    check_program,
    cuobjdump_for,
)
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_plan import (
    PROGRAMS,
    RELEASES_DIR,
    STAGING_PREFIX,
    STAMP_NAME,
    ReleaseError,
    build_log_path,
    public_url,
    record_tag,
    redact,
    release_state,
    remote_of,
)
from ansible_collections.ds4.fleet.plugins.module_utils._net.proxy_env import without_proxy

LOCK_NAME = "build.lock"
# A build takes minutes, an hour on a slow host: a longer hold is no build of ours.
BUILD_LOCK_WAIT = 2 * 3600
# A release being replaced (rebuilt with a new stamp) is moved aside under this prefix, then removed.
RETIRING_PREFIX = ".old-"
LOG_TAIL_LINES = 25
# `--help` and `--version` print and exit at once; a program that hangs is a broken build.
CHECK_TIMEOUT = 120
# How often a running step rewrites the progress file; well within the 30 s an operator may wait for a line.
PROGRESS_EVERY = 5
# Modules run on the host's python3, which is 3.10 on Ubuntu 22.04 (DGX OS 6): no datetime.UTC there.
_UTC = datetime.timezone.utc  # noqa: UP017


class BuildError(ReleaseError):
    """A build that failed; carries the build log's path and last lines."""

    def __init__(self, message, log_path, log_tail):
        super().__init__(message)
        self.log_path = log_path
        self.log_tail = log_tail


class _StepFailed(Exception):
    pass


def make_argv(make, build_target, jobs, nvcc):
    """`make cuda-spark -jN` or `make cuda CUDA_ARCH=sm_NNN -jN` (the plan's choice, from the release's
    Makefile: module_utils/_engine/make_target.py). NVCC on the
    command line overrides any assignment in the Makefile, so the toolkit the host facts found is the
    one that compiles, whether or not its bin/ is on PATH."""
    return [make, build_target["make_target"], *build_target["make_args"], f"-j{jobs}", f"NVCC={nvcc}"]


def build_env(nvcc, base):
    """The environment of every build step: the toolkit's bin/ first on PATH (the Makefile may call
    other CUDA tools by name), the C locale for readable logs, and no prompt from git or the engine."""
    env = dict(base)
    env["PATH"] = os.pathsep.join([os.path.dirname(nvcc), env.get("PATH") or "/usr/bin:/bin"])
    env.update(LC_ALL="C", LANG="C", GIT_TERMINAL_PROMPT="0", DS4_NO_UPDATE_CHECK="1")
    return env


def default_jobs():
    """The CPUs this process may use (a cgroup or taskset may allow fewer than the machine has)."""
    return len(os.sched_getaffinity(0))


def log_tail(path, lines=LOG_TAIL_LINES):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().splitlines()[-lines:]
    except OSError:
        return []


def _duration(seconds):
    seconds = int(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


class _Progress:
    """The progress file of a build: one JSON record, {state, updated, message}, rewritten in place."""

    def __init__(self, path, release, log_path, clock=time.monotonic):
        self.path = path
        self.release = release
        self.log_path = log_path
        self.clock = clock
        self.started = clock()
        self.step = "starting"

    def write(self, step=None):
        if step is not None:
            self.step = step
        if not self.path:
            return
        last = log_tail(self.log_path, 1)
        message = f"building {self.release}, {_duration(self.clock() - self.started)} in: {self.step}"
        if last:
            message += f"; last log line: {last[0][:200]}"
        record = {"state": "building", "updated": time.time(), "message": message}
        temporary = self.path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        os.replace(temporary, self.path)


class _Log:
    """The build log: each command is written before it runs, then its output and exit status.

    `repo` is the repository URL, whose password (if any) is masked in every line the log and the
    progress record say themselves."""

    def __init__(self, handle, env, progress, repo=""):
        self.handle = handle
        self.env = env
        self.progress = progress
        self.repo = repo

    def note(self, text):
        self.handle.write(f"== {redact(text, self.repo)}\n")
        self.handle.flush()

    def _started(self, argv):
        self.note("$ " + " ".join(argv))
        self.progress.write(redact(f"`{' '.join(argv)}`", self.repo))

    def _env(self, env, account):
        """The environment of a step: the engine's code, run as the build user, is given no proxy (its
        login is root's, for the clone)."""
        env = self.env if env is None else env
        return env if account is None else without_proxy(env)

    def run(self, argv, cwd, timeout=None, env=None, account=None):
        self._started(argv)
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=self._env(env, account),
                stdin=subprocess.DEVNULL,
                stdout=self.handle,
                stderr=subprocess.STDOUT,
                **_as(account),
            )
        except OSError as exc:
            who = f" as {account.name}" if account else ""
            self.note(f"cannot start{who}: {exc}")
            raise _StepFailed(f"`{' '.join(argv)}` could not start{who}: {exc}") from None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = PROGRESS_EVERY if deadline is None else min(PROGRESS_EVERY, deadline - time.monotonic())
            try:
                rc = proc.wait(timeout=max(wait, 0))
                break
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() >= deadline:
                    proc.kill()
                    proc.wait()
                    self.note(f"no exit within {timeout} s")
                    raise _StepFailed(f"`{' '.join(argv)}` did not exit within {timeout} s") from None
                self.progress.write()
        self.note(f"exit {rc}")
        return rc

    def capture(self, argv, cwd, timeout=None, account=None):
        self._started(argv)
        try:
            proc = subprocess.run(
                argv,
                cwd=cwd,
                env=self._env(None, account),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                check=False,
                **_as(account),
            )
        except subprocess.TimeoutExpired:
            self.note(f"no exit within {timeout} s")
            raise _StepFailed(f"`{' '.join(argv)}` did not exit within {timeout} s") from None
        self.handle.write(proc.stdout + proc.stderr)
        self.note(f"exit {proc.returncode}")
        return proc.returncode, proc.stdout


class BuildAccount:
    """The unprivileged user the engine's code runs as: name, uid, gid."""

    def __init__(self, name):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise ReleaseError(f"the build user {name} does not exist") from None
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise ReleaseError(f"the build user {name} must not be root nor in root's group")
        self.name, self.uid, self.gid = name, entry.pw_uid, entry.pw_gid


def check_reachable(path, account):
    """Refuse PATH when ACCOUNT may not pass through one of its directories (root passes anywhere, so the
    build would fail only once make runs, on a path it cannot open)."""
    current = "/"
    for part in [""] + os.path.abspath(path).strip("/").split("/"):
        current = os.path.join(current, part) if part else current
        info = os.stat(current)
        if info.st_uid == account.uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == account.gid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            raise ReleaseError(
                f"the build user {account.name} may not pass through {current} (mode "
                f"{stat.S_IMODE(info.st_mode):04o}, {_owner(info)}), on the way to {path}: give others "
                "the x permission on it, or set ds4_root elsewhere"
            )


def _owner(info):
    try:
        return f"owner {pwd.getpwuid(info.st_uid).pw_name}"
    except KeyError:
        return f"owner uid {info.st_uid}"


def _as(account):
    """subprocess arguments that run a command as ACCOUNT (no other group), files made 0644/0755."""
    if account is None:
        return {}
    return {"user": account.uid, "group": account.gid, "extra_groups": [], "umask": 0o022}


def end_processes_of(account):
    """Kill every process ACCOUNT runs: kill(-1) from a child that became that user reaches each process
    whose real or saved user it is (a daemon a Makefile left, or one started through a set-user-ID copy)
    and nothing else."""
    child = os.fork()
    if child == 0:  # pragma: no cover - the child exits at once, before coverage could write
        try:
            os.setgroups([])
            os.setgid(account.gid)
            os.setuid(account.uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        finally:
            os._exit(0)
    os.waitpid(child, 0)


def _walk_entries(top):
    """(directory fd, name, lstat, inside .git) of every entry under TOP, never through a link."""
    git = os.path.join(top, ".git")
    for dirpath, dirnames, filenames, dirfd in os.fwalk(top, follow_symlinks=False):
        inside = dirpath == git or dirpath.startswith(git + os.sep)
        for name in dirnames + filenames:
            info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
            yield dirfd, name, info, inside or (dirpath == top and name == ".git")


def hand_over(staging, account):
    """Give the fresh clone to the build user, all but its .git (the clone's configuration, which no
    later git command as root may find changed); the top only that user may enter. Returns the identity
    of the .git directory, which seal() requires to be the same."""
    for dirfd, name, _lstat, in_git in _walk_entries(staging):
        if not in_git:
            os.chown(name, account.uid, account.gid, dir_fd=dirfd, follow_symlinks=False)
    os.chown(staging, account.uid, account.gid, follow_symlinks=False)
    os.chmod(staging, 0o700)
    git = os.stat(os.path.join(staging, ".git"), follow_symlinks=False)
    return git.st_dev, git.st_ino


def seal(staging, account, git):
    """Make the built tree root's and writable by no one else, with no set-user-ID or set-group-ID bit,
    once no process of the build user is left. The top is taken from the user first, so that nothing
    started afterwards reaches the tree by its path; then the user's processes are ended once more.
    Outside .git, every entry must be the build user's: anything else is a link it made to a file
    elsewhere, which the chown would hand to root."""
    end_processes_of(account)
    os.chown(staging, 0, 0, follow_symlinks=False)
    os.chmod(staging, 0o700)
    end_processes_of(account)
    try:
        found = os.stat(os.path.join(staging, ".git"), follow_symlinks=False)
    except FileNotFoundError:
        found = None
    if found is None or (found.st_dev, found.st_ino) != git:
        raise _StepFailed(f"the build replaced or moved {staging}/.git, the clone's own: refused")
    for dirfd, name, info, in_git in _walk_entries(staging):
        if not in_git and info.st_uid != account.uid:
            raise _StepFailed(
                f"the build left {name} in {staging} owned by uid {info.st_uid}, not by the build user "
                f"{account.name}: a link to a file outside its tree, refused"
            )
        os.chown(name, 0, 0, dir_fd=dirfd, follow_symlinks=False)
        if not stat.S_ISLNK(info.st_mode):
            os.chmod(name, stat.S_IMODE(info.st_mode) & ~0o7022, dir_fd=dirfd)
    # Readable again, for the checks as the build user and for the service.
    os.chmod(staging, 0o755)


def _open_log(path):
    """The build log, written anew: a link or another file at its name is replaced, never followed."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    return os.fdopen(fd, "w", encoding="utf-8")


@contextlib.contextmanager
def _locked(path):
    try:
        with held(path, "the build lock", BUILD_LOCK_WAIT):
            yield
    except LockBusy as exc:
        raise ReleaseError(f"{exc}: another build on this host") from exc


def _remove_leftovers(releases):
    """Staging and retiring directories of an interrupted build; only called under the build lock."""
    for name in os.listdir(releases):
        if name.startswith((STAGING_PREFIX, RETIRING_PREFIX)):
            shutil.rmtree(os.path.join(releases, name), ignore_errors=True)


def _build_in(staging, log, *, release, commit, repo, build_target, nvcc, jobs, git, make, account):
    """Clone, build and check RELEASE in STAGING; returns (make command, version output or None,
    {program: the archs of its cubins}). With ACCOUNT, the engine's code runs as that user only."""
    remote = remote_of(repo)
    clone = [
        git,
        "-c",
        "advice.detachedHead=false",
        "clone",
        "--depth",
        "1",
        "--branch",
        release,
        remote.url,
        staging,
    ]
    # The credential, if any, in git's environment alone: the clone records the URL without it.
    rc = log.run(clone, cwd="/", env=remote.env(log.env))
    if rc != 0:
        raise _StepFailed(f"cloning tag {release} of {public_url(repo)} failed (git exited {rc})")
    rc, head = log.capture([git, "-C", staging, "rev-parse", "HEAD"], cwd=staging)
    head = head.strip().lower()
    if rc != 0 or head != commit:
        raise _StepFailed(
            f"the clone of tag {release} is at commit {head or '(unknown)'}, not at {commit}, the commit "
            "the tag resolved to before the build: the tag moved meanwhile"
        )
    git_dir = None
    if account is not None:
        end_processes_of(account)
        git_dir = hand_over(staging, account)
        log.note(f"building as {account.name} (uid {account.uid}), in a tree only it may enter")
    argv = make_argv(make, build_target, jobs, nvcc)
    # A home the build user may write (root's is not), for tools that keep a cache there.
    env = log.env if account is None else dict(log.env, HOME=staging)
    rc = log.run(argv, cwd=staging, env=env, account=account)
    if account is not None:
        seal(staging, account, git_dir)
        log.note(f"the tree is root's now; the checks run as {account.name}")
    if rc != 0:
        raise _StepFailed(f"`{' '.join(argv)}` exited {rc}")
    try:
        return (argv, *_check_programs(staging, log, build_target, nvcc, account))
    finally:
        if account is not None:
            end_processes_of(account)


def _is_regular_file(path):
    try:
        return stat.S_ISREG(os.stat(path, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _check_programs(staging, log, build_target, nvcc, account):
    for program in PROGRAMS:
        path = os.path.join(staging, program)
        # A link would let whatever it points at, outside the sealed tree, change the engine later.
        if not (_is_regular_file(path) and os.access(path, os.X_OK)):
            raise _StepFailed(f"the build did not produce the executable {program}")
        rc = log.run([path, "--help"], cwd=staging, timeout=CHECK_TIMEOUT, account=account)
        if rc != 0:
            raise _StepFailed(f"the built {program} --help exited {rc}")
    sass = {}
    for program in PROGRAMS:
        try:
            sass[program] = check_program(
                lambda argv: log.capture(argv, cwd=staging, timeout=CHECK_TIMEOUT, account=account),
                cuobjdump_for(nvcc),
                os.path.join(staging, program),
                build_target["arch"],
            )
        except CubinError as exc:
            log.note(str(exc))
            raise _StepFailed(str(exc)) from None
    # --version exists only in newer releases (older ones refuse it as an unknown option): recorded
    # where it answers, never required.
    server = os.path.join(staging, "ds4-server")
    rc, out = log.capture([server, "--version"], cwd=staging, timeout=CHECK_TIMEOUT, account=account)
    lines = out.strip().splitlines()
    return (lines[0] if rc == 0 and lines else None), sass


def _swap_in(staging, target, release):
    """Put the checked build in place; a release it replaces (never current nor previous) goes."""
    if os.path.lexists(target):
        retiring = os.path.join(os.path.dirname(target), RETIRING_PREFIX + release)
        os.rename(target, retiring)
        os.rename(staging, target)
        shutil.rmtree(retiring)
    else:
        os.rename(staging, target)


def _build_and_stamp(staging, log, wanted, now, make_target_reason="", **build):
    """Build into `staging` and write its stamp there: the wanted build, and what the build made."""
    make_command, version_output, sass = _build_in(staging, log, **build)
    stamp = dict(
        wanted,
        built_at=(now or datetime.datetime.now(_UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        version_output=version_output,
        # The URL git was given: no user name or password in it, whatever ds4_engine_repo holds.
        engine_repo=remote_of(build["repo"]).url,
        make_command=" ".join(make_command),
        # The make target and why it was chosen (a GB10 built without cuda-spark says why here); recorded,
        # not part of the identity: the target itself is, in build_target.
        make_target=wanted["build_target"]["make_target"],
        make_target_reason=make_target_reason,
        # What cuobjdump found: the native GPU code each program carries.
        sass_archs=sass,
    )
    # Never through a link the build may have left at its name.
    path = os.path.join(staging, STAMP_NAME)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as stamp_file:
        json.dump(stamp, stamp_file, indent=2, sort_keys=True)
        stamp_file.write("\n")
    os.chmod(staging, 0o755)
    return stamp


def _build_failed(release, exc, log_path):
    tail = log_tail(log_path)
    return BuildError(
        f"building release {release} failed: {exc}. The running release and every other release "
        f"are untouched. Last {len(tail)} lines of the build log {log_path}:\n" + "\n".join(tail),
        log_path,
        tail,
    )


def build_release(
    *,
    root,
    release,
    commit,
    repo,
    build_target,
    cuda_version,
    nvcc,
    jobs,
    log_dir,
    git,
    make,
    env,
    now=None,
    progress_file=None,
    build_user=None,
    tags_record=None,
    make_target_reason="",
    lock_dir=None,
):
    """Build RELEASE at COMMIT into ROOT/releases/RELEASE unless its stamp already matches; with
    BUILD_USER, the engine's code (make, the built programs) runs as that unprivileged user; with
    TAGS_RECORD, the commit the tag resolved to is recorded there; builds take turns through the build
    lock in LOCK_DIR (_common.flock's /run/ds4-fleet unless given).

    Returns {'built': bool, 'state': release_state(), 'stamp': the release's stamp, 'log_path'}.
    Raises ReleaseError when the release is the running or rollback one and would need a rebuild, and
    BuildError (with the log's tail) when a step fails.
    """
    remote = remote_of(repo)
    account = BuildAccount(build_user) if build_user else None
    releases = os.path.join(root, RELEASES_DIR)
    os.makedirs(releases, mode=0o755, exist_ok=True)
    if account is not None:
        check_reachable(releases, account)
    os.makedirs(log_dir, mode=0o755, exist_ok=True)
    log_path = build_log_path(log_dir, release)
    with _locked(os.path.join(lock_dir or LOCK_DIR, LOCK_NAME)):
        # Checked again under the lock: another run may have built it, or activated it, meanwhile.
        state = release_state(root, release, commit, build_target, cuda_version)
        if not state["build"]:
            return {"built": False, "state": state, "stamp": state["stamp"], "log_path": None}
        _remove_leftovers(releases)
        staging = os.path.join(releases, STAGING_PREFIX + release)
        cleared = []
        try:
            # 0640, created afresh (never through a link left at its name): git and make may echo what
            # the repository URL or the environment holds.
            with _open_log(log_path) as handle:
                log = _Log(handle, build_env(nvcc, env), _Progress(progress_file, release, log_path), repo)
                log.note(
                    f"ds4 engine release {release} (commit {commit}) from {remote.url}, {state['reason']}"
                )
                if make_target_reason:
                    log.note(f"make {build_target['make_target']}: {make_target_reason}")
                if account is not None:
                    cleared = _clear_build_user(account)
                    if cleared:
                        log.note(
                            f"an earlier build left, as {account.name}, now removed: {'; '.join(cleared)}"
                        )
                stamp = _build_and_stamp(
                    staging,
                    log,
                    state["wanted"],
                    now,
                    make_target_reason,
                    release=release,
                    commit=commit,
                    repo=repo,
                    build_target=build_target,
                    nvcc=nvcc,
                    jobs=jobs,
                    git=git,
                    make=make,
                    account=account,
                )
                try:
                    # The last look before the swap: an activation may have made it current meanwhile.
                    release_state(root, release, commit, build_target, cuda_version)
                except ReleaseError as exc:
                    raise _StepFailed(str(exc)) from None
                log.note(f"checks passed; moving {staging} to {state['path']}")
        except _StepFailed as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise _build_failed(release, exc, log_path) from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            if account is not None:
                _clear_build_user(account)
        _swap_in(staging, state["path"], release)
        # What the tag resolved to, kept after the release is pruned: a later run refuses the tag if it
        # resolves elsewhere (ds4_release_plan.verify_unmoved).
        if tags_record:
            record_tag(tags_record, release, commit, now)
    return {"built": True, "state": state, "stamp": stamp, "log_path": log_path, "cleared": cleared}


# A process that forks while it is killed may outlive one round.
CLEAR_ROUNDS = 5


def _clear_build_user(account):
    """Nothing of ACCOUNT left: its processes ended, its jobs and shared files removed; what was found."""
    found = ds4_build_user.clear(account, end_processes_of)
    for _round in range(CLEAR_ROUNDS):
        if not ds4_build_user.processes_of(account.uid):
            return found
        end_processes_of(account)
    raise ReleaseError(
        f"processes of the build user {account.name} outlived {CLEAR_ROUNDS} rounds of SIGKILL: "
        + "; ".join(ds4_build_user.processes_of(account.uid))
    )
