"""The pair watched, verified and its link checked (docs/pair.md "Supervision and the route", "Cable";
docs/verify.md "Two Sparks as a pair"):

- a coordinator whose worker is stopped answers `coordinator route does not start at layer 0`: its watchdog
  says it waits, never kills it, and its textfile says the route is broken (ds4_spark_pair_route_complete 0,
  what Ds4PairRouteBroken fires on); a coordinator that hangs (SIGSTOP) is killed and the pair serves again;
- playbooks/verify.yml holds the pair to the published two-Spark figures, through its coordinator;
- site.yml refuses a link that does not carry the declared MTU, a peer that answers no ping on the link,
  and ds4_pair_link_manage on a Spark without netplan, each with nothing changed.

Each test leaves the pair serving as it found it.
"""

import json
import re

import pytest
from members import COORDINATOR, WORKER, answers, site_run
from nested import PROJECT, play
from spark import ask, journal, main_pid, sandbox_host, show
from waits import wait_for

TEXTFILE = "/var/lib/prometheus/node-exporter/ds4.prom"
WATCHDOG_STATE = "/var/lib/ds4/watchdog.json"
# An engine's restart (RestartSec, the stand-in's load) and the worker's registration, on a loaded machine;
# a hang's detection (the watchdog's interval times its failures, and a probe's time-out) besides.
BACK_TIMEOUT = 240


def series(host, name):
    """The value of the textfile's series NAME (without labels), or None when absent."""
    text = host.run(f"cat {TEXTFILE}").stdout
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def watchdog_runs(host):
    done = host.run(f"cat {WATCHDOG_STATE}")
    return json.loads(done.stdout)["runs"] if done.rc == 0 else 0


def test_the_watchdog_leaves_a_coordinator_waiting_for_its_worker_alone_and_says_the_route_is_broken():
    coordinator, worker = sandbox_host(COORDINATOR), sandbox_host(WORKER)
    pid = main_pid(coordinator)
    since = int(float(coordinator.check_output("date +%s.%N")))
    worker.check_output("systemctl stop ds4-worker.service")
    try:
        wait_for(
            "the coordinator's textfile to say its route is broken",
            lambda: series(coordinator, "ds4_spark_pair_route_complete") == 0,
            timeout=BACK_TIMEOUT,
        )
        # More watchdog runs than its failures before a kill (4), all with the same engine process.
        runs = watchdog_runs(coordinator)
        wait_for(
            "five more runs of the coordinator's watchdog",
            lambda: watchdog_runs(coordinator) >= runs + 5,
            timeout=BACK_TIMEOUT,
        )
        assert main_pid(coordinator) == pid
        assert show(coordinator, "ds4.service", "ActiveState")["ActiveState"] == "active"
        assert series(coordinator, "ds4_spark_engine_up") == 0
        assert series(coordinator, "ds4_spark_watchdog_probe_failures") == 0
        said = journal(coordinator, "ds4-watchdog", since)
        assert "answers, but its route is incomplete (coordinator route does not start at layer 0)" in said
        assert "not hung, not restarted" in said and "SIGKILL" not in said
        assert ask(coordinator, check=False) is None  # the route error, not an answer
    finally:
        worker.check_output("systemctl start ds4-worker.service")
    wait_for("the pair to answer again", lambda: answers(coordinator), timeout=BACK_TIMEOUT)
    wait_for(
        "the coordinator's textfile to say its route is whole again",
        lambda: series(coordinator, "ds4_spark_pair_route_complete") == 1,
        timeout=BACK_TIMEOUT,
    )
    assert main_pid(coordinator) == pid
    # The worker's watchdog follows its unit alone: it serves no API. Its own timer, not the coordinator's:
    # its textfile may still be the one written while the worker was stopped.
    wait_for(
        "the worker's textfile to say its engine is up",
        lambda: series(worker, "ds4_spark_engine_up") == 1,
        timeout=BACK_TIMEOUT,
    )
    assert series(worker, "ds4_spark_pair_route_complete") is None


def test_the_watchdog_kills_a_hung_coordinator_and_the_pair_serves_again():
    coordinator = sandbox_host(COORDINATOR)
    pid = main_pid(coordinator)
    since = int(float(coordinator.check_output("date +%s.%N")))
    coordinator.check_output(f"kill -STOP {pid}")
    try:
        wait_for(
            "the watchdog to kill the hung coordinator",
            lambda: main_pid(coordinator) not in (0, pid),
            timeout=BACK_TIMEOUT,
        )
    finally:
        coordinator.run(f"kill -CONT {pid}")
    assert "is hung: it did not answer" in journal(coordinator, "ds4-watchdog", since)
    wait_for("the pair to answer again", lambda: answers(coordinator), timeout=BACK_TIMEOUT)


def test_verify_holds_the_pair_to_the_published_two_spark_figures(tmp_path):
    out = tmp_path / "verify.json"
    run = play(
        PROJECT / "playbooks/verify.yml",
        "-l", f"{COORDINATOR},{WORKER}",
        "-e", f"ds4_verify_json={out}",
    )  # fmt: skip
    assert run.rc == 0, run
    reports = {report["host"]: report for report in json.loads(out.read_text())["hosts"]}
    pair = reports[COORDINATOR]
    assert pair["pair"] is True and pair["reference"]["pair"] is True
    assert pair["reference"]["figures"] == {"prefill_2k": 122, "decode_2k": 11.4}
    # The sandbox's stand-in runs at twice a GB10's figures (ds4_verify_reference_scale 2), a pair paced
    # at the two-Spark figures' share of them.
    assert [row["reference"] for row in pair["figures"]] == [244.0, 22.8]
    assert [row["figure"] for row in pair["figures"]] == ["prefill_2k", "decode_2k"]
    assert all(row["measured"] for row in pair["figures"]), pair
    assert reports[WORKER]["verdict"] == "measured through its coordinator"
    assert run.said(f"{WORKER}: the worker of pair pair01, measured through its coordinator {COORDINATOR}")
    assert answers(sandbox_host(COORDINATOR))


def refused(*args, drop=None):
    """site.yml on the pair with ARGS: the run, and whether both members were left as they were."""
    run, before, after = site_run(*args, drop=drop)
    unchanged = after == before and run.changed(COORDINATOR) == 0 and run.changed(WORKER) == 0
    assert answers(sandbox_host(COORDINATOR))
    return run, unchanged


def test_a_link_that_does_not_carry_the_declared_mtu_is_refused_with_nothing_changed():
    # The sandbox's link is a Podman network of MTU 1500: a declared 9000 does not hold.
    run, unchanged = refused("-e", '{"ds4_pair_link_mtu": 9000}')
    assert run.rc != 0, run
    assert run.said("ds4_pair_link_mtu 9000 does not hold from spark04 to spark05 at 10.77.0.2"), run
    assert run.said("while a small packet is answered"), run
    assert unchanged, run


def test_a_peer_that_answers_no_ping_on_the_link_is_refused_with_nothing_changed():
    run, unchanged = refused(drop="icmp type echo-request ip saddr 10.77.0.1 drop")
    assert run.rc != 0, run
    assert run.said("ds4_pairs['pair01']: spark04 does not reach spark05 at its link address 10.77.0.2"), run
    assert unchanged, run


def test_managing_the_link_on_a_spark_without_netplan_is_refused_with_nothing_changed():
    run, unchanged = refused(
        "-e", '{"ds4_pair_link_manage": true, "ds4_pair_link_interface": "enP2p1s0f1np1"}'
    )
    assert run.rc != 0, run
    assert run.said("ds4_pair_link_manage is on, but spark04 has no netplan"), run
    assert unchanged, run


@pytest.mark.parametrize(
    ("interface", "refusal"),
    [
        ("enP2p1s0f0np0", "ds4_pair_link_interface enP2p1s0f0np0 is not an interface of spark04"),
        # The sandbox's link address is on its link port: named on loopback, another interface holds it.
        ("lo", "coordinator.address 10.77.0.1 is already held by enP2p1s0f1np1 on spark04"),
    ],
)
def test_a_link_the_run_cannot_address_is_refused_before_its_netplan_file_is_written(interface, refusal):
    link = {"ds4_pair_link_manage": True, "ds4_pair_link_interface": interface}
    run, unchanged = refused("-e", json.dumps(link))
    assert run.rc != 0, run
    assert run.said(refusal), run
    assert not run.said("has no netplan"), run
    assert unchanged, run
