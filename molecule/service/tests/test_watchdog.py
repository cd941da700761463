"""The watchdog and the metrics on test_service.py's sandbox Spark; each test leaves it serving as it was.

converge.yml runs the watchdog every 5 s with 3 failures and a 4 s probe timeout, and restarts after 1 s,
so that a hang is handled in seconds; the role's defaults take about 80 s, and the issue asks for about 90.
Every wait is on a condition, bounded. On a machine shared with other work a run of the watchdog can take
seconds itself, which stretches its period: the tests assert the sequence (three failed probes in a row,
then the kill) and the 90 s of the requirement, and print the time measured beside the settings' bound.
"""

import json
import re
import time

from spark import failed_for_good, journal, local_listeners, main_pid, route_address, show
from test_service import API, DROPINS, answers, play
from waits import wait_for

INTERVAL, FAILURES, TIMEOUT, RESTART_SEC = 5, 3, 4, 1
# The bound for the role's defaults, which this scenario's settings are well within.
REQUIRED = 90
# From the hang to systemd starting a new engine: the first failing probe within one interval, two more
# one interval apart, the last one's timeout, a second of timer accuracy per probe, then RestartSec.
BOUND = INTERVAL * FAILURES + TIMEOUT + FAILURES + RESTART_SEC
STATE = "/var/lib/ds4/watchdog.json"


def watchdog_state(host):
    return json.loads(host.file(STATE).content_string)


def runs(host):
    """How many times the watchdog has run."""
    return watchdog_state(host)["runs"]


def node_metrics(host):
    return host.check_output("curl -fsS --max-time 5 http://%s:9100/metrics", route_address(host))


def series_in(host, line):
    """node_exporter's page when it has `line`, else None."""
    text = node_metrics(host)
    return text if line in text.splitlines() else None


def test_the_watchdog_runs_on_its_timer_as_a_sandboxed_oneshot(host):
    timer = host.service("ds4-watchdog.timer")
    assert timer.is_enabled and timer.is_running
    assert show(host, "ds4-watchdog.timer", "AccuracyUSec")["AccuracyUSec"] == "1s"
    # One TimersMonotonic= line for each of the timer's settings.
    timers = host.check_output("systemctl show ds4-watchdog.timer --property=TimersMonotonic")
    assert "{ OnActiveUSec=5s ;" in timers and "{ OnUnitActiveUSec=5s ;" in timers, timers
    first = runs(host)
    wait_for("two runs of the watchdog", lambda: runs(host) >= first + 2, timeout=60)
    assert watchdog_state(host)["verdict"] == "ok"
    exec_start = show(host, "ds4-watchdog.service", "ExecStart")["ExecStart"]
    assert "--failures 3 --timeout 4 --restart" in exec_start
    # Only what the watchdog says, not systemd's lines about each run.
    assert "Finished ds4-watchdog" not in journal(host, "ds4-watchdog", 0)
    report = host.run("systemd-analyze security ds4-watchdog --no-pager").stdout
    exposure = float(report.rsplit("Overall exposure level for ds4-watchdog.service: ", 1)[1].split()[0])
    assert exposure <= 3.0, report


def test_node_exporter_listens_on_the_sparks_default_route_address_alone(host):
    """Issue 40, point 5: not on every address (a Spark's other networks, loopback) by default."""
    assert local_listeners(host, 9100) == [f"{route_address(host)}:9100"]
    assert host.run("curl -fsS --max-time 5 -o /dev/null http://127.0.0.1:9100/metrics").rc != 0


def test_node_exporter_serves_what_the_spark_runs_and_the_engines_metrics(host):
    assert host.service("prometheus-node-exporter").is_running
    # The engine itself stays on loopback; its series reach Prometheus through node_exporter.
    assert host.socket("tcp://127.0.0.1:8000").is_listening
    assert not host.socket("tcp://0.0.0.0:8000").is_listening
    stamp = json.loads(host.file("/opt/ds4/current/.ds4-build.json").content_string)
    text = wait_for(
        "the engine's series in node_exporter", lambda: series_in(host, "ds4_requests_inflight 0")
    )
    info = next(line for line in text.splitlines() if line.startswith("ds4_spark_info{"))
    assert 'release="v0.6.5"' in info and f'commit="{stamp["commit"]}"' in info
    assert 'generation="0731"' in info and 'speculation="dspark"' in info
    for line in (
        "ds4_spark_engine_up 1",
        "ds4_spark_unit_active 1",
        "ds4_spark_watchdog_enabled 1",
        "ds4_spark_update_check_known 1",
        "node_textfile_scrape_error 0",
    ):
        assert line in text.splitlines(), line


def restarts_total(host):
    """The watchdog's restarts so far, as node_exporter serves them (0 before the first)."""
    prefix = "ds4_spark_watchdog_restarts_total "
    found = [line for line in node_metrics(host).splitlines() if line.startswith(prefix)]
    return int(float(found[0][len(prefix) :])) if found else 0


def test_a_stopped_engine_is_killed_and_restarted_within_the_bound_saying_why(host):
    # Counted from what other tests' hangs left, whichever ran before.
    counted = restarts_total(host)
    before = main_pid(host)
    since = int(time.time())
    host.check_output(f"kill -STOP {before}")
    started = time.monotonic()
    wait_for("a new engine process", lambda: main_pid(host) not in (0, before), timeout=REQUIRED + 30)
    elapsed = time.monotonic() - started
    wait_for("the new engine to answer", lambda: answers(host), timeout=60)
    lines = journal(host, "ds4-watchdog", since)
    print(f"restarted {elapsed:.1f} s after the SIGSTOP (bound of these settings {BOUND} s)")
    said = [line for line in lines.splitlines() if f"(pid {before})" in line]
    assert [line.split(": ", 1)[0] for line in said] == [
        f"ds4.service (pid {before}) did not answer (1 of 3 before a restart)",
        f"ds4.service (pid {before}) did not answer (2 of 3 before a restart)",
        f"ds4.service (pid {before}) is hung",
    ], lines
    assert "killing it (SIGKILL) so that systemd restarts it" in lines
    assert "code=killed, status=9/KILL" in journal(host, "ds4", since)
    assert elapsed <= REQUIRED, f"restarted after {elapsed:.1f} s"
    text = wait_for(
        "the restart counted", lambda: series_in(host, f"ds4_spark_watchdog_restarts_total {counted + 1}")
    )
    assert "ds4_spark_engine_up 1" in text


def test_a_long_request_in_flight_is_never_restarted(host):
    # The stand-in engine holds the request until the test releases it: in flight for as many watchdog runs
    # as the test waits for, whatever the machine's load.
    pid, since = main_pid(host), int(time.time())
    hold_dir = "/run/ds4-standin"
    body = json.dumps(
        {
            "model": "deepseek-v4-flash",
            "max_tokens": 64,
            "messages": [
                {"role": "user", "content": "What is the capital of France? [[standin-hold:watchdog]]"}
            ],
        }
    )
    host.check_output(
        f"mkdir -p {hold_dir} && rm -f {hold_dir}/watchdog /tmp/long.out && echo '{body}' > /tmp/long.json"
    )
    host.check_output(
        'setsid sh -c \'curl -sS -w "\\n%{http_code}\\n" -H "Content-Type: application/json" '
        f"--data @/tmp/long.json {API}/v1/chat/completions > /tmp/long.out 2>&1' "
        "> /dev/null 2>&1 < /dev/null &"
    )
    try:
        wait_for(
            "the watchdog to see the request", lambda: watchdog_state(host)["verdict"] == "busy", timeout=60
        )
        first = runs(host)
        # More runs than make a hung engine, all while the request is held.
        wait_for(
            "more watchdog runs than failures allowed", lambda: runs(host) > first + FAILURES, timeout=60
        )
        holds = json.loads(host.check_output(f"curl -fsS --max-time 5 {API}/standin/holds"))
        # The watchdog's own probes (its User-Agent) saw the request in flight, more often than a hang needs.
        probes = holds["watchdog"]["readers"].get("ds4-fleet-watchdog", 0)
        assert holds["watchdog"]["requests"] == 1 and probes > FAILURES, holds
        assert "requests_inflight 1" in host.check_output(f"curl -fsS --max-time 5 {API}/metrics")
        assert host.file("/tmp/long.out").content_string == ""
    finally:
        host.check_output(f"touch {hold_dir}/watchdog")
    # Complete once curl has written the status code after the body.
    reply = wait_for(
        "the answer",
        lambda: re.search(r"\n\d{3}\n\Z", out := host.file("/tmp/long.out").content_string) and out,
        timeout=60,
    )
    assert reply.rstrip().endswith("200") and "Paris" in reply, reply
    assert main_pid(host) == pid
    lines = journal(host, "ds4-watchdog", since)
    assert "busy, not hung" in lines and "is hung" not in lines, lines


def test_an_engine_that_hangs_at_every_start_is_stopped_by_the_start_limit(host):
    hang = f"{DROPINS}/90-test-hang.conf"
    # After the readiness probe passed: ready, then stopped, at every start.
    host.check_output(
        f"printf '[Service]\\nExecStartPost=/bin/sh -c \"kill -STOP $$MAINPID\"\\n' > {hang}"
        " && systemctl daemon-reload"
    )
    since = int(time.time())
    try:
        # The starts before this test do not count towards the limit.
        host.check_output("systemctl reset-failed ds4")
        host.run("systemctl restart ds4")
        failed_for_good(host, timeout=400)
        assert show(host, "ds4.service", "Result")["Result"] == "signal"
        wait_for(
            "the watchdog to see it", lambda: watchdog_state(host)["verdict"] == "start-limit-hit", timeout=60
        )
        stopped = show(host, "ds4.service", "NRestarts", "ActiveState", "MainPID")
        kills = journal(host, "ds4-watchdog", since).count("is hung:")
        # The 3 starts systemd allows within the window, each killed by the watchdog; then nothing.
        assert kills == 3, journal(host, "ds4-watchdog", since)
        after = runs(host)
        wait_for("two more watchdog runs", lambda: runs(host) >= after + 2, timeout=60)
        assert show(host, "ds4.service", "NRestarts", "ActiveState", "MainPID") == stopped
        lines = journal(host, "ds4-watchdog", since)
        assert lines.count("is hung:") == kills and lines.count("hit its start limit") == 1
        assert "systemctl reset-failed ds4 && systemctl start ds4" in lines
        assert "Start request repeated too quickly" in journal(host, "ds4", since)
        assert "ds4_spark_unit_start_limit_hit 1" in node_metrics(host)
    finally:
        host.check_output(f"rm -f {hang} && systemctl daemon-reload && systemctl reset-failed ds4")
        host.check_output("systemctl start ds4")
    assert answers(host)


def test_turned_off_the_watchdog_reports_a_hung_engine_and_leaves_it(host):
    run = play("-e", "ds4_watchdog=false")
    assert run.rc == 0, run
    try:
        assert "--no-restart" in show(host, "ds4-watchdog.service", "ExecStart")["ExecStart"]
        pid = main_pid(host)
        since = int(time.time())
        host.check_output(f"kill -STOP {pid}")
        wait_for(
            "the hang reported",
            lambda: "the watchdog is turned off" in journal(host, "ds4-watchdog", since),
            timeout=REQUIRED,
        )
        assert main_pid(host) == pid and "killing it" not in journal(host, "ds4-watchdog", since)
        assert "ds4_spark_watchdog_enabled 0" in node_metrics(host)
        host.check_output(f"kill -CONT {pid}")
    finally:
        run = play()
    assert run.rc == 0, run
    assert " --restart " in show(host, "ds4-watchdog.service", "ExecStart")["ExecStart"]
    assert answers(host)
