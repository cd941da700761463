"""A git checkout's commit, branch and tags, as git says them (module_utils/_engine/git_checkout.py), run as
the checkout's owner."""

import os
import shutil
import subprocess
import tempfile

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._engine.git_checkout import (
    git_command,
    read_git_checkout,
)

GIT = shutil.which("git")


def run(argv):
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
    return done.returncode, done.stdout, done.stderr


def never(argv):
    raise AssertionError(f"nothing should run: {argv}")


@pytest.mark.skipif(GIT is None, reason="needs git")
def test_a_checkout_read_as_git_reads_it(tmp_path):
    checkout = tmp_path / "ds4"

    def git(*args):
        return subprocess.run(
            [GIT, "-C", str(checkout), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    subprocess.run([GIT, "init", "-q", "-b", "main", str(checkout)], check=True)
    git("commit", "-q", "--allow-empty", "-m", "first")
    git("tag", "-a", "v0.6.5", "-m", "release")
    git("tag", "light")
    commit = git("rev-parse", "HEAD")
    assert read_git_checkout(str(checkout), run, GIT) == (
        {
            "path": str(checkout),
            "present": True,
            "commit": commit,
            "ref": "refs/heads/main",
            "tags": ["light", "v0.6.5"],
        },
        [],
    )
    # As the installer leaves it: the tag's commit checked out (detached), its refs packed.
    git("commit", "-q", "--allow-empty", "-m", "second")
    git("checkout", "-q", "--detach", "v0.6.5")
    git("pack-refs", "--all")
    facts, warnings = read_git_checkout(str(checkout), run, GIT)
    assert (facts["commit"], facts["ref"], facts["tags"], warnings) == (commit, None, ["light", "v0.6.5"], [])


def test_no_checkout_runs_nothing(tmp_path):
    (tmp_path / "plain").mkdir()
    for path in (tmp_path / "absent", tmp_path / "plain"):
        assert read_git_checkout(str(path), never, GIT) == (
            {"path": str(path), "present": False, "commit": None, "ref": None, "tags": []},
            [],
        )


def test_a_checkout_git_cannot_read_is_present_and_said(tmp_path):
    (tmp_path / "ds4" / ".git").mkdir(parents=True)
    path = str(tmp_path / "ds4")
    facts, warnings = read_git_checkout(path, never, None)
    assert (facts["present"], facts["commit"]) == (True, None)
    assert warnings == [f"{path} is a git checkout, but git is not installed to read its commit"]
    facts, warnings = read_git_checkout(
        path, lambda argv: (128, "", "fatal: not a git repository\n"), "/usr/bin/git"
    )
    assert (facts["present"], facts["commit"]) == (True, None)
    assert warnings == [f"git cannot read the commit of {path}: fatal: not a git repository"]


def test_git_runs_as_the_checkouts_owner():
    me = os.geteuid()
    assert git_command("/usr/bin/git", "/home/nvidia/code/ds4", (me, 0), None) == [
        "/usr/bin/git",
        "-C",
        "/home/nvidia/code/ds4",
    ]
    other = me + 1000
    assert git_command("/usr/bin/git", "/home/nvidia/code/ds4", (other, 1000), "/usr/bin/setpriv") == [
        "/usr/bin/setpriv",
        f"--reuid={other}",
        "--regid=1000",
        "--clear-groups",
        "--reset-env",
        "/usr/bin/git",
        "-C",
        "/home/nvidia/code/ds4",
    ]
    # Never as root in another user's folder: without setpriv, git does not run.
    assert git_command("/usr/bin/git", "/home/nvidia/code/ds4", (other, 1000), None) is None


@pytest.mark.skipif(
    GIT is None or shutil.which("setpriv") is None or os.geteuid() != 0, reason="needs git, setpriv and root"
)
def test_root_reads_another_users_checkout_as_them():
    """As the role runs: root, a checkout in a user's home (git itself refuses it to root)."""
    # A folder the user can reach (pytest's own are root's alone).
    with tempfile.TemporaryDirectory() as home:
        os.chmod(home, 0o755)
        checkout = os.path.join(home, "ds4")
        subprocess.run([GIT, "init", "-q", "-b", "main", checkout], check=True)
        commit = ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "1"]
        subprocess.run([GIT, "-C", checkout, *commit], check=True)
        for folder, _dirs, files in os.walk(checkout):
            for name in [folder, *(os.path.join(folder, f) for f in files)]:
                os.chown(name, 65534, 65534)
        facts, warnings = read_git_checkout(checkout, run, GIT, shutil.which("setpriv"))
        assert warnings == []
        assert (
            facts["commit"]
            == subprocess.check_output(
                [GIT, "-c", f"safe.directory={checkout}", "-C", checkout, "rev-parse", "HEAD"], text=True
            ).strip()
        )
