"""The watchdog: its decisions (ds4_watchdog.decide), and the host-side script run as the timer runs it,
against a small HTTP server playing the engine's /metrics and a `systemctl` on PATH that reads the unit's
state from a file and records what it is asked to do."""

import json
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._spark.watchdog import (
    decide,
    detection_bound,
    firewall_loaded,
    firewall_outcome,
    load_state,
    new_state,
    parse_show,
    route_state,
)
from local_http import Handler, local_http

ROOT = Path(__file__).resolve().parents[5]
SCRIPT = ROOT / "roles/ds4_service/files/ds4-watchdog"
MODULES = [
    ROOT / "plugins/module_utils/_spark" / name
    for name in (
        "watchdog.py",
        "metrics.py",
        "exposition.py",
        "gpu_health.py",
        "engine_http.py",
        "no_follow.py",
        "listener.py",
    )
]
DEFAULTS = ROOT / "roles/ds4_service/defaults/main.yml"
GPU_STANDIN = ROOT / "tests/standins/gpu/install.py"

ACTIVE = {
    "ActiveState": "active",
    "SubState": "running",
    "Result": "success",
    "MainPID": "4242",
    "NRestarts": "0",
}
ANSWERED = {"answered": True, "inflight": 0, "error": None}
BUSY = {"answered": True, "inflight": 2, "error": None}
SILENT = {
    "answered": False,
    "inflight": None,
    "error": "http://127.0.0.1:8000/metrics did not answer within 5 s",
}


def run_decisions(probes, unit=ACTIVE, failures=3, restart=True, state=None):
    """decide() over a series of probes, one second apart; the list of decisions."""
    state = state or new_state()
    decisions = []
    for second, probe in enumerate(probes):
        decision = decide(unit, probe, state, failures, 1000.0 + 10 * second, restart=restart)
        state = decision["state"]
        decisions.append(decision)
    return decisions


def test_an_engine_that_answers_is_left_alone_and_said_to_run_once():
    decisions = run_decisions([ANSWERED, ANSWERED, ANSWERED])
    assert [d["verdict"] for d in decisions] == ["ok"] * 3
    assert [d["action"] for d in decisions] == ["none"] * 3
    assert [d["log"] for d in decisions] == [True, False, False]


def test_a_busy_engine_is_never_hung_however_long_it_stays_busy():
    decisions = run_decisions([BUSY] * 20)
    assert {d["verdict"] for d in decisions} == {"busy"} and {d["action"] for d in decisions} == {"none"}
    assert "2 requests in flight: busy, not hung" in decisions[0]["message"]
    assert decisions[-1]["state"]["failures"] == 0
    assert decisions[-1]["state"]["runs"] == 20


def test_an_engine_that_stops_answering_is_killed_after_the_set_number_of_failures():
    decisions = run_decisions([ANSWERED, SILENT, SILENT, SILENT])
    assert [d["verdict"] for d in decisions] == ["ok", "failing", "failing", "hung"]
    assert [d["action"] for d in decisions] == ["none", "none", "none", "kill"]
    assert all(d["log"] and d["warning"] for d in decisions[1:])
    assert (
        "did not answer (1 of 3 before a restart): http://127.0.0.1:8000/metrics" in decisions[1]["message"]
    )
    why = decisions[-1]["message"]
    assert "is hung: it did not answer 3 probes in a row over 20 s" in why
    assert "SIGKILL" in why and "Restart=on-failure" in why and "watchdog restart 1" in why
    state = decisions[-1]["state"]
    assert (state["restarts"], state["failures"], state["last_restart_at"]) == (1, 0, 1030.0)
    assert state["last_restart_reason"] in why


def test_one_answer_between_failures_starts_the_count_again():
    decisions = run_decisions([SILENT, SILENT, BUSY, SILENT, SILENT])
    assert [d["action"] for d in decisions] == ["none"] * 5
    assert decisions[-1]["state"]["failures"] == 2


def test_a_new_engine_process_starts_the_count_again():
    state = run_decisions([SILENT, SILENT])[-1]["state"]
    restarted = dict(ACTIVE, MainPID="5151")
    decision = decide(restarted, SILENT, state, 3, 2000.0)
    assert decision["action"] == "none" and decision["state"]["failures"] == 1


@pytest.mark.parametrize(
    ("active", "sub", "verdict"),
    [
        ("activating", "start", "starting"),
        ("activating", "start-post", "starting"),
        ("activating", "auto-restart", "starting"),
        ("deactivating", "stop-sigterm", "starting"),
        ("inactive", "dead", "not-running"),
        ("failed", "failed", "not-running"),
    ],
)
def test_a_unit_that_is_not_active_is_never_probed_nor_touched(active, sub, verdict):
    # Failures seen before it stopped are forgotten.
    state = run_decisions([SILENT, SILENT])[-1]["state"]
    unit = dict(ACTIVE, ActiveState=active, SubState=sub, Result="exit-code")
    decision = decide(unit, None, state, 3, 2000.0)
    assert (decision["verdict"], decision["action"], decision["state"]["failures"]) == (verdict, "none", 0)
    assert decision["log"] and not decision["warning"]


def test_the_start_limit_stops_the_watchdog_too_and_is_said_once():
    unit = dict(ACTIVE, ActiveState="failed", SubState="failed", Result="start-limit-hit")
    decisions = run_decisions([None, None, None], unit=unit)
    assert [d["verdict"] for d in decisions] == ["start-limit-hit"] * 3
    assert [d["action"] for d in decisions] == ["none"] * 3
    assert [d["log"] for d in decisions] == [True, False, False]
    assert "systemctl reset-failed ds4" in decisions[0]["message"] and decisions[0]["warning"]


def test_a_unit_that_failed_on_a_restart_refused_at_the_start_limit_is_at_the_start_limit():
    # After a crash or a kill, systemd keeps that run's Result when it refuses the restart at the start limit:
    # only its journal says so, which the script reads and hands over.
    unit = dict(ACTIVE, ActiveState="failed", SubState="failed", Result="signal", MainPID="0")
    assert decide(unit, None, new_state(), 3, 2000.0)["verdict"] == "not-running"
    decision = decide(unit, None, new_state(), 3, 2000.0, start_limit_hit=True)
    assert (decision["verdict"], decision["action"]) == ("start-limit-hit", "none")
    # Only a failed unit is at its start limit, whatever the journal said before.
    decision = decide(
        dict(ACTIVE, ActiveState="inactive"), None, new_state(), 3, 2000.0, start_limit_hit=True
    )
    assert decision["verdict"] == "not-running"


def test_turned_off_it_reports_a_hung_engine_and_kills_nothing():
    decisions = run_decisions([SILENT] * 4, restart=False)
    assert [d["action"] for d in decisions] == ["none"] * 4
    assert decisions[2]["verdict"] == "hung" and "the watchdog is turned off" in decisions[2]["message"]
    assert decisions[-1]["state"]["restarts"] == 0


def test_an_active_unit_must_be_probed():
    with pytest.raises(ValueError):
        decide(ACTIVE, None, new_state(), 3, 0.0)


def test_a_damaged_state_file_reads_as_a_fresh_start():
    assert load_state("not a dict") == new_state()
    state = load_state(
        {"failures": -1, "restarts": True, "main_pid": "12", "verdict": 3, "last_restart_at": 9}
    )
    assert state == dict(new_state(), last_restart_at=9)


def test_systemctl_show_is_read_as_properties():
    assert parse_show("ActiveState=active\nMainPID=12\nResult=\n") == {
        "ActiveState": "active",
        "MainPID": "12",
        "Result": "",
    }


def test_the_defaults_restart_a_hung_engine_within_about_90_seconds():
    import yaml

    defaults = yaml.safe_load(DEFAULTS.read_text())
    bound = detection_bound(
        defaults["ds4_watchdog_interval"], defaults["ds4_watchdog_failures"], defaults["ds4_watchdog_timeout"]
    )
    # Detection (kill) plus systemd's RestartSec, plus a second of timer accuracy per run.
    total = bound + defaults["ds4_watchdog_failures"] + defaults["ds4_restart_sec"]
    assert total <= 90, total


# --- the script on a host ----------------------------------------------------------------------------

FAKE_SYSTEMCTL = textwrap.dedent(
    """\
    #!{python}
    import json, os, sys
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "calls"), "a") as calls:
        calls.write(" ".join(sys.argv[1:]) + "\\n")
    if sys.argv[1] == "show" and sys.argv[2] == "ds4-firewall.service":
        # The engine firewall's unit: active when the test made firewall.json, else not there.
        path = os.path.join(here, "firewall.json")
        print("ActiveState=" + (json.load(open(path))["ActiveState"] if os.path.exists(path) else "inactive"))
    elif sys.argv[1] == "show":
        with open(os.path.join(here, "unit.json")) as unit:
            for key, value in json.load(unit).items():
                print(f"{{key}}={{value}}")
    elif sys.argv[1] == "reload" and sys.argv[2] == "ds4-firewall.service":
        # As ExecReload=nft -f: the table the rules file holds (reload.txt), if the test gave one.
        rules = os.path.join(here, "reload.txt")
        if not os.path.exists(rules):
            sys.stderr.write("Job for ds4-firewall.service failed.")
            sys.exit(1)
        with open(rules) as src, open(os.path.join(here, "table.txt"), "w") as table:
            table.write(src.read())
    """
)

# `nft list table inet ds4_engine`: the table as the kernel holds it (table.txt), or nft's error.
FAKE_NFT = textwrap.dedent(
    """\
    #!{python}
    import os, sys
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "calls"), "a") as calls:
        calls.write("nft " + " ".join(sys.argv[1:]) + "\\n")
    path = os.path.join(here, "table.txt")
    if not os.path.exists(path):
        sys.stderr.write("Error: No such file or directory\\nlist table inet ds4_engine\\n")
        sys.exit(1)
    with open(path) as table:
        sys.stdout.write(table.read())
    """
)

FAKE_JOURNALCTL = textwrap.dedent(
    """\
    #!{python}
    import os, sys
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "calls"), "a") as calls:
        calls.write("journalctl " + " ".join(sys.argv[1:]) + "\\n")
    path = os.path.join(here, "journal.txt")
    if os.path.exists(path):
        with open(path) as journal:
            sys.stdout.write(journal.read())
    """
)

METRICS = (
    "# HELP ds4_requests_inflight Generation requests.\n"
    "# TYPE ds4_requests_inflight gauge\n"
    "ds4_requests_inflight {n}\n"
)


class Engine(Handler):
    inflight = 0
    extra = ""  # lines appended to /metrics
    hung = threading.Event()
    release = threading.Event()
    route_complete = True  # a pair's coordinator: whether its worker is registered
    posts: list = []

    def do_POST(self):  # noqa: N802 - the name http.server calls
        Engine.posts.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
        if self.hung.is_set():
            self.release.wait(5)
            return
        if self.route_complete:
            self.answer(200, b'{"choices": [{"text": "pong"}]}')
        else:
            self.answer(503, ROUTE_ERROR.encode())

    def do_GET(self):  # noqa: N802 - the name http.server calls
        if self.hung.is_set():
            self.release.wait(5)
            return
        body = (
            METRICS.format(n=self.inflight) + "ds4_uptime_seconds 12.5 1700000000000\n" + self.extra
        ).encode()
        self.answer(200, body)


@pytest.fixture
def engine():
    Engine.hung.clear()
    Engine.release.clear()
    Engine.inflight = 0
    Engine.extra = ""
    Engine.route_complete = True
    Engine.posts = []
    with local_http(Engine) as url:
        yield url
        Engine.release.set()


@pytest.fixture
def host(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy2(SCRIPT, lib / "ds4-watchdog")
    for module in MODULES:
        shutil.copy2(module, lib / module.name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text(FAKE_SYSTEMCTL.format(python=sys.executable))
    fake.chmod(0o755)
    fake = bin_dir / "journalctl"
    fake.write_text(FAKE_JOURNALCTL.format(python=sys.executable))
    fake.chmod(0o755)
    fake = bin_dir / "nft"
    fake.write_text(FAKE_NFT.format(python=sys.executable))
    fake.chmod(0o755)
    (bin_dir / "unit.json").write_text(json.dumps(ACTIVE))
    # A GB10's nvidia-smi (the GPU stand-in), on PATH after the fakes.
    subprocess.run(
        [sys.executable, str(GPU_STANDIN), "--root", str(tmp_path / "gpu"), "--persona", "gb10"],
        check=True,
        capture_output=True,
    )
    facts = tmp_path / "facts"
    facts.mkdir()
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    model = gguf / "base.gguf"
    model.write_bytes(b"GGUF" * 16)
    st = model.stat()
    record = {"name": "base.gguf", "sha256": "ab" * 32, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    record.update(ino=st.st_ino, dev=st.st_dev)
    (facts / "ds4_weights.fact").write_text(
        json.dumps(
            {"gguf_dir": str(gguf), "files": {"base": record, "dspark": dict(record, name="gone.gguf")}}
        )
    )
    fact = facts / "ds4.fact"
    configured = {
        "release": "v0.6.5",
        "commit": "d92d93ad",
        "generation": "0731",
        "speculation": "dspark",
        "models": {"base": "base.gguf", "dspark": "gone.gguf"},
        "update": {
            "status": "ok",
            "checked_at": "2026-09-01T03:00:00Z",
            "latest": "v0.6.6",
            "running": "v0.6.5",
            "update_available": True,
            "available_since": "2026-08-30T03:00:00Z",
        },
    }
    fact.write_text(f"#!/bin/sh\necho '{json.dumps(configured)}'\n")
    fact.chmod(0o755)
    return tmp_path


def watch(host, url, *args):
    """Run the installed script once, as the timer does; (exit status, stdout lines, textfile or None)."""
    textfile = host / "ds4.prom"
    command = [
        sys.executable,
        str(host / "lib/ds4-watchdog"),
        "--url",
        url,
        "--timeout",
        "0.5",
        "--failures",
        "3",
        "--state",
        str(host / "watchdog.json"),
        "--textfile",
        str(textfile),
        "--facts-dir",
        str(host / "facts"),
        "--gguf-dir",
        str(host / "gguf"),
        "--next-generation-bytes",
        "1000",
        # The engine stand-in listens in this test's process, as this user.
        "--user",
        pwd.getpwuid(os.getuid()).pw_name,
        *args,
    ]
    path = os.pathsep.join(
        (str(host / "bin"), str(host / "gpu/usr/bin"), os.environ.get("PATH", "/usr/bin:/bin"))
    )
    env = {"PATH": path}
    proc = subprocess.run(command, env=env, cwd=host, capture_output=True, text=True, timeout=30)
    assert proc.stderr == ""
    return proc.returncode, proc.stdout.splitlines(), textfile.read_text() if textfile.exists() else None


def calls(host):
    path = host / "bin/calls"
    return path.read_text().splitlines() if path.exists() else []


def kills(host):
    return [call for call in calls(host) if call.startswith("kill")]


def series(text):
    """Sample lines of a textfile by name and labels: {'name{labels}': value}."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, value = line.rsplit(" ", 1)
            samples[key] = float(value)
    return samples


def test_script_kills_a_hung_engine_on_the_third_failure_and_says_why(host, engine):
    code, out, _ = watch(host, engine)
    assert code == 0 and out == ["ds4.service (pid 4242) answers"]
    Engine.hung.set()
    for expected in (1, 2):
        code, out, _ = watch(host, engine)
        assert code == 0 and out[0].startswith(f"ds4.service (pid 4242) did not answer ({expected} of 3")
        assert kills(host) == []
    code, out, text = watch(host, engine)
    assert code == 0 and "is hung: it did not answer 3 probes in a row" in out[0]
    assert kills(host) == ["kill --signal=SIGKILL ds4.service"]
    samples = series(text)
    assert samples["ds4_spark_watchdog_restarts_total"] == 1 and samples["ds4_spark_engine_up"] == 0
    # A hung engine's own series are not carried over from before.
    assert "ds4_requests_inflight" not in samples


def test_script_never_writes_its_textfile_through_a_link_in_the_textfile_directory(host, engine):
    # The exporter's directory may be another user's: a link there must not aim root's write elsewhere.
    elsewhere = host / "etc-like"
    elsewhere.mkdir()
    (elsewhere / "ds4.prom").write_text("root's own\n")
    os.chmod(elsewhere / "ds4.prom", 0o600)
    (host / "linked").symlink_to(elsewhere)
    code, out, _ = watch(host, engine, "--textfile", str(host / "linked" / "ds4.prom"))
    assert code != 0 and any(
        "linked is a symbolic link: refusing to go through it" in line for line in out
    ), out
    assert (elsewhere / "ds4.prom").read_text() == "root's own\n"
    assert oct((elsewhere / "ds4.prom").stat().st_mode & 0o777) == "0o600"
    assert sorted(os.listdir(elsewhere)) == ["ds4.prom"]
    # A link at the file itself is replaced, never followed.
    exporter = host / "exporter"
    exporter.mkdir()
    (exporter / "ds4.prom").symlink_to(elsewhere / "ds4.prom")
    code, _, _ = watch(host, engine, "--textfile", str(exporter / "ds4.prom"))
    assert code == 0 and not (exporter / "ds4.prom").is_symlink()
    assert oct((exporter / "ds4.prom").stat().st_mode & 0o777) == "0o644"
    assert (elsewhere / "ds4.prom").read_text() == "root's own\n"


def test_script_leaves_a_busy_engine_alone_and_copies_its_metrics(host, engine):
    Engine.inflight = 1
    for _ in range(4):
        code, out, text = watch(host, engine)
        assert code == 0
    assert kills(host) == []
    samples = series(text)
    assert samples["ds4_requests_inflight"] == 1 and samples["ds4_spark_engine_up"] == 1
    # The engine's timestamp is dropped: node_exporter refuses them in textfiles.
    assert samples["ds4_uptime_seconds"] == 12.5


def test_script_leaves_out_and_counts_the_engines_lines_that_break_the_format(host, engine):
    Engine.extra = "ds4_tokens_total{model=deepseek} 5\n# TYPE ds4_requests_inflight counter\n"
    text = watch(host, engine)[2]
    assert "model=deepseek" not in text and text.count("# TYPE ds4_requests_inflight") == 1
    assert series(text)["ds4_spark_metrics_dropped_total"] == 2
    assert "# TYPE ds4_spark_metrics_dropped_total counter" in text
    # A counter: each run's dropped lines are added to the last, kept in the state file.
    samples = series(watch(host, engine)[2])
    assert samples["ds4_spark_metrics_dropped_total"] == 4 and samples["ds4_requests_inflight"] == 0
    Engine.extra = ""
    assert series(watch(host, engine)[2])["ds4_spark_metrics_dropped_total"] == 4


def test_script_never_probes_or_touches_a_unit_at_its_start_limit(host, engine):
    unit = dict(ACTIVE, ActiveState="failed", SubState="failed", Result="start-limit-hit", MainPID="0")
    (host / "bin/unit.json").write_text(json.dumps(unit))
    Engine.hung.set()
    outs = [watch(host, engine)[1] for _ in range(4)]
    assert "hit its start limit" in outs[0][0] and outs[1:] == [[], [], []]
    assert [call.split()[0] for call in calls(host)] == ["show"] * 4
    text = watch(host, engine)[2]
    assert series(text)["ds4_spark_unit_start_limit_hit"] == 1


START_LIMIT_JOURNAL = (
    "ds4.service: Main process exited, code=killed, status=9/KILL\n"
    "ds4.service: Failed with result 'signal'.\n"
    "ds4.service: Scheduled restart job, restart counter is at 3.\n"
    "Stopped ds4.service - ds4 inference engine.\n"
    "ds4.service: Start request repeated too quickly.\n"
    "ds4.service: Failed with result 'signal'.\n"
    "Failed to start ds4.service - ds4 inference engine.\n"
)


@pytest.mark.parametrize(
    ("journal", "verdict", "hit"),
    [(START_LIMIT_JOURNAL, "start-limit-hit", 1), ("ds4.service: Failed with result 'signal'.\n", None, 0)],
)
def test_script_reads_the_start_limit_from_systemds_journal_after_a_kill(host, engine, journal, verdict, hit):
    # As systemd 252 leaves it after the watchdog's third kill: the killed run's Result, the refusal only in
    # the journal, which is read from the last exit of the engine on.
    unit = dict(ACTIVE, ActiveState="failed", SubState="failed", Result="signal", MainPID="0")
    unit["ExecMainExitTimestamp"] = "@1788058800"
    (host / "bin/unit.json").write_text(json.dumps(unit))
    (host / "bin/journal.txt").write_text(journal)
    code, out, text = watch(host, engine)
    assert code == 0
    assert ("hit its start limit" in out[0]) == (verdict is not None), out
    assert calls(host)[0].startswith("show ds4.service --timestamp=unix --property=")
    assert calls(host)[1].split() == [
        "journalctl", "--no-pager", "--quiet", "--output=cat", "_PID=1", "UNIT=ds4.service",
        "--since=@1788058800",
    ]  # fmt: skip
    assert series(text)["ds4_spark_unit_start_limit_hit"] == hit
    assert kills(host) == []


def test_script_writes_what_the_spark_runs(host, engine):
    code, _, text = watch(host, engine, "--no-restart")
    assert code == 0
    samples = series(text)
    info = [key for key in samples if key.startswith("ds4_spark_info{")]
    assert len(info) == 1 and 'release="v0.6.5"' in info[0] and 'commit="d92d93ad"' in info[0]
    assert 'speculation="dspark"' in info[0] and 'base_model="base.gguf"' in info[0]
    assert samples["ds4_spark_update_available"] == 1
    assert samples["ds4_spark_update_available_since_timestamp_seconds"] == 1788058800  # 2026-08-30T03:00:00Z
    assert samples['ds4_spark_update_latest_info{latest="v0.6.6",running="v0.6.5"}'] == 1
    assert samples['ds4_spark_weights_verified{role="base",file="base.gguf"}'] == 1
    assert samples['ds4_spark_weights_verified{role="dspark",file="gone.gguf"}'] == 0
    assert samples["ds4_spark_weights_next_generation_bytes"] == 1000
    assert samples["ds4_spark_weights_free_bytes"] > 0
    assert samples["ds4_spark_watchdog_enabled"] == 0 and samples["ds4_spark_unit_active"] == 1
    # Each family once, HELP and TYPE first: what node_exporter's parser insists on.
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(names) == len(set(names))
    assert stat.S_IMODE((host / "ds4.prom").stat().st_mode) == 0o644
    assert sorted(p.name for p in host.iterdir() if p.name.startswith(".")) == []


def test_script_writes_the_gpus_health_and_its_throttling(host, engine):
    samples = series(watch(host, engine)[2])
    assert samples["ds4_spark_gpu_query_success"] == 1
    assert samples['ds4_spark_gpu_temperature_celsius{gpu="0"}'] == 40
    assert samples['ds4_spark_gpu_power_draw_watts{gpu="0"}'] == 11.7
    assert samples['ds4_spark_gpu_sm_clock_max_hertz{gpu="0"}'] == 2418e6
    # A GB10 reports no power limit: no series, rather than a limit of 0 W.
    assert not [key for key in samples if "power_limit" in key]
    assert samples['ds4_spark_gpu_clocks_event_active{gpu="0",reason="hw_thermal_slowdown"}'] == 0
    (host / "gpu/etc/ds4-standin/gpu-throttle").write_text("sw_thermal_slowdown\n")
    samples = series(watch(host, engine)[2])
    assert samples['ds4_spark_gpu_clocks_event_active{gpu="0",reason="sw_thermal_slowdown"}'] == 1
    assert samples['ds4_spark_gpu_temperature_celsius{gpu="0"}'] == 96
    # The driver gone: said, and no GPU series.
    (host / "gpu/etc/ds4-standin/gpu.json").unlink()
    code, _, text = watch(host, engine)
    assert code == 0 and series(text)["ds4_spark_gpu_query_success"] == 0
    assert "ds4_spark_gpu_temperature_celsius" not in text


def test_a_changed_model_file_is_no_longer_verified(host, engine):
    (host / "gguf/base.gguf").write_bytes(b"other bytes")
    samples = series(watch(host, engine)[2])
    assert samples['ds4_spark_weights_verified{role="base",file="base.gguf"}'] == 0


def test_script_says_when_systemctl_fails(host, engine):
    (host / "bin/systemctl").write_text("#!/bin/sh\necho 'Failed to connect to bus' >&2\nexit 1\n")
    code, out, _ = watch(host, engine)
    assert code == 1 and out == [
        "watchdog failed: systemctl show ds4.service --timestamp=unix "
        "--property=ActiveState,SubState,Result,MainPID,NRestarts,ExecMainExitTimestamp failed (1): "
        "Failed to connect to bus"
    ]


def test_a_refused_connection_is_a_failure_too(host):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    code, out, _ = watch(host, f"http://127.0.0.1:{port}")
    assert (
        code == 0 and "did not answer (1 of 3" in out[0] and f"nothing listens on 127.0.0.1:{port}" in out[0]
    )


def test_a_listener_of_another_user_is_never_asked_nor_its_series_copied(host, engine):
    # The stand-in listens as this test's user; the engine's user is another here.
    Engine.extra = "ds4_decode_tokens_total 7\n"
    code, out, text = watch(host, engine, "--user", "nobody")
    user = pwd.getpwuid(os.getuid()).pw_name
    assert code == 0 and "did not answer (1 of 3" in out[0]
    # The holder's pid where this user may read the test's descriptors (its own, or root's), else its user.
    port = engine.rsplit(":", 1)[1]
    holder = rf"(pid {os.getpid()} \([^)]*\)|a process) of user {user} \(uid {os.getuid()}\)"
    assert re.search(rf"127\.0\.0\.1:{port} is held by {holder}", out[0])
    assert "not by the engine user nobody" in out[0]
    assert "ds4_decode_tokens_total" not in text and "ds4_requests_inflight" not in text


# --- the engine firewall -----------------------------------------------------------------------------

# `nft list table inet ds4_engine` as nftables 1.0.6 prints the table of templates/ds4-engine.nft.j2.
TABLE = textwrap.dedent(
    """\
    table inet ds4_engine {
    \tset allowed_v4 {
    \t\ttype ipv4_addr
    \t\tflags interval
    \t\telements = { 10.89.0.5 }
    \t}

    \tchain input {
    \t\ttype filter hook input priority filter; policy accept;
    \t\ttcp dport 8000 iif "lo" accept
    \t\ttcp dport 8000 ip saddr @allowed_v4 accept
    \t\ttcp dport 8000 reject with tcp reset
    \t}
    }
    """
)
# The same table after `nft flush table inet ds4_engine`: there, but refusing nothing.
EMPTIED = TABLE.replace("\t\ttcp dport 8000 reject with tcp reset\n", "").replace(
    "\t\ttcp dport 8000 ip saddr @allowed_v4 accept\n", ""
)
FIREWALL = ("--firewall-unit", "ds4-firewall.service", "--firewall-table", "ds4_engine")


@pytest.mark.parametrize(
    ("returncode", "listing", "loaded"),
    [(0, TABLE, True), (1, "", False), (0, EMPTIED, False), (1, TABLE, False)],
)
def test_the_firewall_stands_only_when_its_table_is_listed_with_its_refusal(returncode, listing, loaded):
    assert firewall_loaded(returncode, listing) is loaded


def test_a_firewall_loaded_again_is_said_and_one_that_cannot_be_stops_its_unit():
    restored = firewall_outcome("ds4_engine", "ds4-firewall.service", "ds4.service", loaded=True)
    assert restored["action"] == "none"
    assert restored["message"].startswith("the engine firewall's table inet ds4_engine was missing while ")
    assert restored["message"].endswith(": loaded it again (ds4-firewall.service reloaded)")
    lost = firewall_outcome("ds4_engine", "ds4-firewall.service", "ds4.service", False, "exit 1: bad rules")
    assert lost["action"] == "stop"
    assert (
        "did not load it (exit 1: bad rules): stopping ds4-firewall.service, and with it ds4.service"
        in (lost["message"])
    )


def test_script_leaves_a_standing_firewall_alone(host, engine):
    (host / "bin/firewall.json").write_text(json.dumps({"ActiveState": "active"}))
    (host / "bin/table.txt").write_text(TABLE)
    code, out, text = watch(host, engine, *FIREWALL)
    assert code == 0 and out == ["ds4.service (pid 4242) answers"]
    assert calls(host)[:2] == [
        "show ds4-firewall.service --property=ActiveState",
        "nft list table inet ds4_engine",
    ]
    assert not [call for call in calls(host) if call.startswith(("reload", "stop"))]
    samples = series(text)
    assert samples["ds4_spark_firewall_loaded"] == 1 and samples["ds4_spark_firewall_restores_total"] == 0


def test_script_loads_a_flushed_firewall_again_and_says_so(host, engine):
    (host / "bin/firewall.json").write_text(json.dumps({"ActiveState": "active"}))
    (host / "bin/reload.txt").write_text(TABLE)  # `nft flush ruleset`: no table.txt
    # --no-restart: the watchdog only watches the engine, yet the firewall is put back all the same.
    code, out, text = watch(host, engine, "--no-restart", *FIREWALL)
    assert code == 0
    assert out[0] == (
        "the engine firewall's table inet ds4_engine was missing while ds4-firewall.service is active (nft "
        "flush ruleset, or another tool that replaced the whole ruleset?): loaded it again "
        "(ds4-firewall.service reloaded)"
    )
    assert "reload ds4-firewall.service" in calls(host)
    assert not [call for call in calls(host) if call.startswith("stop")]
    samples = series(text)
    assert samples["ds4_spark_firewall_loaded"] == 1 and samples["ds4_spark_firewall_restores_total"] == 1
    # Counted across runs; a table that stands is not loaded again.
    code, out, text = watch(host, engine, *FIREWALL)
    assert code == 0 and calls(host).count("reload ds4-firewall.service") == 1
    assert series(text)["ds4_spark_firewall_restores_total"] == 1


def test_script_stops_a_firewall_it_cannot_load_again_and_the_engine_with_it(host, engine):
    (host / "bin/firewall.json").write_text(json.dumps({"ActiveState": "active"}))
    (host / "bin/table.txt").write_text(EMPTIED)  # no reload.txt: the reload fails
    code, out, text = watch(host, engine, *FIREWALL)
    assert code == 0
    assert "did not load it (systemctl reload ds4-firewall.service failed (1): Job for" in out[0]
    assert "stopping ds4-firewall.service, and with it ds4.service" in out[0]
    assert calls(host)[-4:-2] == ["reload ds4-firewall.service", "nft list table inet ds4_engine"]
    assert "stop --no-block ds4-firewall.service" in calls(host)
    # Checked before the engine's unit is read, so that this run sees the engine stopping.
    assert calls(host).index("stop --no-block ds4-firewall.service") < calls(host).index(
        "show ds4.service --timestamp=unix --property="
        "ActiveState,SubState,Result,MainPID,NRestarts,ExecMainExitTimestamp"
    )
    assert series(text)["ds4_spark_firewall_loaded"] == 0


def test_script_without_an_active_firewall_lists_no_table(host, engine):
    code, _, text = watch(host, engine, *FIREWALL)
    assert code == 0
    assert calls(host)[0] == "show ds4-firewall.service --property=ActiveState"
    assert not [call for call in calls(host) if call.startswith("nft")]
    assert "ds4_spark_firewall_loaded" not in series(text)


# --- a pair (issue 42): a coordinator waiting for its worker, and a worker without an API ---

WAITING = {"answered": True, "inflight": 0, "error": None, "route": "incomplete"}
ROUTED = {"answered": True, "inflight": 0, "error": None, "route": "complete"}
ROUTE_ERROR = json.dumps(
    {"error": {"message": "coordinator route does not start at layer 0", "type": "invalid_request_error"}}
)


@pytest.mark.parametrize(
    "status, body, state",
    [
        (200, '{"choices": []}', "complete"),
        (503, ROUTE_ERROR, "incomplete"),
        (400, ROUTE_ERROR, "incomplete"),
        (503, '{"error": {"message": "server busy: client queue is full"}}', "unknown"),
        (500, "not JSON", "unknown"),
        (503, '["a list"]', "unknown"),
    ],
)
def test_the_route_is_read_from_the_contracts_error_alone(status, body, state):
    assert route_state(status, body) == state


def test_a_coordinator_waiting_for_its_worker_is_waiting_never_hung_however_long():
    decisions = run_decisions([ROUTED] + [WAITING] * 20 + [ROUTED])
    verdicts = [d["verdict"] for d in decisions]
    assert verdicts == ["ok"] + ["waiting"] * 20 + ["ok"]
    assert {d["action"] for d in decisions} == {"none"}
    assert all(d["state"]["failures"] == 0 for d in decisions)
    # Said once when it begins (at warning priority: the pair does not serve), and once when it ends.
    assert [d["log"] for d in decisions] == [True, True] + [False] * 19 + [True]
    assert decisions[1]["warning"]
    assert "waits for its worker" in decisions[1]["message"]
    assert "coordinator route does not start at layer 0" in decisions[1]["message"]
    assert "not hung, not restarted" in decisions[1]["message"]


def test_a_hung_coordinator_is_killed_whatever_its_route_said_before():
    decisions = run_decisions([WAITING, SILENT, SILENT, SILENT])
    assert [d["verdict"] for d in decisions] == ["waiting", "failing", "failing", "hung"]
    assert [d["action"] for d in decisions] == ["none", "none", "none", "kill"]


def test_a_waiting_coordinator_between_failures_starts_the_count_again():
    decisions = run_decisions([SILENT, SILENT, WAITING, SILENT, SILENT])
    assert [d["action"] for d in decisions] == ["none"] * 5
    assert decisions[-1]["state"]["failures"] == 2


def test_a_pairs_worker_is_watched_by_its_unit_alone_and_named_so():
    worker = "ds4-worker.service"
    running = decide(ACTIVE, None, new_state(), 3, 1000.0, unit_name=worker, api=False)
    assert (running["verdict"], running["action"]) == ("running", "none")
    assert running["message"].startswith("ds4-worker.service (pid 4242) runs")
    failed = dict(ACTIVE, ActiveState="failed", Result="start-limit-hit")
    limit = decide(failed, None, new_state(), 3, 1000.0, unit_name=worker, api=False)
    assert limit["verdict"] == "start-limit-hit" and "systemctl reset-failed ds4-worker" in limit["message"]


def test_script_leaves_a_coordinator_waiting_for_its_worker_alone_and_says_its_route_is_broken(host, engine):
    code, out, text = watch(host, engine, "--pair-role", "coordinator")
    assert code == 0 and out == ["ds4.service (pid 4242) answers"]
    samples = series(text)
    assert samples['ds4_spark_pair_member{role="coordinator"}'] == 1
    assert samples["ds4_spark_pair_route_complete"] == 1 and samples["ds4_spark_engine_up"] == 1
    assert Engine.posts == [("/v1/completions", {"prompt": "ping", "max_tokens": 1, "temperature": 0})]
    Engine.route_complete = False
    for run in range(6):
        code, out, text = watch(host, engine, "--pair-role", "coordinator")
        assert code == 0 and kills(host) == []
        if run == 0:
            assert out[0].startswith("ds4.service (pid 4242) answers, but its route is incomplete")
        else:
            assert out == []  # said once, when it began
    samples = series(text)
    assert samples["ds4_spark_pair_route_complete"] == 0 and samples["ds4_spark_engine_up"] == 0
    assert samples["ds4_spark_watchdog_probe_failures"] == 0
    # Hung: the same coordinator is killed on the third probe without an answer.
    Engine.hung.set()
    for _ in range(3):
        code, out, text = watch(host, engine, "--pair-role", "coordinator")
    assert kills(host) == ["kill --signal=SIGKILL ds4.service"]
    assert "ds4_spark_pair_route_complete" not in series(text)


def test_script_asks_a_busy_coordinator_nothing_more_and_a_single_spark_never_its_route(host, engine):
    Engine.inflight = 2
    code, _, text = watch(host, engine, "--pair-role", "coordinator")
    assert code == 0 and Engine.posts == [] and series(text)["ds4_spark_pair_route_complete"] == 1
    Engine.inflight = 0
    code, _, text = watch(host, engine)
    assert code == 0 and Engine.posts == [] and "ds4_spark_pair" not in text


def test_script_watches_a_worker_by_its_unit_alone(host, engine):
    code, out, text = watch(host, engine, "--pair-role", "worker", "--unit", "ds4-worker.service")
    assert code == 0 and out[0].startswith("ds4-worker.service (pid 4242) runs; it serves no API")
    samples = series(text)
    assert samples['ds4_spark_pair_member{role="worker"}'] == 1 and samples["ds4_spark_engine_up"] == 1
    assert "ds4_spark_pair_route_complete" not in samples and "ds4_requests_inflight" not in samples
    assert Engine.posts == [] and kills(host) == []


class UpstreamEngine(Handler):
    """Upstream's server: /v1/models alone; no /metrics, /v1/stats or /health (unknown paths are 404)."""

    paths: list = []
    hung = threading.Event()
    release = threading.Event()

    def do_GET(self):  # noqa: N802 - the name http.server calls
        UpstreamEngine.paths.append(self.path)
        if self.hung.is_set():
            self.release.wait(5)
            return
        if self.path == "/v1/models":
            self.answer(200, b'{"object":"list","data":[{"id":"deepseek-v4-flash"}]}')
        else:
            self.answer(404, b'{"error":{"message":"unknown endpoint","type":"invalid_request_error"}}')


@pytest.fixture
def upstream():
    UpstreamEngine.paths = []
    UpstreamEngine.hung.clear()
    UpstreamEngine.release.clear()
    with local_http(UpstreamEngine) as url:
        yield url
        UpstreamEngine.release.set()


def test_script_asks_an_upstream_engine_only_what_it_serves(host, upstream):
    code, out, text = watch(host, upstream, "--lineage", "upstream")
    assert code == 0 and out == ["ds4.service (pid 4242) answers"]
    assert UpstreamEngine.paths == ["/v1/models"]
    samples = series(text)
    assert samples["ds4_spark_engine_up"] == 1 and "ds4_requests_inflight" not in samples
    UpstreamEngine.hung.set()
    for _ in range(3):
        code, out, _ = watch(host, upstream, "--lineage", "upstream")
    assert "is hung: it did not answer 3 probes in a row" in out[0]
    assert kills(host) == ["kill --signal=SIGKILL ds4.service"]


def test_script_says_which_transport_a_tensor_member_started_with_and_a_fallback_to_tcp(host, engine):
    """ds4-rdma-launch records each start's choice (/run/ds4/transport.json): rdma, or tcp where no RDMA
    device served the link, which the textfile says as a fallback for an alert to see."""
    state = host / "transport.json"
    args = ("--pair-role", "worker", "--unit", "ds4-worker.service", "--transport-state", str(state))
    state.write_text(json.dumps({"transport": "rdma", "warning": None, "address": "10.77.0.2"}))
    samples = series(watch(host, engine, *args)[2])
    assert samples['ds4_spark_pair_transport{transport="rdma"}'] == 1
    assert samples["ds4_spark_pair_transport_fallback"] == 0
    state.write_text(json.dumps({"transport": "tcp", "warning": "no RDMA device serves the link address"}))
    samples = series(watch(host, engine, *args)[2])
    assert samples['ds4_spark_pair_transport{transport="tcp"}'] == 1
    assert samples["ds4_spark_pair_transport_fallback"] == 1
    # A pipeline member, or a tensor one over tcp by declaration: no launcher, no record, no series.
    state.unlink()
    assert "ds4_spark_pair_transport" not in watch(host, engine, *args)[2]
