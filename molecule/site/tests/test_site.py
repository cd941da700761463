"""site.yml on sandbox Sparks, asserted on the hosts. After converge both serve v0.6.3 on the legacy
generation. The tests run in file order and build on each other's state: each nested `ansible-playbook
site.yml` is a run whose exit status and message are asserted, so that an expected failure (the smoke
test of v0.6.6) fails the scenario only when the expectation is wrong.
"""

import difflib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(PROJECT / "tests" / "unit"))
from settings_cases import site_rounds  # noqa: E402

ROOT = "/opt/ds4"
GGUF = "/var/lib/ds4/gguf"
LEGACY = {
    "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf",
    "DSpark-drafter-Q2K-Q8.gguf",
}
GEN_0731 = {
    "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf",
    "DSpark-drafter-Q2K-Q8-0731.gguf",
}
UPGRADE = ["-e", "ds4_release=v0.6.5", "-e", "ds4_model_generation=0731"]


def site(limit, *args, env_extra=None):
    """Run site.yml on one Spark of this scenario; (exit status, output)."""
    ansible = shutil.which(
        "ansible-playbook", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    env = {key: value for key, value in os.environ.items() if key != "ANSIBLE_FORCE_COLOR"}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"), **(env_extra or {}))
    proc = subprocess.run(
        [ansible, "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(PROJECT / "site.yml"), "-l", limit,
         "-e", "ds4_release=v0.6.3", "-e", "ds4_model_generation=legacy", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800,
    )  # fmt: skip
    return proc.returncode, proc.stdout


def flat(output):
    """The output with its line breaks and indents as single spaces: the YAML callback wraps long messages."""
    return " ".join(output.split())


def changed(output, name):
    line = next(line for line in output.splitlines() if line.startswith(f"{name} ") and "changed=" in line)
    return int(line.split("changed=")[1].split()[0])


def release(host, link="current"):
    return host.run(f"readlink {ROOT}/{link}").stdout.strip().rsplit("/", 1)[-1]


def models(host):
    return {name for name in host.check_output(f"ls {GGUF}").split() if name.endswith(".gguf")}


def answer(host):
    body = json.dumps(
        {
            "model": "deepseek-v4-flash",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
        }
    )
    out = host.check_output(f"curl -fsS --max-time 30 -H 'Content-Type: application/json' -d '{body}' "
                            "http://127.0.0.1:8000/v1/chat/completions")  # fmt: skip
    return json.loads(out)["choices"][0]["message"]["content"]


def state(host):
    """What a run must not change: links, launch files, units, weights and releases, with their times."""
    return host.check_output(
        f"ls -l --time-style=+%s.%N {ROOT} {ROOT}/releases {GGUF}; "
        "stat -c '%n %s %Y' /etc/ds4/ds4.env /etc/systemd/system/ds4.service; "
        "systemctl show ds4 -p ExecMainPID -p ActiveState"
    )


@pytest.fixture
def name(host):
    return host.backend.get_hostname().removeprefix("mol-site-")


@pytest.fixture
def spark01(name):
    """The refusal tests change nothing by design and read no host state: one Spark proves them."""
    if name != "spark01":
        pytest.skip("run on spark01 only")
    return name


def test_fresh_provision_serves_the_release_and_model_it_names(host):
    assert release(host) == "v0.6.3"
    assert host.service("ds4").is_running and host.service("ds4").is_enabled
    assert models(host) == LEGACY
    description = host.check_output("systemctl show ds4 -p Description --value")
    assert "v0.6.3" in description and "chat-v2-imatrix.gguf" in description
    assert "Paris" in answer(host)
    assert host.socket("tcp://127.0.0.1:8000").is_listening


def test_a_check_mode_upgrade_changes_nothing(host, name):
    before = state(host)
    rc, out = site(name, "--check", "--diff", *UPGRADE)
    assert rc == 0, out
    assert "Point current at v0.6.5" in out
    assert state(host) == before


NOTHING_TO_CHANGE = "Nothing to change: the Spark is as the last finished run left it"


def test_a_second_run_changes_nothing_and_restarts_nothing(host, name):
    pid = host.check_output("systemctl show ds4 -p ExecMainPID --value")
    rc, out = site(name)
    assert rc == 0, out
    assert changed(out, name) == 0, out
    assert NOTHING_TO_CHANGE in flat(out), "a converged Spark's run ends early"
    assert host.check_output("systemctl show ds4 -p ExecMainPID --value") == pid


def test_a_drifted_file_is_found_and_fixed_with_the_same_settings(host, spark01):
    """However short a run with nothing to do, it still looks: a line added to the engine's environment
    file is taken out again, and the engine restarts on the file as written."""
    pid = host.check_output("systemctl show ds4 -p ExecMainPID --value")
    host.check_output("echo DS4_DRIFTED=1 >> /etc/ds4/ds4.env")
    rc, out = site(spark01)
    assert rc == 0, out
    drift = "The whole run follows: file /etc/ds4/ds4.env changed since the last finished run"
    assert drift in flat(out), out
    assert changed(out, spark01) > 0, out
    assert "DS4_DRIFTED" not in host.file("/etc/ds4/ds4.env").content_string
    assert host.check_output("systemctl show ds4 -p ExecMainPID --value") != pid
    assert "Paris" in answer(host)
    rc, out = site(spark01)
    assert rc == 0 and changed(out, spark01) == 0 and NOTHING_TO_CHANGE in flat(out), out


def test_a_stopped_engine_is_found_and_started(host, spark01):
    host.check_output("systemctl stop ds4")
    rc, out = site(spark01)
    assert rc == 0, out
    assert "The whole run follows: unit ds4.service changed since the last finished run" in flat(out), out
    assert host.service("ds4").is_running and "Paris" in answer(host)


def test_a_changed_setting_reaches_its_file_and_back(host, spark01):
    dropin = "/etc/systemd/system/ds4.service.d/00-ds4-fleet-supervision.conf"
    rc, out = site(spark01, "-e", "ds4_restart_sec=31")
    assert rc == 0, out
    assert "The whole run follows: the settings or the collection differ" in flat(out), out
    assert changed(out, spark01) > 0, out
    assert "RestartSec=31" in host.file(dropin).content_string
    rc, out = site(spark01)
    assert rc == 0, out
    assert changed(out, spark01) > 0, out
    assert "RestartSec=31" not in host.file(dropin).content_string


def test_with_skipping_turned_off_every_task_runs_and_changes_nothing(host, spark01):
    rc, out = site(spark01, "-e", "ds4_skip_when_unchanged=false")
    assert rc == 0, out
    assert changed(out, spark01) == 0 and NOTHING_TO_CHANGE not in flat(out), out
    assert "TASK [ds4_preflight : " in out and "TASK [ds4_activate : " in out, out


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


def refusals(output):
    """The refused variables' messages, from the json callback's report of the settings check."""
    report = json.loads(output[output.index("{") :])
    for play in report["plays"]:
        for task in play["tasks"]:
            for result in task["hosts"].values():
                if result.get("refused"):
                    return result["refused"]
    return []


def test_bad_settings_are_refused_by_name_before_anything_changes(host, spark01, tmp_path):
    """The first round of bad values, all at once, through site.yml on a serving Spark: each is named and
    the Spark is left as it was. Every other round is given to the same check in a playbook by
    tests/unit/plugins/action/test_ds4_settings_check.py, without a Spark: a refusal needs none."""
    bad = site_rounds()[0]
    extra = tmp_path / "bad.json"
    extra.write_text(json.dumps(bad))
    before = untouched(host)
    rc, out = site(spark01, "-e", f"@{extra}", env_extra={"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json"})
    assert rc != 0, out
    refused = refusals(out)
    named = {message.split(" ")[0].split("[")[0].split("=")[0] for message in refused}
    assert len(bad) > 20 and sorted(set(bad) - named) == [], refused
    assert_untouched(host, before)


SECRET = "sk-live-Quux0ZPb9"


def test_a_secret_is_shown_at_no_verbosity_nor_in_a_diff(host, spark01):
    # The sandbox's hub is plain http: the token may go there only because this says so.
    settings = {
        "ds4_extra_env": {"OPENAI_API_KEY": SECRET},
        "ds4_hf_token": "hf_" + SECRET,
        "ds4_hf_token_over_http": True,
    }
    env = json.dumps(settings)
    before = untouched(host)
    rc, out = site(spark01, "--check", "--diff", "-vvv", "-e", env)
    assert rc == 0, out
    assert SECRET not in out
    assert "OPENAI_API_KEY=hmac-sha256:" in out, "the diff shows the variable, its value as a keyed digest"
    rc, out = site(spark01, "-vvv", "-e", json.dumps({"ds4_extra_env": {"OPENAI_API_KEY": SECRET + "\n"}}))
    assert rc != 0 and "ds4_extra_env value of OPENAI_API_KEY must not contain control characters" in out
    assert SECRET not in out
    assert_untouched(host, before)


LOCK = "/run/ds4-fleet.lock"


def hold_lock(host, controller, pid):
    """Write the lock as a run of CONTROLLER, ansible-playbook pid PID, would."""
    play = "Provision the ds4 engine on each Spark"
    record = json.dumps(
        {"controller": controller, "pid": pid, "user": "carol", "playbook": play, "since": 1.0,
         "since_text": "2026-12-01 09:00:00 UTC"}
    )  # fmt: skip
    host.run_expect([0], f"printf '%s\\n' '{record}' > {LOCK}")


def test_a_run_on_a_spark_another_run_holds_waits_then_refuses_naming_it(host, spark01):
    # The other run: a process of this controller that is alive for the whole test.
    other = subprocess.Popen(["sleep", "600"])
    try:
        hold_lock(host, socket.gethostname(), other.pid)
        before = untouched(host)
        rc, out = site(spark01, "-e", "ds4_run_lock_wait=3")
        flat = " ".join(out.split())
        assert rc != 0
        assert (
            f"another ds4-fleet run holds this Spark: carol on {socket.gethostname()} (pid {other.pid}, "
            "Provision the ds4 engine on each Spark, since 2026-12-01 09:00:00 UTC); waited 3 s" in flat
        ), out
        assert_untouched(host, before)
    finally:
        other.kill()
        other.wait()
    # Now the holder is gone without releasing (a killed run): the next run takes the Spark over.
    rc, out = site(spark01)
    assert rc == 0, out
    assert changed(out, spark01) == 0, out
    assert host.run(f"test -e {LOCK}").rc != 0, "the run released the Spark at its end"


def test_a_run_held_from_another_controller_is_never_taken_over(host, spark01):
    hold_lock(host, "another-controller", 4242)
    try:
        rc, out = site(spark01, "-e", "ds4_run_lock_wait=2")
        assert rc != 0 and "carol on another-controller (pid 4242" in out, out
        assert f"remove {LOCK} on the Spark" in " ".join(out.split())
        assert json.loads(host.file(LOCK).content_string)["controller"] == "another-controller"
    finally:
        host.run(f"rm -f {LOCK}")


def test_a_release_that_fails_its_smoke_test_is_rolled_back(host, name):
    rc, out = site(name, "-e", "ds4_release=v0.6.6")
    assert rc != 0
    assert 'Activation of v0.6.6 failed at "Ask the engine the smoke question' in out, out
    assert "'The capital of France is Lyon.'" in out
    assert "Rolled back to v0.6.3" in out and "it serves again" in out
    assert "Last lines of the engine's log:" in out
    assert release(host) == "v0.6.3"
    assert host.run(f"test -e {ROOT}/previous").rc != 0, "a first switch that failed leaves no previous link"
    assert host.service("ds4").is_running
    assert "v0.6.3" in host.check_output("systemctl show ds4 -p Description --value")
    assert "Paris" in answer(host)
    assert models(host) == LEGACY


@pytest.mark.parametrize("policy", ["remove", "keep"])
def test_the_upgrade_to_0731_serves_the_new_pair_and_treats_old_weights_by_policy(host, name, policy):
    # spark01 upgrades under remove, spark02 under keep.
    if (name, policy) not in (("spark01", "remove"), ("spark02", "keep")):
        pytest.skip(f"{name} upgrades under the other policy")
    rc, out = site(name, *UPGRADE, "-e", f"ds4_old_weights={policy}")
    assert rc == 0, out
    assert release(host) == "v0.6.5"
    assert release(host, "previous") == "v0.6.3"
    assert "Paris" in answer(host)
    description = host.check_output("systemctl show ds4 -p Description --value")
    assert "v0.6.5" in description and "imatrix-0731.gguf" in description
    expected = GEN_0731 if policy == "remove" else GEN_0731 | LEGACY
    assert models(host) == expected
    env = host.file("/etc/ds4/ds4.env").content_string
    assert "DS4_DSPARK_MODEL=/var/lib/ds4/gguf/DSpark-drafter-Q2K-Q8-0731.gguf" in env
