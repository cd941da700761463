"""The engine build trusts neither the repository's credential to files nor the engine's code with root, nor a
moved tag (issue 26, points 1 and 9). Its tests share one build of v0.6.3, which is gone after them.

The forge serves the stand-in repository behind a password as well (tests/standins/engine/git_http_auth.py,
port 18083): a build from it passes only if git was given the password, and afterwards no file under the
paths a Spark keeps holds it, nor did any git command line. `git` and `make` are wrapped on the Spark for
the tests: the first records each command line it is given, the second the user it runs as.
"""

import base64
import json

import pytest
from test_engine import LOGS, RELEASES, TAGS, play

PASSWORD = "S3cretTok3n"
PRIVATE = f"http://builder:{PASSWORD}@forge:18083/ds4.git"
RECORD = "/var/lib/ds4-fleet/engine-tags.json"
ARGV_LOG = "/root/git-argv.log"
PLAN = "Resolve the release tag and plan the build"
SAID = "Say what this run does with the engine releases"
RELEASE = f"{RELEASES}/v0.6.3"


GIT_WRAPPER = f"""#!/bin/sh
printf '%s ' "$0" "$@" >> {ARGV_LOG}; echo >> {ARGV_LOG}
exec /usr/bin/git "$@"
"""
# make runs in the build tree: what it writes there is the build user's proof.
MAKE_WRAPPER = """#!/bin/sh
id -un > .made-by
exec /usr/bin/make "$@"
"""


def install(host, path, text, mode="755"):
    encoded = base64.b64encode(text.encode()).decode()
    host.check_output(f"echo {encoded} | base64 -d > {path} && chmod {mode} {path}")


def content(host, path):
    """A file's text, or None when there is none."""
    return host.file(path).content_string if host.file(path).exists else None


def put_back(host, path, text):
    """The file as it was: TEXT (root's, 0644, as the tag record is written), or none at all."""
    if text is None:
        host.check_output(f"rm -f {path}")
    else:
        install(host, path, text, mode="644")


@pytest.fixture(scope="module")
def wrapped(host):
    """git and make in /usr/local/bin, ahead of /usr/bin on the modules' PATH, for this file's tests."""
    install(host, "/usr/local/bin/git", GIT_WRAPPER)
    install(host, "/usr/local/bin/make", MAKE_WRAPPER)
    yield
    host.check_output(f"rm -f /usr/local/bin/git /usr/local/bin/make {ARGV_LOG}")


@pytest.fixture(scope="module")
def private_build(host, wrapped):
    """v0.6.3 built from the password-protected mirror, once for this file's tests (a nested.Run); after
    them, no v0.6.3 release or build log, and the tag record as it was, as converge left the Spark."""
    assert not host.file(RELEASE).exists, "converge leaves no v0.6.3: this file builds it"
    record = content(host, RECORD)
    run = play("-e", "ds4_release=v0.6.3", "-e", f"ds4_engine_repo={PRIVATE}")
    yield run
    host.check_output(f"rm -rf {RELEASE} {LOGS}/build-v0.6.3.log")
    put_back(host, RECORD, record)


def test_the_build_user_is_a_system_user_without_a_login(host):
    user = host.user("ds4-build")
    assert user.exists and user.uid < 1000 and user.shell == "/usr/sbin/nologin"
    assert user.home == "/nonexistent" and not host.file("/nonexistent").exists


def test_the_private_mirror_wants_its_password(host):
    refused = host.run("GIT_TERMINAL_PROMPT=0 git ls-remote http://forge:18083/ds4.git")
    assert refused.rc != 0 and "could not read Username" in refused.stderr


def test_a_password_in_the_repository_url_reaches_no_file_and_no_command_line(host, private_build):
    run = private_build
    assert run.rc == 0, run
    assert PASSWORD not in run.output + run.stderr
    said = run.result(SAID).msg
    assert said.startswith(f"v0.6.3 (commit {TAGS['v0.6.3']}, make cuda-spark, "), said
    release = RELEASE
    config = host.file(f"{release}/.git/config").content_string
    assert "url = http://forge:18083/ds4.git\n" in config and PASSWORD not in config
    assert json.loads(host.file(f"{release}/.ds4-build.json").content_string)["engine_repo"] == (
        "http://forge:18083/ds4.git"
    )
    found = host.run(f"grep -rl --binary-files=text {PASSWORD} /opt/ds4 /var/log/ds4 /etc /var/lib")
    assert found.rc == 1 and found.stdout == "", found.stdout
    # Every git command the plan and the build ran, with its whole command line.
    argv = host.file(ARGV_LOG).content_string
    assert " ls-remote --tags http://forge:18083/ds4.git " in argv and " clone " in argv, argv
    assert PASSWORD not in argv and "builder" not in argv


def test_make_ran_as_the_build_user_and_the_release_is_root_s(host, private_build):
    assert private_build.rc == 0, private_build
    release = RELEASE
    assert host.file(f"{release}/.made-by").content_string == "ds4-build\n"
    # Nothing in the release is another user's or writable by anyone but root.
    assert host.check_output(f"find {release} ! -user root -o ! -group root -o ! -type l -perm /7022") == ""
    assert host.file(release).user == "root" and host.file(release).mode == 0o755
    assert host.file(f"{RELEASES}/v0.6.3/ds4-server").user == "root"
    # Nothing of the build user is left running.
    assert host.run("pgrep -u ds4-build").rc == 1
    assert json.loads(host.file(RECORD).content_string)["v0.6.3"]["commit"] == TAGS["v0.6.3"]
    assert host.file(RECORD).user == "root" and host.file("/var/lib/ds4-fleet").mode == 0o700


def test_a_moved_tag_is_refused_naming_both_commits_unless_accepted(host, private_build):
    assert private_build.rc == 0, private_build
    # A mirror whose v0.6.3 was moved to v0.6.5's commit since this Spark built v0.6.3.
    host.check_output(
        "rm -rf /srv/moved.git && git clone -q --bare git://forge/ds4.git /srv/moved.git && "
        f"git --git-dir=/srv/moved.git tag -f v0.6.3 {TAGS['v0.6.5']}"
    )
    # The release and the record as this file's build left them, put back after: the accepted tag rebuilds.
    host.check_output(f"rm -rf /root/v0.6.3.kept && cp -a {RELEASE} /root/v0.6.3.kept")
    record = content(host, RECORD)
    try:
        before = host.file(f"{RELEASE}/.ds4-build.json").content_string
        moved = ("-e", "ds4_release=v0.6.3", "-e", "ds4_engine_repo=file:///srv/moved.git")
        run = play(*moved)
        assert run.rc != 0, run
        plan = run.result(PLAN)
        assert plan.failed and plan.msg.startswith(
            f"release tag v0.6.3 in file:///srv/moved.git now resolves to commit {TAGS['v0.6.5']}, but it "
            f"resolved to commit {TAGS['v0.6.3']} when this host built it ({RECORD}, "
        ), plan.msg
        assert host.file(f"{RELEASE}/.ds4-build.json").content_string == before
        run = play(*moved, "-e", "ds4_release_accept_moved_tag=true")
        assert run.rc == 0, run
        said = run.result(SAID).msg
        assert said.startswith(
            f"v0.6.3 (commit {TAGS['v0.6.5']}, the tag moved from commit {TAGS['v0.6.3']}, accepted by "
            "ds4_release_accept_moved_tag, make cuda"
        ), said
        assert json.loads(host.file(f"{RELEASE}/.ds4-build.json").content_string)["commit"] == TAGS["v0.6.5"]
        assert json.loads(host.file(RECORD).content_string)["v0.6.3"]["commit"] == TAGS["v0.6.5"]
    finally:
        host.check_output(f"rm -rf {RELEASE} /srv/moved.git && mv /root/v0.6.3.kept {RELEASE}")
        put_back(host, RECORD, record)
