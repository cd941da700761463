"""Secrets on a sandbox Spark (issue 26, point 3): a proxy's user:password lives only in a file of root's
alone, and each ds4_extra_env value kept where others read it is an HMAC under the Spark's own key.

One nested run of converge.yml with a proxy password and a secret in ds4_extra_env (--diff, so that the
environment file is shown with its digests), then one that puts the scenario's own settings back for the
tests that follow.
"""

import base64
import hashlib
import hmac
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1]
PROXY_SECRET = "Pr0xy-S3cret-q7"
ENV_SECRET = "sk-live-Zq81x"
SETTINGS = {
    # The feed is plain http on forge: the proxy is for https only, and no_proxy names forge all the same.
    "ds4_proxy_env": {
        "https_proxy": f"http://proxyuser:{PROXY_SECRET}@proxy.invalid:3128",
        "no_proxy": "forge,127.0.0.1,localhost",
    },
    "ds4_extra_env": {"DS4_TEST_TOKEN": ENV_SECRET},
}
PROXY_ENV = "/etc/ds4/proxy.env"
KEY = "/var/lib/ds4-fleet/digest.key"


def play(*args):
    """Run converge.yml again on the Spark; (exit status, output)."""
    ansible = shutil.which(
        "ansible-playbook", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    proc = subprocess.run(
        [ansible, "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(SCENARIO / "converge.yml"), *args],
        env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"),
        capture_output=True,
        text=True,
        # A guard against a hang, not an expectation of speed.
        timeout=1800,
    )
    return proc.returncode, re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)


# Whether the scenario's own settings are back: the last test puts them back; if it never ran, the
# fixture does, for the test files that follow.
RESTORED = []


@pytest.fixture(scope="module")
def with_secrets():
    rc, out = play("--diff", "-e", json.dumps(SETTINGS))
    yield rc, out
    if not RESTORED:
        play()


def test_a_run_with_secrets_passes_and_prints_none(with_secrets):
    rc, out = with_secrets
    assert rc == 0, out[-4000:]
    assert PROXY_SECRET not in out and ENV_SECRET not in out


def test_a_proxy_password_is_in_a_file_of_root_s_alone_not_in_the_unit(host, with_secrets):
    unit = host.file("/etc/systemd/system/ds4-update-check.service").content_string
    assert PROXY_SECRET not in unit and f"EnvironmentFile={PROXY_ENV}" in unit
    shown = host.check_output("systemctl show ds4-update-check.service")
    assert PROXY_SECRET not in shown and PROXY_ENV in shown
    env = host.file(PROXY_ENV)
    assert (env.user, env.group, env.mode) == ("root", "root", 0o600)
    assert f"https_proxy={SETTINGS['ds4_proxy_env']['https_proxy']}" in env.content_string.splitlines()
    # The update check reads it and still reaches the feed (plain http, no_proxy).
    # The update check's tests before ran it many times: past systemd's default start limit.
    host.check_output("systemctl reset-failed ds4-update-check.service")
    host.check_output("systemctl start ds4-update-check.service")
    assert host.service("ds4-update-check.service").systemd_properties["Result"] == "success"


def test_the_digests_of_extra_env_are_keyed_by_the_spark_s_key(host, with_secrets):
    _, out = with_secrets
    key = host.file(KEY)
    assert (key.user, key.group, key.mode) == ("root", "root", 0o600)
    assert host.file(os.path.dirname(KEY)).mode == 0o700
    secret = base64.b64decode(host.check_output(f"base64 -w0 {KEY}"))
    digest = hmac.new(secret, ENV_SECRET.encode(), hashlib.sha256).hexdigest()[:16]
    assert f"DS4_TEST_TOKEN=hmac-sha256:{digest}" in out, "the diff shows the value as its keyed digest"
    plain = hashlib.sha256(ENV_SECRET.encode()).hexdigest()[:12]
    assert plain not in out
    facts = host.check_output("cat /etc/ansible/facts.d/*.fact")
    assert ENV_SECRET not in facts and plain not in facts


def test_without_a_proxy_the_file_and_the_unit_s_reference_go(host, with_secrets):
    """Last: the fixture's second run (the scenario's settings) has not run yet; this asks it."""
    rc, out = play()
    RESTORED.append(rc)
    assert rc == 0, out[-4000:]
    assert not host.file(PROXY_ENV).exists
    assert "EnvironmentFile" not in host.file("/etc/systemd/system/ds4-update-check.service").content_string
