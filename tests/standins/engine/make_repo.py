#!/usr/bin/env python3
"""STAND-IN for the ds4 engine's git repository (test infrastructure of ds4-fleet, NOT the real engine).

Builds the bare repository `OUT/ds4.git` from the stand-in engine tree in `tree/`: one commit per release,
each carrying a RELEASE file with the release's version and flavour, an annotated tag per release and
`main` on the newest. Authors, committers, taggers and dates are fixed, so the hashes depend only on the
tree and the release table: re-running gives the same hashes and leaves an identical repository alone.
It also writes `OUT/ds4-tags.json` (tag -> commit) and marks the repository for `git daemon`.

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
# The Makefile of each shape a release's may have, committed as its `Makefile`.
MAKEFILES = Path(__file__).resolve().parent / "makefiles"
REPO_NAME = "ds4.git"
TAGS_NAME = "ds4-tags.json"
IDENTITY = ("ds4 stand-in", "standin@ds4.invalid")


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


def tree_files() -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(TREE.iterdir()) if path.is_file()}


def build(repo: Path) -> dict[str, str]:
    """Create the bare repository at `repo` and return {tag: commit}."""
    subprocess.run(
        ["git", "init", "--quiet", "--bare", "--initial-branch=main", str(repo)],
        env=git_env("2026-01-01"),
        check=True,
    )
    # GitHub serves any reachable commit by id, which a provisioner pinning commits may rely on.
    git(repo, "config", "uploadpack.allowReachableSHA1InWant", "true")
    files = tree_files()
    tags = {}
    parent = None
    for release in RELEASES:
        entries = []
        makefile = (MAKEFILES / f"{release.makefile}.mk").read_bytes()
        for name, content in {**files, "Makefile": makefile, "RELEASE": release_file(release)}.items():
            blob = git(repo, "hash-object", "-w", "--no-filters", "--stdin", data=content)
            entries.append(f"100644 blob {blob}\t{name}\n")
        tree = git(repo, "mktree", data="".join(entries).encode())
        message = f"Release {release.tag}\n\nStand-in engine release, flavour {release.flavour}.\n"
        parents = ["-p", parent] if parent else []
        commit = git(repo, "commit-tree", tree, *parents, date=release.date, data=message.encode())
        git(repo, "tag", "-a", release.tag, commit, "-m", f"ds4 {release.tag} (stand-in)", date=release.date)
        tags[release.tag] = commit
        parent = commit
    git(repo, "update-ref", "refs/heads/main", parent)
    (repo / "git-daemon-export-ok").touch()
    return tags


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


def make_repo(out: Path) -> tuple[dict[str, str], bool]:
    """Build into a scratch directory beside the target and swap it in only when the refs differ, so a
    `git daemon` serving the old repository never sees a half-built one. Returns (tags, changed)."""
    out.mkdir(parents=True, exist_ok=True)
    target = out / REPO_NAME
    scratch = Path(tempfile.mkdtemp(prefix=".ds4.git.", dir=out))
    try:
        tags = build(scratch / REPO_NAME)
        changed = refs(scratch / REPO_NAME) != refs(target) or not (target / "git-daemon-export-ok").exists()
        if changed:
            if target.exists():
                target.rename(scratch / "old")
            (scratch / REPO_NAME).rename(target)
    finally:
        shutil.rmtree(scratch)
    write_if_changed(out / TAGS_NAME, json.dumps(tags, indent=2) + "\n")
    return tags, changed


def main() -> int:
    parser = argparse.ArgumentParser(description="Build the stand-in ds4 engine repository OUT/ds4.git.")
    parser.add_argument("--out", required=True, type=Path, help="directory to hold ds4.git and ds4-tags.json")
    args = parser.parse_args()
    tags, changed = make_repo(args.out.resolve())
    print(f"{args.out / REPO_NAME}: {'built' if changed else 'unchanged'}")
    flavours = {release.tag: release.flavour for release in RELEASES}
    makefiles = {release.tag: release.makefile for release in RELEASES}
    for tag, commit in tags.items():
        print(f"{tag:<10} {commit} {flavours[tag]} {makefiles[tag]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
