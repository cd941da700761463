"""The activation's rollback target on a sandbox Spark (issue 26, point 4): a run killed between the switch
and the smoke test must not make the release it switched to, which never passed, the target of the next
rollback. After test_perf.py the Spark serves v0.6.5; these tests run site.yml themselves (the speed gate
skipped: the rollback target is at issue here, not the speed), asserting each run's exit status and output.

The kill is arranged, not timed: the run's smoke question carries the stand-in engine's
`[[standin-hold:NAME]]` marker, so its answer waits for a file the test makes; the test waits until current
points at the new release and the engine holds the smoke question, then kills the whole run.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from waits import wait_for

PROJECT = Path(__file__).resolve().parents[3]
HOLD_DIR = "/run/ds4-standin"
HOLD = "last-good"
RECORD = "/var/lib/ds4-fleet/last-good.json"
# The launch files: the environment, and the unit with ds4-server's arguments (--ctx among them).
LAUNCH = ("/etc/ds4/ds4.env", "/etc/systemd/system/ds4.service")


def site_argv(*args):
    ansible = shutil.which(
        "ansible-playbook", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    return [
        ansible, "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(PROJECT / "site.yml"), "-l", "spark01",
        "-e", "ds4_perf_gate=skip", *args,
    ]  # fmt: skip


def site_env():
    env = {key: value for key, value in os.environ.items() if key != "ANSIBLE_FORCE_COLOR"}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_CONFIG=str(PROJECT / "ansible.cfg"))
    return env


def site(*args):
    proc = subprocess.run(
        site_argv(*args), env=site_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=1800,
    )  # fmt: skip
    return proc.returncode, proc.stdout


def release(host):
    return host.run("readlink /opt/ds4/current").stdout.strip().rsplit("/", 1)[-1]


def answer(host):
    body = json.dumps(
        {"max_tokens": 16, "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    )
    out = host.check_output(f"curl -fsS --max-time 30 -d '{body}' http://127.0.0.1:8000/v1/chat/completions")
    return json.loads(out)["choices"][0]["message"]["content"]


def launch(host):
    return "".join(host.file(path).content_string for path in LAUNCH)


def smoke_held(host):
    """Whether the engine holds the killed run's smoke question (the stand-in's open holds)."""
    got = host.run("curl -fsS --max-time 5 http://127.0.0.1:8000/standin/holds")
    return got.rc == 0 and json.loads(got.stdout).get(HOLD, {}).get("requests", 0) > 0


def test_a_run_killed_before_the_smoke_test_leaves_the_last_good_release_to_roll_back_to(host, tmp_path):
    # A: v0.6.5 on the default launch settings passes its smoke test and is recorded.
    rc, out = site("-e", "ds4_release=v0.6.5")
    assert rc == 0, out
    assert release(host) == "v0.6.5"
    record = host.file(RECORD)
    assert (record.user, record.mode) == ("root", 0o600)
    assert json.loads(record.content_string)["release"] == "v0.6.5"
    launch_a = launch(host)
    assert "65536" not in launch_a

    # B: v0.6.5.2 on other launch settings; the run is killed once current points at B and the engine holds
    # its smoke question, i.e. after the switch and before the smoke test could pass.
    host.check_output(f"mkdir -p {HOLD_DIR} && rm -f {HOLD_DIR}/{HOLD}")
    smoke_prompt = f"What is the capital of France? Answer in one sentence. [[standin-hold:{HOLD}]]"
    log = tmp_path / "run-b.log"

    def switched_and_held():
        assert run_b.poll() is None, f"the run of v0.6.5.2 ended before it was killed:\n{log.read_text()}"
        return release(host) == "v0.6.5.2" and smoke_held(host)

    # As JSON: a key=value pair would end at the prompt's first space.
    settings_b = {"ds4_release": "v0.6.5.2", "ds4_ctx": 65536, "ds4_smoke_prompt": smoke_prompt}
    args_b = ["-e", json.dumps(settings_b)]
    with log.open("w") as output:
        run_b = subprocess.Popen(
            site_argv(*args_b),
            env=site_env(), stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(
            "the run of v0.6.5.2 switched current to it and asked the held smoke question",
            switched_and_held,
            timeout=900,
            interval=1,
        )
    finally:
        if run_b.poll() is None:
            os.killpg(run_b.pid, signal.SIGKILL)
        run_b.wait()
        host.check_output(f"touch {HOLD_DIR}/{HOLD}")
    assert release(host) == "v0.6.5.2" and "65536" in launch(host)
    assert json.loads(host.file(RECORD).content_string)["release"] == "v0.6.5", "B never passed"

    # C: v0.6.6 fails its smoke test (the stand-in answers Lyon). The rollback returns to A, with A's launch
    # settings, not to B, which current named when the run began.
    rc, out = site("-e", "ds4_release=v0.6.6")
    assert rc != 0
    # Flattened: the result format may fold a long message over several lines.
    flat = " ".join(out.split())
    assert 'Activation of v0.6.6 failed at "Ask the engine the smoke question' in flat, out
    assert "Rolled back to v0.6.5 (/opt/ds4/current -> /opt/ds4/releases/v0.6.5)" in flat, out
    assert "it serves again" in flat, out
    assert release(host) == "v0.6.5"
    assert launch(host) == launch_a
    description = host.check_output("systemctl show ds4 -p Description --value")
    assert "v0.6.5" in description and "v0.6.5.2" not in description and "v0.6.6" not in description
    assert host.service("ds4").is_running and "Paris" in answer(host)
    assert json.loads(host.file(RECORD).content_string)["release"] == "v0.6.5"
