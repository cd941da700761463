"""The activation's rollback target on a sandbox Spark (issue 26, point 4): a run killed between the switch
and the smoke test must not make the release it switched to, which never passed, the target of the next
rollback. The test runs site.yml itself (the speed gate skipped: the rollback target is at issue here, not
the speed), from whatever release converge or another test left, asserting each run's exit status and
results (molecule/shared/nested.py); it ends with v0.6.5 serving on its default launch settings, as
converge left the Spark.

The kill is arranged, not timed: the run's smoke question carries the stand-in engine's
`[[standin-hold:NAME]]` marker, so its answer waits for a file the test makes; the run's `during` waits
until current points at the new release and the engine holds the smoke question, then kills the whole run.
"""

import json

import pytest
from spark import ask, holds, release
from test_perf import site

HOLD_DIR = "/run/ds4-standin"
HOLD = "last-good"
RECORD = "/var/lib/ds4-fleet/last-good.json"
# The launch files: the environment, and the unit with ds4-server's arguments (--ctx among them).
LAUNCH = ("/etc/ds4/ds4.env", "/etc/systemd/system/ds4.service")


def launch(host):
    return "".join(host.file(path).content_string for path in LAUNCH)


def smoke_held(host):
    """Whether the engine holds the killed run's smoke question (not while it restarts)."""
    held = holds(host, check=False)
    return held is not None and held.get(HOLD, {}).get("requests", 0) > 0


@pytest.fixture
def hold(host):
    """The stand-in engine's hold, closed (no file yet) for the test; gone after it."""
    host.check_output(f"mkdir -p {HOLD_DIR} && rm -f {HOLD_DIR}/{HOLD}")
    yield
    host.check_output(f"rm -f {HOLD_DIR}/{HOLD}")


def test_a_run_killed_before_the_smoke_test_leaves_the_last_good_release_to_roll_back_to(host, hold):
    # A: v0.6.5 on the default launch settings passes its smoke test and is recorded.
    run = site("-e", "ds4_release=v0.6.5", gate="skip")
    assert run.rc == 0, run
    assert release(host) == "v0.6.5"
    record = host.file(RECORD)
    assert (record.user, record.mode) == ("root", 0o600)
    assert json.loads(record.content_string)["release"] == "v0.6.5"
    launch_a = launch(host)
    assert "65536" not in launch_a

    # B: v0.6.5.2 on other launch settings; the run is killed once current points at B and the engine holds
    # its smoke question, i.e. after the switch and before the smoke test could pass.
    smoke_prompt = f"What is the capital of France? Answer in one sentence. [[standin-hold:{HOLD}]]"

    def kill_once_switched_and_held(live):
        live.wait_for(
            "the run of v0.6.5.2 switched current to it and asked the held smoke question",
            lambda: release(host) == "v0.6.5.2" and smoke_held(host),
        )
        live.kill()

    # As JSON: a key=value pair would end at the prompt's first space.
    settings_b = {"ds4_release": "v0.6.5.2", "ds4_ctx": 65536, "ds4_smoke_prompt": smoke_prompt}
    try:
        run = site("-e", json.dumps(settings_b), gate="skip", during=kill_once_switched_and_held)
    finally:
        host.check_output(f"touch {HOLD_DIR}/{HOLD}")
    assert run.killed, run
    assert release(host) == "v0.6.5.2" and "65536" in launch(host)
    assert json.loads(host.file(RECORD).content_string)["release"] == "v0.6.5", "B never passed"

    # C: v0.6.6 fails its smoke test (the stand-in answers Lyon). The rollback returns to A, with A's launch
    # settings, not to B, which current named when the run began.
    run = site("-e", "ds4_release=v0.6.6", gate="skip")
    assert run.rc != 0
    assert run.said('Activation of v0.6.6 failed at "Ask the engine the smoke question'), run
    assert run.said("Rolled back to v0.6.5 (/opt/ds4/current -> /opt/ds4/releases/v0.6.5)"), run
    assert run.said("it serves again"), run
    assert release(host) == "v0.6.5"
    assert launch(host) == launch_a
    description = host.check_output("systemctl show ds4 -p Description --value")
    assert "v0.6.5" in description and "v0.6.5.2" not in description and "v0.6.6" not in description
    assert host.service("ds4").is_running and "Paris" in ask(host)
    assert json.loads(host.file(RECORD).content_string)["release"] == "v0.6.5"
