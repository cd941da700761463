"""playbooks/upgrade.yml and playbooks/status.yml on three sandbox Sparks that converge left on v0.6.3.

Each test starts from converge's state (all three on v0.6.3) and leaves the Sparks on it, except the
operator's upgrade path, which ends with all three on v0.6.5: it is marked `ends_scenario` and so runs after
the others whatever the order (conftest.py, molecule/shared/ordering.py).
- converge left all three on v0.6.3, serving, and status.yml says so;
- a Spark that cannot stage (an unknown tag), alone: the rollout stops before any switch;
- v0.6.6 (it answers "Lyon") with spark03 pinned to v0.6.7 (its build fails) and a failure share of 34%:
  spark03 cannot stage, one of three is under the share, so the rollout goes on; the canary fails its
  smoke test and the rollout stops there: the canary is rolled back and serves, the others are untouched;
- status.yml in check mode reports what the Sparks run and changes nothing;
- the upgrade path, in two steps: (1) v0.6.5 with spark02 pinned to v0.6.6 by an extra inventory: the
  canary passes, with a held request in flight that completes across its switch; spark02 fails and is
  rolled back; spark03 is never switched; (2) v0.6.5 again, resuming the stopped rollout: all three end on
  v0.6.5 and serve.
The playbooks run nested, as an operator runs them, with the repository's ansible.cfg (molecule/shared/
nested.py); each case asserts the exit status, the recap's counts and plays by host (the run's jsonl
events), the summary (its JSON), the load balancer hooks' log, what each Spark runs (read on the Spark
itself) and what status.yml reports.
"""

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from nested import play as nested_play
from spark import ask, sandbox_host, show
from waits import wait_for

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
SCENARIO = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"])
# The directory, so that the sandbox group_vars linked beside the inventory file apply too.
INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
PREFIX = f"mol-{os.environ['MOLECULE_SCENARIO_NAME']}-"
NAMES = ("spark01", "spark02", "spark03")
QUESTION = "What is the capital of France? Answer in one sentence."


@pytest.fixture(scope="module")
def sparks():
    return {name: sandbox_host(name) for name in NAMES}


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("fleet")


def play(playbook, *args, work, extra_inventory=None, env_extra=None):
    """A playbook of the repository, nested, as an operator runs it: a nested.Run."""
    return nested_play(
        ROOT / "playbooks" / playbook,
        *args,
        inventory=[INVENTORY, extra_inventory] if extra_inventory else INVENTORY,
        env={"DS4_FLEET_LB_LOG": str(work / "lb.log"), **(env_extra or {})},
    )


def status(work, *args):
    """status.yml's JSON, by host, and the run."""
    path = work / "status.json"
    path.unlink(missing_ok=True)
    run = play("status.yml", "-e", f"ds4_status_json={path}", *args, work=work)
    assert run.rc == 0, run
    return {h["host"]: h for h in json.loads(path.read_text())["hosts"]}, run


def upgrade(work, *args, extra_inventory=None, env_extra=None):
    """upgrade.yml with the test's load balancer hooks: the run, its summary by host, the hooks' events."""
    summary = work / "summary.json"
    summary.unlink(missing_ok=True)
    (work / "lb.log").write_text("")
    run = play(
        "upgrade.yml",
        "-e", f"ds4_upgrade_summary_json={summary}",
        "-e", f"ds4_upgrade_lb_out_tasks={SCENARIO / 'hooks' / 'lb-out.yml'}",
        "-e", f"ds4_upgrade_lb_in_tasks={SCENARIO / 'hooks' / 'lb-in.yml'}",
        *args,
        work=work,
        extra_inventory=extra_inventory,
        env_extra=env_extra,
    )  # fmt: skip
    assert summary.exists(), run
    document = json.loads(summary.read_text())
    events = [tuple(line.split()[:2]) for line in (work / "lb.log").read_text().splitlines()]
    return run, document, {h["host"]: h for h in document["hosts"]}, events


def running(host):
    """What a Spark runs, read on it: the release current names, the unit's state and main process, and
    the engine's answer to the smoke question."""
    props = show(host, "ds4.service", "ActiveState", "MainPID", "ExecMainStartTimestamp")
    return {
        "release": host.check_output("readlink /opt/ds4/current").rsplit("/", 1)[-1],
        "active": props["ActiveState"],
        "pid": props["MainPID"],
        "started": props["ExecMainStartTimestamp"],
        "answer": ask(host, QUESTION, check=False),
    }


def fleet(sparks):
    return {name: running(host) for name, host in sparks.items()}


def recap(run, host):
    """(unreachable, failed) of HOST in the run's recap."""
    return run.unreachable(host), run.failed(host)


CLEANUP = "Clean up on the Sparks that switched"


# --- the starting point ---


def test_converge_left_all_three_on_v063_serving(sparks, work):
    now = fleet(sparks)
    for name in NAMES:
        assert now[name]["release"] == "v0.6.3" and now[name]["active"] == "active", now
        assert "Paris" in now[name]["answer"]
    report, _ = status(work)
    assert list(report) == list(NAMES)
    for name in NAMES:
        record = report[name]
        assert (record["service"], record["release"], record["answering"]) == ("active", "v0.6.3", True)
        assert (record["generation"], record["speculation"], record["context"]) == ("0731", "dspark", 524288)
        # The feed names v0.6.5, newer than what runs.
        assert record["update"]["available"] is True and record["update"]["latest"] == "v0.6.5"
        assert record["requests_inflight"] == 0 and record["uptime_s"] > 0 and record["free_disk_bytes"] > 0
        assert record["notes"] == []


# --- a Spark that cannot stage ---


def test_a_spark_that_cannot_stage_stops_the_rollout_before_any_switch(sparks, work):
    before = fleet(sparks)
    run, document, summary, events = upgrade(work, "-e", "ds4_release=v0.9.9", "-l", "spark03")
    assert run.rc == 2, run
    assert list(summary) == ["spark03"]
    assert summary["spark03"]["upgrade"]["outcome"] == "not staged"
    assert "v0.9.9 (ds4_release) does not exist" in summary["spark03"]["upgrade"]["detail"]
    assert document["stopped"].startswith(
        "the rollout stopped before any switch: 1 of 1 Sparks could not be staged"
    )
    assert events == [] and "Switch the staged Sparks" not in "".join(run.plays_of("spark03"))
    assert fleet(sparks) == before


# --- a release that fails on the canary, and a Spark that cannot stage under the allowed share ---


def test_a_release_failing_its_smoke_test_stops_at_the_canary_which_is_rolled_back(sparks, work):
    pinned = work / "pinned-v067.yml"
    # In the inventory, not with -e, which would override spark03's own value.
    pinned.write_text(
        "sparks:\n  vars:\n    ds4_release: v0.6.6\n  hosts:\n    spark03:\n      ds4_release: v0.6.7\n"
    )
    before = fleet(sparks)
    run, document, summary, events = upgrade(
        work, "-e", "ds4_upgrade_max_fail_percentage=34", extra_inventory=pinned
    )
    assert run.rc == 2, run
    after = fleet(sparks)

    # The canary switched, failed its smoke test on the Lyon answer, and was rolled back: it serves v0.6.3.
    assert summary["spark01"]["upgrade"]["outcome"] == "rolled back"
    assert "Lyon" in summary["spark01"]["upgrade"]["detail"]
    assert after["spark01"]["release"] == "v0.6.3" and "Paris" in after["spark01"]["answer"]
    assert after["spark01"]["pid"] != before["spark01"]["pid"]
    # spark02 was staged but never switched, spark03 could not be staged (its build fails): one of three
    # is within the 34% allowed, so the rollout went on to the canary. Both run the same engine process.
    assert summary["spark02"]["upgrade"]["outcome"] == "not switched"
    assert summary["spark03"]["upgrade"]["outcome"] == "not staged"
    # The failed build names its commit (issue 52).
    assert "building release v0.6.7 (commit " in summary["spark03"]["upgrade"]["detail"]
    assert ") failed: `/usr/bin/make cuda-spark" in summary["spark03"]["upgrade"]["detail"]
    for name in ("spark02", "spark03"):
        assert after[name] == before[name]
    assert document["stopped"].startswith("the rollout stopped after batch 1 (spark01): 1 of 1 failed")
    # Out of the load balancer and back in once it served again; the others never left it.
    assert events == [("spark01", "out"), ("spark01", "in")]
    # No cleanup anywhere; each Spark not on v0.6.6 fails in the recap.
    assert all(CLEANUP not in run.plays_of(name) for name in NAMES)
    assert [recap(run, name) for name in NAMES] == [(0, 1)] * 3

    report, _ = status(work)
    for name in NAMES:
        assert (report[name]["release"], report[name]["service"], report[name]["answering"]) == (
            "v0.6.3",
            "active",
            True,
        )
        # The rollback put the launch settings back with the release: nothing disagrees.
        assert report[name]["notes"] == []


# --- the operator's upgrade path: a later Spark fails, a request in flight on the canary, then resume ---


HOLD_DIR = "/run/ds4-standin"  # where the stand-in engine looks for the file that releases a held request
DRAIN_AGENT = "ds4-fleet-drain"  # the User-Agent of the drain's reads (module_utils/_spark/engine_http.py)


def holds(spark):
    """The stand-in engine's open holds: {name: {"reads": in-flight reads while held, "readers": the same
    per User-Agent, "requests": n}}."""
    return json.loads(spark.check_output("curl -fsS http://127.0.0.1:8000/standin/holds"))


def held_request_on_canary(spark01, work, result):
    """Arrange a request in flight through the canary's drain, in order, whatever the machine's load:
    once the canary leaves the load balancer, send it a request that the stand-in engine holds; once the
    engine counts it in flight, open the hook's gate (the drain starts after it); once the drain has read
    the in-flight count, release the request. The answer, and when the Spark saw it, go into `result`."""
    spark01.check_output(f"mkdir -p {HOLD_DIR} && rm -f {HOLD_DIR}/canary")
    log = work / "lb.log"
    client = None
    try:
        wait_for(
            "the canary leaves the load balancer",
            lambda: log.exists() and "spark01 out" in log.read_text(),
            600,
        )
        body = json.dumps(
            {
                "model": "deepseek-v4-flash",
                "max_tokens": 64,
                "messages": [{"role": "user", "content": f"[[standin-hold:canary]] {QUESTION}"}],
            }
        )
        client = subprocess.Popen(
            ["podman", "exec", f"{PREFIX}spark01", "sh", "-c",
             'curl -sS --max-time 600 -w "\\n%{http_code}\\n" -H "Content-Type: application/json" -d "$1" '
             'http://127.0.0.1:8000/v1/chat/completions; date +%s.%N', "sh", body],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        wait_for("the canary's engine holds the request in flight", lambda: "canary" in holds(spark01), 300)
        # The drain's own looks: the watchdog reads the same count on its timer, and its probe must not
        # be taken for the drain's.
        looked = holds(spark01)["canary"]["readers"].get(DRAIN_AGENT, 0)
        (work / "lb.gate").touch()
        wait_for(
            "the drain has read the canary's requests in flight",
            lambda: holds(spark01)["canary"]["readers"].get(DRAIN_AGENT, 0) > looked,
            180,
        )
    except AssertionError as error:
        result["error"] = str(error)
    finally:
        # Whatever happened, let the hook and the request go on, so that the upgrade ends.
        (work / "lb.gate").touch()
        spark01.run(f"touch {HOLD_DIR}/canary")
    if client is not None:
        output = client.communicate(timeout=600)[0]
        result["rc"] = client.returncode
        result["output"], result["done"] = output.rstrip("\n").rsplit("\n", 1)


# --- the report changes nothing ---


def test_status_in_check_mode_reports_what_runs_and_changes_nothing(sparks, work):
    before = fleet(sparks)
    report, run = status(work, "--check")
    assert [report[name]["release"] for name in NAMES] == [before[name]["release"] for name in NAMES]
    assert all(recap(run, name) == (0, 0) for name in NAMES)
    assert all(run.changed(name) == 0 for name in NAMES), run
    assert fleet(sparks) == before


@pytest.mark.ends_scenario
def test_the_upgrade_path_a_later_spark_failing_stops_the_rollout_then_a_good_release_resumes_it(
    sparks, work
):
    """Step 1: v0.6.5 with spark02 pinned to v0.6.6: the canary switches with a request in flight that
    completes, spark02 fails and is rolled back, spark03 is never switched. Step 2: v0.6.5 again resumes
    the stopped rollout, and all three end on it."""
    # --- step 1: a later Spark fails, with a request in flight on the canary ---
    pinned = work / "pinned.yml"
    pinned.write_text(
        "sparks:\n  vars:\n    ds4_release: v0.6.5\n  hosts:\n    spark02:\n      ds4_release: v0.6.6\n"
    )
    before = fleet(sparks)
    request = {}
    client = threading.Thread(target=held_request_on_canary, args=(sparks["spark01"], work, request))
    client.start()
    run, document, summary, events = upgrade(
        work, extra_inventory=pinned, env_extra={"DS4_FLEET_LB_GATE": str(work / "lb.gate")}
    )
    client.join(timeout=600)
    assert not client.is_alive() and "error" not in request, request
    assert run.rc == 2, run
    after = fleet(sparks)

    # Each Spark is on what the summary says, and the summary says what the Sparks run.
    assert summary["spark01"]["upgrade"]["outcome"] == "switched"
    assert summary["spark01"]["upgrade"]["detail"] == "v0.6.3 -> v0.6.5; serving v0.6.5"
    assert summary["spark02"]["upgrade"]["outcome"] == "rolled back"
    assert summary["spark02"]["upgrade"]["target"] == "v0.6.6"
    assert summary["spark03"]["upgrade"]["outcome"] == "not switched"
    assert document["stopped"].startswith("the rollout stopped after batch 2 (spark02): 1 of 1 failed")
    for name in NAMES:
        assert summary[name]["release"] == after[name]["release"] and "Paris" in after[name]["answer"]
    assert [after[name]["release"] for name in NAMES] == ["v0.6.5", "v0.6.3", "v0.6.3"]
    assert after["spark03"] == before["spark03"]
    assert events == [("spark01", "out"), ("spark01", "in"), ("spark02", "out"), ("spark02", "in")]
    # The cleanup ran where the switch succeeded, and only there.
    assert [CLEANUP in run.plays_of(name) for name in NAMES] == [True, False, False]
    assert [recap(run, name) for name in NAMES] == [(0, 0), (0, 1), (0, 1)]

    # The request held on the canary after it left the load balancer was answered in full, and the drain
    # waited for it: it found it in flight, and the engine was asked to stop only after the answer (both
    # times read on the Spark's clock).
    assert request.get("rc") == 0, request
    body, code = request["output"].rsplit("\n", 1)
    assert code == "200" and "Paris" in json.loads(body)["choices"][0]["message"]["content"]
    drain = summary["spark01"]["upgrade"]["drain"]
    assert drain["inflight_at_start"] >= 1 and drain["drained"] and not drain["timed_out"], drain
    stops = sparks["spark01"].check_output(
        "journalctl -u ds4.service -o short-unix --no-pager | grep 'shutdown requested' | tail -1"
    )
    assert float(stops.split()[0]) >= float(request["done"]), (stops, request)

    report, _ = status(work)
    assert [report[name]["release"] for name in NAMES] == ["v0.6.5", "v0.6.3", "v0.6.3"]
    assert [report[name]["update"]["available"] for name in NAMES] == [False, True, True]
    assert all(report[name]["answering"] and report[name]["notes"] == [] for name in NAMES)

    # --- step 2: the stopped rollout resumed with a good release ---
    before = fleet(sparks)
    run, document, summary, events = upgrade(work, "-e", "ds4_release=v0.6.5")
    assert run.rc == 0, run
    after = fleet(sparks)

    # The canary already ran v0.6.5: switched again in name only, without a restart.
    assert summary["spark01"]["upgrade"]["outcome"] == "unchanged"
    assert after["spark01"] == before["spark01"]
    for name in ("spark02", "spark03"):
        assert summary[name]["upgrade"]["outcome"] == "switched"
        assert summary[name]["upgrade"]["detail"] == "v0.6.3 -> v0.6.5; serving v0.6.5"
    for name in NAMES:
        assert after[name]["release"] == "v0.6.5" and after[name]["active"] == "active"
        assert "Paris" in after[name]["answer"]
    assert document["stopped"] is None
    assert sorted(events) == sorted((name, way) for name in NAMES for way in ("out", "in"))
    assert [recap(run, name) for name in NAMES] == [(0, 0)] * 3

    report, _ = status(work)
    for name in NAMES:
        record = report[name]
        assert (record["release"], record["service"], record["answering"]) == ("v0.6.5", "active", True)
        assert record["update"]["available"] is False and record["notes"] == []
        assert record["previous"] == "v0.6.3"
