"""Which commit a git checkout on a host is at (the shell installer's ~/code/ds4), as git itself says.

git runs as the checkout's owner: a repository's own configuration can name programs for git to run,
so root never runs git in a folder another user owns (git's safe.directory refuses it for that reason).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

# RUN(argv) -> (rc, stdout, stderr), as AnsibleModule.run_command. For the type checker only: the hosts'
# Pythons need not subscript Callable.
if TYPE_CHECKING:
    from collections.abc import Callable

    Run = Callable[[list[str]], tuple[int, str, str]]


def git_command(git: str, path: str, owner: tuple[int, int] | None, setpriv: str | None) -> list[str] | None:
    """The start of a git command in PATH, run as OWNER (uid, gid) when that is not this process's user;
    None when it cannot be (another user's checkout, and no setpriv to become them)."""
    base = [git, "-C", path]
    if owner is None or owner[0] == os.geteuid():
        return base
    if setpriv is None:
        return None
    # --reset-env: the owner's HOME, where git looks for their own configuration, not root's.
    return [setpriv, f"--reuid={owner[0]}", f"--regid={owner[1]}", "--clear-groups", "--reset-env", *base]


def read_git_checkout(
    path: str, run: Run, git: str | None, setpriv: str | None = None
) -> tuple[dict, list[str]]:
    """{'path', 'present', 'commit', 'ref', 'tags'} of the checkout at PATH (tags: those naming its
    commit, annotated or not; ref: the branch, None when detached), and warnings for what git could not
    say. Not a checkout: present is false and nothing runs."""
    facts: dict = {"path": path, "present": False, "commit": None, "ref": None, "tags": []}
    try:
        st = os.stat(path)
    except OSError:
        return facts, []
    # .git is a folder, or a file naming one (a worktree, a submodule).
    if not os.path.exists(os.path.join(path, ".git")):
        return facts, []
    facts["present"] = True
    if git is None:
        return facts, [f"{path} is a git checkout, but git is not installed to read its commit"]
    base = git_command(git, path, (st.st_uid, st.st_gid), setpriv)
    if base is None:
        return facts, [f"{path} belongs to uid {st.st_uid}, and setpriv is not installed to read it as them"]
    rc, out, err = run([*base, "rev-parse", "--verify", "--quiet", "HEAD"])
    if rc != 0:
        return facts, [f"git cannot read the commit of {path}: {(err or out).strip()[:200] or f'exit {rc}'}"]
    facts["commit"] = out.strip()
    rc, out, _err = run([*base, "symbolic-ref", "--quiet", "HEAD"])
    facts["ref"] = out.strip() if rc == 0 and out.strip() else None
    rc, out, _err = run([*base, "tag", "--points-at", "HEAD"])
    facts["tags"] = sorted(out.split()) if rc == 0 else []
    return facts, []
