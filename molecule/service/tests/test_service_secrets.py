"""Secrets on a sandbox Spark (issue 26, point 3): a proxy's user:password lives only in a file of root's
alone, and each ds4_extra_env value kept where others read it is an HMAC under the Spark's own key.

One nested run of converge.yml with a proxy password and a secret in ds4_extra_env (--diff, so that the
environment file is shown with its digests), shared by the tests; then one with the scenario's own
settings, which the proxy test makes as its second step (the proxy's file goes) or else the fixture does
after the tests, so that the test files that follow find the Spark as converge left it.
"""

import base64
import hashlib
import hmac
import json
import os

import pytest
from test_service import play as converge

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
    """converge.yml again on the Spark, read as an operator reads it: (exit status, all it printed)."""
    run = converge(*args, callback=None)
    return run.rc, run.output + run.stderr


# Whether the proxy test's second step already put the scenario's own settings back.
RESTORED = []


@pytest.fixture(scope="module")
def with_secrets(host):
    """(exit status, output, the local facts) of the run with secrets, the facts read right after it."""
    rc, out = play("--diff", "-e", json.dumps(SETTINGS))
    yield rc, out, host.check_output("cat /etc/ansible/facts.d/*.fact")
    if not RESTORED:
        play()


def test_a_run_with_secrets_passes_and_prints_none(with_secrets):
    rc, out, _ = with_secrets
    assert rc == 0, out[-4000:]
    assert PROXY_SECRET not in out and ENV_SECRET not in out


def test_a_proxy_password_is_in_a_file_of_root_s_alone_which_goes_with_the_proxy(host, with_secrets):
    # Step 1, with the proxy: the password is in root's 0600 file, not in the unit or systemctl show.
    assert not RESTORED, "only this test puts the scenario's settings back"
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
    # Step 2, the scenario's own settings (no proxy): the file and the unit's reference go.
    rc, out = play()
    RESTORED.append(rc)
    assert rc == 0, out[-4000:]
    assert not host.file(PROXY_ENV).exists
    assert "EnvironmentFile" not in host.file("/etc/systemd/system/ds4-update-check.service").content_string


def test_the_digests_of_extra_env_are_keyed_by_the_spark_s_key(host, with_secrets):
    _, out, facts = with_secrets
    key = host.file(KEY)
    assert (key.user, key.group, key.mode) == ("root", "root", 0o600)
    assert host.file(os.path.dirname(KEY)).mode == 0o700
    secret = base64.b64decode(host.check_output(f"base64 -w0 {KEY}"))
    digest = hmac.new(secret, ENV_SECRET.encode(), hashlib.sha256).hexdigest()[:16]
    assert f"DS4_TEST_TOKEN=hmac-sha256:{digest}" in out, "the diff shows the value as its keyed digest"
    plain = hashlib.sha256(ENV_SECRET.encode()).hexdigest()[:12]
    assert plain not in out
    assert ENV_SECRET not in facts and plain not in facts
