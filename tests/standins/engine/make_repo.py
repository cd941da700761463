#!/usr/bin/env python3
"""STAND-IN for the ds4 engine's git repositories (test infrastructure of ds4-fleet, NOT the real engine).

Builds the bare repository `OUT/ds4.git`, the fork's, from the stand-in engine tree in `tree/` with the
fork's own files in `fork/`: one commit per release, each carrying a RELEASE file with the release's
version and flavour, an annotated tag per release and `main` on the newest. And `OUT/ds4-upstream.git`,
upstream's: the same tree without the fork's files, upstream's Makefile, and no tag at all, only commits on
`main` (one that does not build among them). Authors, committers, taggers and dates are fixed, so the
hashes depend only on the trees and the tables: re-running gives the same hashes and leaves an identical
repository alone. It also writes `OUT/ds4-tags.json` (tag -> commit), `OUT/ds4-upstream-commits.json`
(name -> commit, oldest first) and marks the repositories for `git daemon`.

    make_repo.py --out DIR
"""

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TREE = Path(__file__).resolve().parent / "tree"
# The fork's own files (its /v1/stats and /metrics), committed into the fork's releases alone.
FORK_TREE = Path(__file__).resolve().parent / "fork"
# The Makefile of each shape a release's may have, committed as its `Makefile`.
MAKEFILES = Path(__file__).resolve().parent / "makefiles"
REPO_NAME = "ds4.git"
TAGS_NAME = "ds4-tags.json"
IDENTITY = ("ds4 stand-in", "standin@ds4.invalid")
UPSTREAM_REPO_NAME = "ds4-upstream.git"
UPSTREAM_COMMITS_NAME = "ds4-upstream-commits.json"


@dataclass(frozen=True)
class Release:
    tag: str
    # "good", "wrong-answer" (fails the smoke test), "build-broken" (make fails), a speed flavour
    # ("slightly-slower", "slow-decode": see SPEED_FACTORS in tree/ds4_common.py), "spark-drops-arch"
    # (cuda-spark builds for nvcc's default arch) or "drops-arch" (every target does)
    flavour: str
    date: str  # ISO date; the commit and its tag are dated noon UTC that day
    # The shape of its Makefile (makefiles/<shape>.mk): "spark-arch" (cuda-spark names sm_121a and builds
    # the Spark cache), "spark-empty-arch" (cuda-spark passes an empty arch, as upstream 8d57664) or
    # "spark-alias" (cuda-spark is an alias of cuda-generic, CUDA_ARCH=native)
    makefile: str = "spark-arch"


RELEASES = (
    Release("v0.5.6", "good", "2026-06-12"),  # before --version existed
    Release("v0.6.3", "good", "2026-08-05"),
    Release("v0.6.5", "good", "2026-08-27"),
    Release("v0.6.5.1", "good", "2026-09-02"),  # four-part: the engine's update check cannot see it
    Release("v0.6.6", "wrong-answer", "2026-09-16"),
    Release("v0.6.7", "build-broken", "2026-09-30"),
    # Speed: good in every other way, for the activation's speed gate (ds4_common.SPEED_FACTORS).
    Release("v0.6.5.2", "slightly-slower", "2026-10-07"),  # 5% slower: within the gate's default bound
    Release("v0.6.5.3", "slow-decode", "2026-10-10"),  # decode at half speed: far beyond it
    # As the real source: `make cuda-spark` passes an empty arch, `make cuda CUDA_ARCH=` honours it.
    Release("v0.6.8", "spark-drops-arch", "2026-10-14", "spark-empty-arch"),
    # A Makefile that drops the arch on every target: it builds, for nvcc's default arch only.
    Release("v0.6.9", "drops-arch", "2026-10-28", "spark-empty-arch"),
    # The fork's October 2026 tree: the Spark cache decided at start-up, cuda-spark an alias of cuda-generic.
    Release("v0.7.0", "good", "2026-10-30", "spark-alias"),
)


@dataclass(frozen=True)
class UpstreamCommit:
    name: str  # its key in ds4-upstream-commits.json
    flavour: str  # "good" or "build-broken"
    date: str  # ISO date; the commit is dated noon UTC that day
    subject: str


# Upstream's main, untagged (engine contract: "antirez/ds4 has no tagged release"), oldest first: two
# commits that build and serve, one whose `make cuda-spark` fails as upstream main's did (issue #974), and
# the later one that builds again (as 67bd55c fixed it).
UPSTREAM_COMMITS = (
    UpstreamCommit("first", "good", "2026-10-02", "Serve DSpark with its support GGUF (--mtp-model)"),
    UpstreamCommit("second", "good", "2026-10-04", "Faster prefill on the GB10"),
    UpstreamCommit(
        "broken", "build-broken", "2026-10-06", "Tensor-parallel block context (breaks cuda-spark)"
    ),
    UpstreamCommit("fixed", "good", "2026-10-08", "Fix the cuda-spark build"),
)


def git_env(date: str) -> dict:
    """An environment that makes git's output depend on nothing of this machine or its user."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    stamp = datetime.datetime.fromisoformat(date).replace(hour=12, tzinfo=datetime.UTC)
    when = f"@{int(stamp.timestamp())} +0000"
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_AUTHOR_NAME=IDENTITY[0],
        GIT_AUTHOR_EMAIL=IDENTITY[1],
        GIT_AUTHOR_DATE=when,
        GIT_COMMITTER_NAME=IDENTITY[0],
        GIT_COMMITTER_EMAIL=IDENTITY[1],
        GIT_COMMITTER_DATE=when,
        LC_ALL="C",
    )
    return env


def git(repo: Path, *args: str, date: str = "2026-01-01", data: bytes | None = None) -> str:
    result = subprocess.run(
        ["git", f"--git-dir={repo}", *args],
        input=data,
        capture_output=True,
        env=git_env(date),
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"make_repo: git {' '.join(args)} failed: {result.stderr.decode().strip()}")
    return result.stdout.decode().strip()


def release_file(release: Release) -> bytes:
    return (
        "# STAND-IN engine release (ds4-fleet test infrastructure): written by make_repo.py, read by\n"
        "# link.py.\n"
        f"version={release.tag}\nflavour={release.flavour}\n"
    ).encode()


def upstream_release_file(commit: UpstreamCommit) -> bytes:
    # Upstream names no release: its version is its branch (guess: the real one prints none).
    return (
        "# STAND-IN upstream engine commit (ds4-fleet test infrastructure): written by make_repo.py,\n"
        "# read by link.py.\n"
        f"version=main\nflavour={commit.flavour}\nlineage=upstream\n"
    ).encode()


def tree_files(*trees: Path) -> dict[str, bytes]:
    return {
        path.name: path.read_bytes() for tree in trees for path in sorted(tree.iterdir()) if path.is_file()
    }


def init(repo: Path) -> None:
    subprocess.run(
        ["git", "init", "--quiet", "--bare", "--initial-branch=main", str(repo)],
        env=git_env("2026-01-01"),
        check=True,
    )
    # GitHub serves any reachable commit by id, which a provisioner pinning commits may rely on.
    git(repo, "config", "uploadpack.allowReachableSHA1InWant", "true")


def commit_tree(repo: Path, files: dict[str, bytes], parent: str | None, date: str, message: str) -> str:
    entries = []
    for name, content in files.items():
        blob = git(repo, "hash-object", "-w", "--no-filters", "--stdin", data=content)
        entries.append(f"100644 blob {blob}\t{name}\n")
    tree = git(repo, "mktree", data="".join(entries).encode())
    parents = ["-p", parent] if parent else []
    return git(repo, "commit-tree", tree, *parents, date=date, data=message.encode())


def build(repo: Path) -> dict[str, str]:
    """Create the fork's bare repository at `repo` and return {tag: commit}."""
    init(repo)
    files = tree_files(TREE, FORK_TREE)
    tags = {}
    parent = None
    for release in RELEASES:
        makefile = (MAKEFILES / f"{release.makefile}.mk").read_bytes()
        message = f"Release {release.tag}\n\nStand-in engine release, flavour {release.flavour}.\n"
        content = {**files, "Makefile": makefile, "RELEASE": release_file(release)}
        commit = commit_tree(repo, content, parent, release.date, message)
        git(repo, "tag", "-a", release.tag, commit, "-m", f"ds4 {release.tag} (stand-in)", date=release.date)
        tags[release.tag] = commit
        parent = commit
    git(repo, "update-ref", "refs/heads/main", parent)
    (repo / "git-daemon-export-ok").touch()
    return tags


def build_upstream(repo: Path) -> dict[str, str]:
    """Create upstream's bare repository at `repo`, untagged, and return {name: commit}, oldest first."""
    init(repo)
    files = {**tree_files(TREE), "Makefile": (MAKEFILES / "upstream.mk").read_bytes()}
    commits = {}
    parent = None
    for each in UPSTREAM_COMMITS:
        message = f"{each.subject}\n\nStand-in upstream commit, flavour {each.flavour}.\n"
        content = {**files, "RELEASE": upstream_release_file(each)}
        commits[each.name] = parent = commit_tree(repo, content, parent, each.date, message)
    git(repo, "update-ref", "refs/heads/main", parent)
    (repo / "git-daemon-export-ok").touch()
    return commits


def refs(repo: Path) -> str | None:
    if not (repo / "HEAD").is_file():
        return None
    result = subprocess.run(
        ["git", f"--git-dir={repo}", "for-each-ref", "--format=%(refname) %(objectname)"],
        capture_output=True,
        env=git_env("2026-01-01"),
        check=False,
    )
    return result.stdout.decode() if result.returncode == 0 else None


def write_if_changed(path: Path, content: str) -> None:
    if path.is_file() and path.read_text(encoding="utf-8") == content:
        return
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(content, encoding="utf-8")
    os.replace(temporary, path)


def make_one(out: Path, name: str, builder, index: str) -> tuple[dict[str, str], bool]:
    """Build OUT/NAME into a scratch directory beside it and swap it in only when the refs differ, so a
    `git daemon` serving the old repository never sees a half-built one; write its INDEX json. Returns
    (the builder's {name: commit}, changed)."""
    target = out / name
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=out))
    try:
        commits = builder(scratch / name)
        changed = refs(scratch / name) != refs(target) or not (target / "git-daemon-export-ok").exists()
        if changed:
            if target.exists():
                target.rename(scratch / "old")
            (scratch / name).rename(target)
    finally:
        shutil.rmtree(scratch)
    write_if_changed(out / index, json.dumps(commits, indent=2) + "\n")
    return commits, changed


def make_repo(out: Path) -> tuple[dict[str, str], bool]:
    """The fork's repository and upstream's. Returns (the fork's tags, whether either changed)."""
    out.mkdir(parents=True, exist_ok=True)
    tags, changed = make_one(out, REPO_NAME, build, TAGS_NAME)
    _, upstream_changed = make_one(out, UPSTREAM_REPO_NAME, build_upstream, UPSTREAM_COMMITS_NAME)
    return tags, changed or upstream_changed


def main() -> int:
    parser = argparse.ArgumentParser(description="Build the stand-in ds4 engine repositories in OUT.")
    parser.add_argument(
        "--out", required=True, type=Path, help="directory to hold the repositories and indexes"
    )
    args = parser.parse_args()
    tags, changed = make_repo(args.out.resolve())
    print(f"{args.out / REPO_NAME}, {args.out / UPSTREAM_REPO_NAME}: {'built' if changed else 'unchanged'}")
    flavours = {release.tag: release.flavour for release in RELEASES}
    makefiles = {release.tag: release.makefile for release in RELEASES}
    for tag, commit in tags.items():
        print(f"{tag:<10} {commit} {flavours[tag]} {makefiles[tag]}")
    upstream = json.loads((args.out / UPSTREAM_COMMITS_NAME).read_text(encoding="utf-8"))
    for each in UPSTREAM_COMMITS:
        print(f"upstream {each.name:<8} {upstream[each.name]} {each.flavour}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
