"""site.yml on sandbox Sparks, asserted on the hosts. After converge both serve v0.6.3 on the legacy
generation.

Each test starts from converge's state and leaves it as it found it (a test that changes a Spark runs
site.yml again to put it back), except the operator's upgrade path at the end, which leaves both Sparks on
v0.6.5: it is marked `ends_scenario` and so runs after the others whatever the order (conftest.py). Runs
that several tests read (a second run, a check-mode upgrade) are made once, on both Sparks at once, by
module-scoped fixtures. Each nested `ansible-playbook site.yml` is a run whose exit status and results
(ansible.posix.jsonl events, molecule/shared/nested.py) are asserted, so that an expected failure (the
smoke test of v0.6.6) fails the scenario only when the expectation is wrong.
"""

import difflib
import json
import os
import socket
import subprocess
import sys

import pytest
from nested import PROJECT, play
from spark import IMPOSTOR_LOG, IMPOSTOR_UNIT, ask, release, sandbox_host, start_impostor, stop_impostor
from waits import wait_for

sys.path.insert(0, str(PROJECT / "tests" / "unit"))
from settings_cases import site_rounds  # noqa: E402

ROOT = "/opt/ds4"
GGUF = "/var/lib/ds4/gguf"
# The forge's hub and feed over HTTPS (host_vars/), and where the update check keeps its last answer.
TLS_HUB = "https://forge:18443"
UPDATE_STATE = "/var/lib/ds4/update-check.json"
PREFIX = f"mol-{os.environ.get('MOLECULE_SCENARIO_NAME', 'site')}-"
NAMES = ("spark01", "spark02")
BOTH = ",".join(NAMES)
LEGACY = {
    "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf",
    "DSpark-drafter-Q2K-Q8.gguf",
}
GEN_0731 = {
    "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf",
    "DSpark-drafter-Q2K-Q8-0731.gguf",
}
UPGRADE = ["-e", "ds4_release=v0.6.5", "-e", "ds4_model_generation=0731"]
# Upstream's stand-in (tests/standins/engine/README.md): untagged commits on main, served by the forge.
UPSTREAM_REPO = "git://forge/ds4-upstream.git"
UPSTREAM = json.loads((PROJECT / ".sandbox" / "forge" / "git" / "ds4-upstream-commits.json").read_text())
# The message of the task that says whether the run goes on.
NOTHING_TO_CHANGE = "Nothing to change: the Spark is as the last finished run left it"


def site(limit, *args, **kwargs):
    """site.yml on LIMIT (one Spark or both) with converge's settings and ARGS: a nested.Run."""
    return play(
        PROJECT / "site.yml", "-l", limit, "-e", "ds4_release=v0.6.3", "-e", "ds4_model_generation=legacy",
        *args, **kwargs,
    )  # fmt: skip


def exec_pid(host):
    return host.check_output("systemctl show ds4 -p ExecMainPID --value")


def models(host):
    return {name for name in host.check_output(f"ls {GGUF}").split() if name.endswith(".gguf")}


def state(host):
    """What a run must not change: links, launch files, units, weights and releases, with their times."""
    return host.check_output(
        f"ls -l --time-style=+%s.%N {ROOT} {ROOT}/releases {GGUF}; "
        "stat -c '%n %s %Y' /etc/ds4/ds4.env /etc/systemd/system/ds4.service; "
        "systemctl show ds4 -p ExecMainPID -p ActiveState"
    )


@pytest.fixture(scope="module")
def sparks():
    return {name: sandbox_host(name) for name in NAMES}


@pytest.fixture
def name(host):
    return host.backend.get_hostname().removeprefix(PREFIX)


@pytest.fixture
def spark01(name):
    """The tests of one Spark's own story (drift, settings, refusals, the lock) read no other: spark01."""
    if name != "spark01":
        pytest.skip("run on spark01 only")
    return name


def test_fresh_provision_serves_the_release_and_model_it_names(host):
    assert release(host) == "v0.6.3"
    assert host.service("ds4").is_running and host.service("ds4").is_enabled
    assert models(host) == LEGACY
    description = host.check_output("systemctl show ds4 -p Description --value")
    assert "v0.6.3" in description and "chat-v2-imatrix.gguf" in description
    assert "Paris" in ask(host)
    assert host.socket("tcp://127.0.0.1:8000").is_listening


def test_the_hub_and_the_feed_are_reached_over_https_with_the_sites_ca(host):
    """The shipped endpoints' scheme: each Spark fetched its weights from the forge's HTTPS hub (host_vars/),
    whose certificate the site's CA in the Spark's system store signed, and its update check reads the feed
    there too."""
    served = json.loads(host.check_output(f"curl -fsS {TLS_HUB}/_standin/stats"))["content_bytes"]
    assert served >= sum(host.file(f"{GGUF}/{name}").size for name in LEGACY)
    host.check_output("systemctl reset-failed ds4-update-check.service")
    host.check_output("systemctl start ds4-update-check.service")
    state = json.loads(host.file(UPDATE_STATE).content_string)
    assert (state["status"], state["error"]) == ("ok", None), state
    # Trusting only a public CA of the system's store (not the site's; no CA directory, which holds the site's
    # too), the same request is refused: the certificate is what curl verifies (exit 60), not the forge's
    # reach. With the system's bundle alone it is accepted.
    public = host.check_output("ls /usr/share/ca-certificates/mozilla/*.crt | head -1")
    refused = host.run(f"curl -sS --capath /nonexistent --cacert {public} {TLS_HUB}/_standin/stats")
    assert refused.rc == 60, refused
    bundle = "/etc/ssl/certs/ca-certificates.crt"
    assert host.run(f"curl -fsS --capath /nonexistent --cacert {bundle} {TLS_HUB}/_standin/stats").rc == 0


@pytest.fixture(scope="module")
def check_mode_upgrade(sparks):
    """The upgrade in check mode on both Sparks: (the run, each one's state before, and after)."""
    before = {name: state(spark) for name, spark in sparks.items()}
    run = site(BOTH, "--check", "--diff", *UPGRADE)
    return run, before, {name: state(spark) for name, spark in sparks.items()}


def test_a_check_mode_upgrade_changes_nothing(name, check_mode_upgrade):
    run, before, after = check_mode_upgrade
    assert run.rc == 0, run
    assert run.of(name, "Point current at v0.6.5"), run
    assert after[name] == before[name]


@pytest.fixture(scope="module")
def second_run(sparks):
    """site.yml again on both Sparks, with converge's settings: (the run, each one's engine before it, and
    right after it: later tests may restart an engine)."""
    before = {name: exec_pid(spark) for name, spark in sparks.items()}
    run = site(BOTH)
    return run, before, {name: exec_pid(spark) for name, spark in sparks.items()}


def test_a_second_run_changes_nothing_and_restarts_nothing(name, second_run):
    run, before, after = second_run
    assert run.rc == 0, run
    assert run.changed(name) == 0, run
    assert run.said(NOTHING_TO_CHANGE, name), "a converged Spark's run ends early"
    assert after[name] == before[name]


def test_a_drifted_file_and_a_stopped_engine_are_found_and_fixed_with_the_same_settings(host, spark01):
    """However short a run with nothing to do, it still looks: a line added to the engine's environment
    file is taken out again, the stopped engine is started, on the file as written. The first difference
    found is named (files are compared before units); that a stopped unit alone is found and named is
    test_ds4_applied.py's (tests/unit/plugins/module_utils)."""
    pid = exec_pid(host)
    host.check_output("echo DS4_DRIFTED=1 >> /etc/ds4/ds4.env && systemctl stop ds4")
    run = site(spark01)
    assert run.rc == 0, run
    drift = "The whole run follows: file /etc/ds4/ds4.env changed since the last finished run"
    assert run.said(drift, spark01), run
    assert run.changed(spark01) > 0, run
    assert "DS4_DRIFTED" not in host.file("/etc/ds4/ds4.env").content_string
    assert exec_pid(host) != pid
    assert host.service("ds4").is_running and "Paris" in ask(host)


def test_a_changed_setting_reaches_its_file_and_back(host, spark01):
    dropin = "/etc/systemd/system/ds4.service.d/00-ds4-fleet-supervision.conf"
    back = None
    try:
        run = site(spark01, "-e", "ds4_restart_sec=31")
        assert run.rc == 0, run
        assert run.said("The whole run follows: the settings or the collection differ", spark01), run
        assert run.changed(spark01) > 0, run
        assert "RestartSec=31" in host.file(dropin).content_string
        back = site(spark01)
    finally:
        # Converge's settings again, whatever failed above.
        back = back or site(spark01)
    assert back.rc == 0, back
    assert back.changed(spark01) > 0, back
    assert "RestartSec=31" not in host.file(dropin).content_string


def test_with_skipping_turned_off_every_task_runs_and_changes_nothing_whatever_another_user_holds(
    host, spark01
):
    # Another local user holds an flock on /run (where the run lock's guard was) and runs a program named
    # ds4-server off the engine's port: neither may stall nor stop the run.
    started = host.check_output(
        "install -d -m 0755 /tmp/other-user && cp /bin/sleep /tmp/other-user/ds4-server && "
        "{ setsid runuser -u nobody -- flock /run sleep 600 </dev/null >/dev/null 2>&1 & echo $!; } && "
        "{ setsid runuser -u nobody -- /tmp/other-user/ds4-server 600 </dev/null >/dev/null 2>&1 & echo $!; }"
    ).split()
    try:
        run = site(spark01, "-e", "ds4_skip_when_unchanged=false")
    finally:
        host.run(f"kill -- -{started[0]} -{started[1]}; rm -rf /tmp/other-user")
    assert run.rc == 0, run
    assert run.changed(spark01) == 0 and not run.said(NOTHING_TO_CHANGE), run
    roles = {result.role.rsplit(".", 1)[-1] for result in run.of(spark01) if result.role}
    assert {"ds4_preflight", "ds4_activate"} <= roles, roles
    assert "a process named ds4-server of another user, off the engine's port, left alone" in (
        run.output + run.stderr
    ), run


def test_a_stranger_listening_on_the_engines_port_is_never_asked_and_fails_the_run_by_name(host, spark01):
    """Issue 40: with the engine stopped and nobody's process answering on its port as the engine does, a
    run neither makes the unit ready on it, nor smoke-tests it, nor records it as the last good release: it
    fails, naming the stranger's pid and user, and the stranger receives no request."""
    record = host.check_output("sha256sum /var/lib/ds4-fleet/last-good.json")
    host.check_output("systemctl stop ds4")
    start_impostor(host, "127.0.0.1")
    back = None
    try:
        wait_for(
            "the stranger to listen on 127.0.0.1:8000",
            lambda: host.run("curl -fsS 127.0.0.1:8000/v1/models").rc == 0,
        )
        host.check_output(": > %s", IMPOSTOR_LOG)
        stranger = host.check_output("systemctl show %s -p MainPID --value", IMPOSTOR_UNIT)
        run = site(spark01)
        assert run.rc != 0 and run.failed(spark01) > 0, run
        named = f"127.0.0.1:8000 is held by pid {stranger} (python3) of user nobody (uid 65534)"
        assert run.said(named, spark01), run
        assert host.file(IMPOSTOR_LOG).content_string == ""
        assert host.check_output("sha256sum /var/lib/ds4-fleet/last-good.json") == record
    finally:
        stop_impostor(host)
        host.run("systemctl reset-failed ds4")
        back = site(spark01)
    assert back.rc == 0, back
    assert host.service("ds4").is_running and "Paris" in ask(host)


def untouched(host):
    """state(); every managed tree's files with their sizes, times, owners and modes, its directories with
    their owners and modes; and the system directories a bad path names.

    The watchdog's and the update check's state files are the running service's own, replaced on their
    timers, not the run's; a directory's time moves whenever a file in it is replaced (theirs in
    /var/lib/ds4), and the listing shows a file added or removed without it."""
    return state(host) + host.check_output(
        "find /opt/ds4 /var/lib/ds4 /etc/ds4 -type d -printf '%p %u:%g %m\\n' "
        "-o ! -path /var/lib/ds4/watchdog.json ! -path /var/lib/ds4/update-check.json "
        "-printf '%p %s %T@ %u:%g %m %l\\n' | sort; "
        "stat -c '%n %U:%G %a' / /tmp /usr /var/lib /etc /opt"
    )


def assert_untouched(host, before):
    after = untouched(host)
    # Only the lines that differ: pytest would cut the whole listing short before them.
    assert after == before, "\n".join(
        difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    )


def refusals(run):
    """The refused variables' messages, from the settings check's result."""
    for result in run.results:
        if result.data.get("refused"):
            return result.data["refused"]
    return []


def test_bad_settings_are_refused_by_name_before_anything_changes(host, spark01, tmp_path):
    """The first round of bad values, all at once, through site.yml on a serving Spark: each is named and
    the Spark is left as it was. Every other round is given to the same check in a playbook by
    tests/unit/plugins/action/test_ds4_settings_check.py, without a Spark: a refusal needs none."""
    bad = site_rounds()[0]
    extra = tmp_path / "bad.json"
    extra.write_text(json.dumps(bad))
    before = untouched(host)
    run = site(spark01, "-e", f"@{extra}")
    assert run.rc != 0, run
    refused = refusals(run)
    named = {message.split(" ")[0].split("[")[0].split("=")[0] for message in refused}
    assert len(bad) > 20 and sorted(set(bad) - named) == [], refused
    assert_untouched(host, before)


def test_an_engine_beyond_loopback_without_its_firewall_is_refused_before_anything_changes(host, spark01):
    """Issue 40: seen, site.yml -e ds4_host=0.0.0.0 on a Spark without a gateway ended ok, the engine open
    to every host with no key and no ds4 table in nftables. Refused by name now; the Spark is as it was."""
    before = untouched(host)
    run = site(spark01, "-e", "ds4_host=0.0.0.0")
    assert run.rc != 0, run
    assert [m for m in refusals(run) if m.startswith('ds4_host "0.0.0.0" is beyond loopback')], run
    assert_untouched(host, before)
    assert host.socket("tcp://127.0.0.1:8000").is_listening
    assert not host.socket("tcp://0.0.0.0:8000").is_listening


SECRET = "sk-live-Quux0ZPb9"


def test_a_secret_is_shown_at_no_verbosity_nor_in_a_diff(host, spark01):
    """What an operator reads: the default callback's text at -vvv, all of it."""
    # The sandbox's hub is plain http: the token may go there only because this says so.
    settings = {
        "ds4_extra_env": {"OPENAI_API_KEY": SECRET},
        "ds4_hf_token": "hf_" + SECRET,
        "ds4_hf_token_over_http": True,
    }
    env = json.dumps(settings)
    before = untouched(host)
    run = site(spark01, "--check", "--diff", "-vvv", "-e", env, callback=None)
    out = run.output + run.stderr
    assert run.rc == 0, run
    assert SECRET not in out
    assert "OPENAI_API_KEY=hmac-sha256:" in out, "the diff shows the variable, its value as a keyed digest"
    bad = json.dumps({"ds4_extra_env": {"OPENAI_API_KEY": SECRET + "\n"}})
    run = site(spark01, "-vvv", "-e", bad, callback=None)
    out = run.output + run.stderr
    assert run.rc != 0 and "ds4_extra_env value of OPENAI_API_KEY must not contain control characters" in out
    assert SECRET not in out
    assert_untouched(host, before)


LOCK = "/run/ds4-fleet/run.lock"


def hold_lock(host, controller, pid):
    """Write the lock as a run of CONTROLLER, ansible-playbook pid PID, would."""
    play = "Provision the ds4 engine on each Spark"
    record = json.dumps(
        {"controller": controller, "pid": pid, "user": "carol", "playbook": play, "since": 1.0,
         "since_text": "2026-12-01 09:00:00 UTC"}
    )  # fmt: skip
    host.run_expect([0], f"install -d -m 0700 {os.path.dirname(LOCK)} && printf '%s\\n' '{record}' > {LOCK}")


def test_a_run_on_a_spark_another_run_holds_waits_then_refuses_naming_it(host, spark01):
    # The other run: a process of this controller that is alive for the whole test.
    other = subprocess.Popen(["sleep", "600"])
    try:
        hold_lock(host, socket.gethostname(), other.pid)
        before = untouched(host)
        run = site(spark01, "-e", "ds4_run_lock_wait=3")
        assert run.rc != 0, run
        assert run.said(
            f"another ds4-fleet run holds this Spark: carol on {socket.gethostname()} (pid {other.pid}, "
            "Provision the ds4 engine on each Spark, since 2026-12-01 09:00:00 UTC); waited 3 s"
        ), run
        assert_untouched(host, before)
    finally:
        other.kill()
        other.wait()
    # Now the holder is gone without releasing (a killed run): the next run takes the Spark over.
    run = site(spark01)
    assert run.rc == 0, run
    assert run.changed(spark01) == 0, run
    assert host.run(f"test -e {LOCK}").rc != 0, "the run released the Spark at its end"


def test_a_run_held_from_another_controller_is_never_taken_over(host, spark01):
    hold_lock(host, "another-controller", 4242)
    try:
        run = site(spark01, "-e", "ds4_run_lock_wait=2")
        assert run.rc != 0 and run.said("carol on another-controller (pid 4242"), run
        assert run.said(f"remove {LOCK} on the Spark"), run
        assert json.loads(host.file(LOCK).content_string)["controller"] == "another-controller"
    finally:
        host.run(f"rm -f {LOCK}")


@pytest.mark.ends_scenario
def test_the_upgrade_path_a_failed_release_rolled_back_then_0731_with_old_weights_by_policy(sparks, tmp_path):
    """An operator's upgrade path, on both Sparks at once: a release that fails its smoke test is rolled
    back; then the upgrade to v0.6.5 on 0731, spark01 under ds4_old_weights remove, spark02 under keep."""
    # Step 1: v0.6.6 answers Lyon; each Spark is rolled back to v0.6.3 and serves again.
    run = site(BOTH, "-e", "ds4_release=v0.6.6")
    assert run.rc != 0, run
    for name, host in sparks.items():
        assert run.failed(name) == 1, run
        assert run.said('Activation of v0.6.6 failed at "Ask the engine the smoke question', name), run
        assert run.said("'The capital of France is Lyon.'", name), run
        assert run.said("Rolled back to v0.6.3", name) and run.said("it serves again", name), run
        assert run.said("Last lines of the engine's log:", name), run
        assert release(host) == "v0.6.3", name
        assert host.run(f"test -e {ROOT}/previous").rc != 0, (
            "a first switch that failed leaves no previous link"
        )
        assert host.service("ds4").is_running, name
        assert "v0.6.3" in host.check_output("systemctl show ds4 -p Description --value")
        assert "Paris" in ask(host)
        assert models(host) == LEGACY, name

    # Step 2: the upgrade to 0731, each Spark under its policy (host variables of an added inventory:
    # -e would set one for both).
    policy = {"spark01": "remove", "spark02": "keep"}
    policies = tmp_path / "policies.yml"
    policies.write_text(
        "all:\n  hosts:\n" + "".join(f"    {n}:\n      ds4_old_weights: {p}\n" for n, p in policy.items())
    )
    run = site(BOTH, *UPGRADE, inventory=[os.environ["MOLECULE_INVENTORY_FILE"], policies])
    assert run.rc == 0, run
    for name, host in sparks.items():
        assert release(host) == "v0.6.5", name
        assert release(host, "previous") == "v0.6.3", name
        assert "Paris" in ask(host)
        description = host.check_output("systemctl show ds4 -p Description --value")
        assert "v0.6.5" in description and "imatrix-0731.gguf" in description
        expected = GEN_0731 if policy[name] == "remove" else GEN_0731 | LEGACY
        assert models(host) == expected, name
        env = host.file("/etc/ds4/ds4.env").content_string
        assert "DS4_DSPARK_MODEL=/var/lib/ds4/gguf/DSpark-drafter-Q2K-Q8-0731.gguf" in env


SUPPORT_0731 = "/var/lib/ds4/gguf/DeepSeek-V4-Flash-DSpark-support-0731.gguf"


def upstream_pin(commit_name):
    """The settings that pin upstream's stand-in at one commit of its main, under an operator's own name:
    (the release name, the -e arguments)."""
    commit = UPSTREAM[commit_name]
    name = f"dwarfstar-g{commit[:12]}"
    return name, [
        "-e", f"ds4_engine_repo={UPSTREAM_REPO}",
        "-e", "ds4_engine_lineage=upstream",
        "-e", "ds4_engine_branch=main",
        "-e", f"ds4_release={name}",
        "-e", f"ds4_release_commit={commit}",
        "-e", "ds4_model_generation=0731",
    ]  # fmt: skip


def upstream_upgrade(tmp_path, commit_name):
    """upgrade.yml across both Sparks (a canary, then the rest) to upstream at COMMIT_NAME: the release
    name, the run, the summary by host and the summary document."""
    name, pin = upstream_pin(commit_name)
    summary = tmp_path / f"summary-{commit_name}.json"
    run = play(PROJECT / "playbooks" / "upgrade.yml", "-e", f"ds4_upgrade_summary_json={summary}", *pin)
    document = json.loads(summary.read_text())
    return name, run, {h["host"]: h for h in document["hosts"]}, document


def http_status(host, path):
    return host.check_output(f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:8000{path}")


@pytest.mark.ends_scenario
def test_upstream_pinned_by_commit_serves_upgrades_with_a_canary_and_refuses_a_broken_commit(
    sparks, tmp_path
):
    """Issue 52's proof, after the upgrade path: the untagged upstream stand-in at a commit, provisioned by
    site.yml on both Sparks; upgrade.yml to a later commit, canary first; a commit whose build fails stops
    the rollout with both still serving; the same upgrade again changes nothing."""
    # Step 1: site.yml provisions upstream at its first commit.
    first, pin = upstream_pin("first")
    run = site(BOTH, *pin)
    assert run.rc == 0, run
    for name, host in sparks.items():
        assert release(host) == first, name
        stamp = json.loads(host.file(f"{ROOT}/releases/{first}/.ds4-build.json").content_string)
        assert (stamp["commit"], stamp["lineage"]) == (UPSTREAM["first"], "upstream"), stamp
        assert "Paris" in ask(host)
        # Readiness is /v1/models; upstream serves no /v1/stats, /metrics or /health.
        assert [http_status(host, path) for path in ("/v1/models", "/v1/stats", "/metrics", "/health")] == [
            "200", "404", "404", "404",
        ]  # fmt: skip
        # Upstream's DSpark: the switch, and its support GGUF (fetched from the hub, its size and hash the
        # hub's at the pinned commit) on --mtp-model; never the fork's drafter or its variable.
        start = host.check_output("systemctl show ds4 -p ExecStart --value")
        assert f"--dspark --mtp-model {SUPPORT_0731}" in start and "--no-spec" not in start, start
        assert host.file(SUPPORT_0731).is_file and host.file(SUPPORT_0731).size > 0
        assert "DS4_DSPARK_MODEL" not in host.file("/etc/ds4/ds4.env").content_string
        assert first in host.check_output("systemctl show ds4 -p Description --value")

    # Step 2: upgrade.yml to the later commit: the canary (spark01) first, then spark02; the drain asks
    # upstream's engine nothing it does not serve.
    second, run, summary, document = upstream_upgrade(tmp_path, "second")
    assert run.rc == 0, run
    assert document["stopped"] is None
    started = {}
    for name, host in sparks.items():
        assert summary[name]["upgrade"]["outcome"] == "switched", summary[name]
        assert summary[name]["upgrade"]["detail"] == f"{first} -> {second}; serving {second}"
        assert summary[name]["upgrade"]["drain"]["message"].startswith(
            "upstream's engine serves no count of requests in flight"
        ), summary[name]["upgrade"]["drain"]
        assert (release(host), release(host, "previous")) == (second, first), name
        assert "Paris" in ask(host)
        started[name] = int(
            host.check_output("systemctl show ds4 -p ExecMainStartTimestampMonotonic --value")
        )
    # One kernel's monotonic clock across the sandbox's containers: the canary restarted first.
    assert started["spark01"] < started["spark02"], started

    # Step 3: a commit whose build fails cannot be staged: no switch anywhere, both serve on, and the
    # message names the commit and where the build log shows the failure.
    broken, run, summary, document = upstream_upgrade(tmp_path, "broken")
    assert run.rc != 0, run
    assert document["stopped"], document
    for name, host in sparks.items():
        outcome = summary[name]["upgrade"]
        assert outcome["outcome"] == "not staged", outcome
        assert f"building release {broken} (commit {UPSTREAM['broken']}) failed: " in outcome["detail"], (
            outcome
        )
        assert f"of the build log /var/log/ds4/build-{broken}.log" in outcome["detail"], outcome
        assert "the failed step starts at line " in outcome["detail"], outcome
        assert release(host) == second and host.service("ds4").is_running, name
        assert "Paris" in ask(host)
        assert host.run(f"test -e {ROOT}/releases/{broken}").rc != 0, name

    # Step 4: the same upgrade again: nothing to switch, no engine restarted.
    before = {name: exec_pid(host) for name, host in sparks.items()}
    _, run, summary, _ = upstream_upgrade(tmp_path, "second")
    assert run.rc == 0, run
    for name, host in sparks.items():
        assert summary[name]["upgrade"]["outcome"] == "unchanged", summary[name]
        assert exec_pid(host) == before[name] and release(host) == second, name
