"""A credential in ds4_engine_repo (module_utils/_engine/git_remote.py), and the plan's and the build's git
commands that go through it, against a real git server over HTTP that wants a password (the stand-in
tests/standins/engine/git_http_auth.py, which answers 401 to any request without it)."""

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._engine import release_build as build_utils
from ansible_collections.ds4.fleet.plugins.module_utils._engine.git_remote import RemoteError, git_remote
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_build import build_release
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_plan import (
    ReleaseError,
    resolve_release,
)
from ansible_collections.ds4.fleet.plugins.modules import ds4_release_plan
from module_runner import run_module

REPO = Path(__file__).resolve().parents[5]
STANDINS = REPO / "tests" / "standins"
SPARK = {"arch": "sm_121", "make_target": "cuda", "make_args": ["CUDA_ARCH=sm_121"]}
PASSWORD = "S3cretTok3n"


@pytest.fixture(autouse=True)
def lock_dir(tmp_path, monkeypatch):
    """The build lock's directory, for this test only (never the host's /run)."""
    monkeypatch.setattr(build_utils, "LOCK_DIR", str(tmp_path / "run-ds4-fleet"))


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """The stand-in engine repository behind a server that wants builder:S3cretTok3n, and a GB10 nvcc."""
    base = tmp_path_factory.mktemp("mirror")
    subprocess.run(
        [sys.executable, str(STANDINS / "engine" / "make_repo.py"), "--out", str(base / "git")],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [sys.executable, str(STANDINS / "gpu" / "install.py"), "--root", str(base / "gpu"),
         "--persona", "gb10"],
        check=True,
    )  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, str(STANDINS / "engine" / "git_http_auth.py"), "--root", str(base / "git"),
         "--bind", "127.0.0.1", "--port", "0", "--user", "builder", "--password", PASSWORD],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        port = int(server.stdout.readline().split()[-1])
        tags = json.loads((base / "git" / "ds4-tags.json").read_text())
        yield {
            "clean": f"http://127.0.0.1:{port}/ds4.git",
            "repo": f"http://builder:{PASSWORD}@127.0.0.1:{port}/ds4.git",
            "tags": tags,
            "nvcc": str(base / "gpu" / "usr" / "local" / "cuda" / "bin" / "nvcc"),
        }
    finally:
        server.kill()
        server.wait()


def _spy(monkeypatch, module, name):
    """Record the argv and environment of every command MODULE.subprocess.NAME starts."""
    calls = []
    real = getattr(module.subprocess, name)

    def spy(argv, *args, **kwargs):
        calls.append((list(argv), dict(kwargs.get("env") or {})))
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(module.subprocess, name, spy)
    return calls


def test_a_url_with_a_credential_is_split_into_the_url_and_a_header_for_that_server_alone():
    remote = git_remote("https://builder:p%40ss@git.example:8443/mirrors/ds4.git")
    assert remote.url == "https://git.example:8443/mirrors/ds4.git"
    env = remote.env({"PATH": "/usr/bin"})
    assert env == {
        "PATH": "/usr/bin",
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "http.https://git.example:8443/.extraHeader",
        # Git decodes %XX in a URL's user information: the header carries the decoded password.
        "GIT_CONFIG_VALUE_0": "Authorization: Basic " + base64.b64encode(b"builder:p@ss").decode(),
    }
    assert "p%40ss" in remote.secrets and "p@ss" in remote.secrets
    # After any configuration the environment already gives git the same way.
    assert remote.config_env({"GIT_CONFIG_COUNT": "2"})["GIT_CONFIG_KEY_2"].endswith(".extraHeader")


def test_a_token_in_the_user_place_is_a_secret_too():
    remote = git_remote("https://ghp_T0ken@github.com/Entrpi/ds4.git")
    assert remote.url == "https://github.com/Entrpi/ds4.git" and "ghp_T0ken" in remote.secrets


@pytest.mark.parametrize(
    "url", ["https://github.com/Entrpi/ds4.git", "git://forge/ds4.git", "/srv/git/ds4.git",
            "git@github.com:Entrpi/ds4.git", "ssh://git@github.com/Entrpi/ds4.git", "file:///srv/ds4.git"],
)  # fmt: skip
def test_a_url_without_a_credential_is_given_as_it_is(url):
    remote = git_remote(url)
    assert (remote.url, remote.env({}), remote.secrets) == (url, {}, [])


def test_a_password_git_could_only_take_on_its_command_line_is_refused_without_showing_it():
    with pytest.raises(RemoteError) as refused:
        git_remote("ssh://git:hunter2@github.com/Entrpi/ds4.git")
    assert "hunter2" not in str(refused.value) and "ds4_engine_repo" in str(refused.value)


def test_the_tag_lookup_passes_the_password_to_git_in_its_environment_alone(mirror, monkeypatch):
    calls = []

    def run(argv, environ_update=None):
        calls.append(argv)
        env = dict(os.environ, GIT_TERMINAL_PROMPT="0", **(environ_update or {}))
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    # The server wants the password: the lookup passing proves that git was given it.
    assert resolve_release(run, "git", mirror["repo"], "v0.6.5") == mirror["tags"]["v0.6.5"]
    assert calls and all(PASSWORD not in " ".join(argv) for argv in calls), calls
    assert mirror["clean"] in calls[0]
    # Without it, the same server refuses, and the message names the URL without the password.
    with pytest.raises(ReleaseError) as refused:
        resolve_release(run, "git", mirror["clean"], "v0.6.5")
    assert "git ls-remote exited 128" in str(refused.value)


def test_the_plan_module_masks_the_password_and_resolves_through_the_server(mirror, tmp_path):
    rc, result = run_module(
        ds4_release_plan,
        {"root": str(tmp_path), "release": "v0.6.5", "repo": mirror["repo"], "build_target": SPARK,
         "cuda_version": "13.0", "log_dir": str(tmp_path / "logs"),
         "tags_record": str(tmp_path / "tags.json")},
    )  # fmt: skip
    assert rc == 0 and result["commit"] == mirror["tags"]["v0.6.5"], result
    assert PASSWORD not in str(result)


def test_a_build_leaves_the_password_in_no_file_and_no_command_line(mirror, tmp_path, monkeypatch):
    popen = _spy(monkeypatch, build_utils, "Popen")
    run = _spy(monkeypatch, build_utils, "run")
    built = build_release(
        root=str(tmp_path / "opt"), release="v0.6.5", commit=mirror["tags"]["v0.6.5"], repo=mirror["repo"],
        build_target=SPARK, cuda_version="13.0", nvcc=mirror["nvcc"], jobs=2, log_dir=str(tmp_path / "log"),
        git="git", make="make", env=dict(os.environ), progress_file=str(tmp_path / "log" / "progress.json"),
    )  # fmt: skip
    assert built["built"]
    release = tmp_path / "opt" / "releases" / "v0.6.5"
    config = (release / ".git" / "config").read_text()
    assert f"url = {mirror['clean']}\n" in config and PASSWORD not in config
    assert built["stamp"]["engine_repo"] == mirror["clean"]
    for path in (tmp_path / "opt").rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert PASSWORD.encode() not in path.read_bytes(), path
    for path in (tmp_path / "log").rglob("*"):
        assert PASSWORD.encode() not in path.read_bytes(), path
    commands = popen + run
    assert any("clone" in argv for argv, _ in commands)
    for argv, env in commands:
        assert PASSWORD not in " ".join(argv), argv
        # Only git's own environment holds the credential; make and the built programs never see it.
        if argv[0] != "git":
            assert not any(key.startswith("GIT_CONFIG_VALUE") for key in env), argv
