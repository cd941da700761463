"""ds4_engine_repo over HTTPS, the shipped default's scheme (https://github.com/...): the release plan's tag
lookup against the stand-in git server (tests/standins/engine/git_http_auth.py) serving HTTPS with a
certificate of a site's own CA. Git verifies it: refused while the CA is not trusted, with the cause in the
message; resolved once the CA is in the bundle git reads (on a Spark, the system store)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._engine.release_plan import (
    ReleaseError,
    resolve_release,
)

STANDINS = Path(__file__).resolve().parents[5] / "tests" / "standins"


@pytest.fixture(scope="module")
def tls_mirror(tmp_path_factory, site_ca):
    base = tmp_path_factory.mktemp("tls-mirror")
    subprocess.run(
        [sys.executable, str(STANDINS / "engine" / "make_repo.py"), "--out", str(base / "git")],
        check=True,
        capture_output=True,
    )
    server = subprocess.Popen(
        [sys.executable, str(STANDINS / "engine" / "git_http_auth.py"), "--root", str(base / "git"),
         "--bind", "127.0.0.1", "--port", "0", "--tls-cert", str(site_ca["server.pem"]),
         "--tls-key", str(site_ca["server.key"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    try:
        port = int(server.stdout.readline().split()[-1])
        yield {
            "repo": f"https://127.0.0.1:{port}/ds4.git",
            "tags": json.loads((base / "git" / "ds4-tags.json").read_text()),
        }
    finally:
        server.kill()
        server.wait()


def runner(ca_file):
    """The plan's RUN, with git reading CA_FILE as its whole CA bundle (None: an empty one)."""

    def run(argv, environ_update=None):
        env = dict(os.environ, GIT_TERMINAL_PROMPT="0", **(environ_update or {}))
        env["GIT_SSL_CAINFO"] = str(ca_file)
        env["GIT_SSL_CAPATH"] = "/nonexistent"
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    return run


def test_a_repository_whose_certificate_is_not_trusted_is_refused_saying_why(tls_mirror, tmp_path):
    other = tmp_path / "other-ca.pem"
    other.write_text("")
    with pytest.raises(ReleaseError) as refused:
        resolve_release(runner(other), "git", tls_mirror["repo"], "v0.6.5")
    assert "git ls-remote exited 128" in str(refused.value)
    assert "certificate" in str(refused.value).lower() or "CA" in str(refused.value), refused.value


def test_a_repository_signed_by_a_trusted_site_ca_resolves_the_tag(tls_mirror, site_ca):
    commit = resolve_release(runner(site_ca["ca.pem"]), "git", tls_mirror["repo"], "v0.6.5")
    assert commit == tls_mirror["tags"]["v0.6.5"]
