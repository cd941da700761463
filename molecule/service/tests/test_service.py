"""ds4_service on a sandbox Spark: after prepare (a staged release and an installer's nohup server) and
converge, the engine runs as ds4.service.

Each test starts from converge's state and leaves the Spark in it (what a test changes, a drop-in, a pending
restart, the update feed, it puts back), so that any one passes alone and in any order (pytest --reverse,
molecule/shared/ordering.py). Runs that must be refused are nested `ansible-playbook` runs of converge.yml
(molecule/shared/nested.py), whose exit status and results are asserted, so that they fail the scenario
only when the expectation is wrong.
"""

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from nested import play as nested_play
from spark import ask, failed_for_good, journal, main_pid, show
from waits import wait_for

SCENARIO = Path(__file__).resolve().parents[1]
RELEASE = "v0.6.5"
BASE = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
DRAFTER = "DSpark-drafter-Q2K-Q8-0731.gguf"
GGUF = "/var/lib/ds4/gguf"
API = "http://127.0.0.1:8000"
FEED = "http://forge:18080/_standin/feed"
ENV_FILE = "/etc/ds4/ds4.env"
UNIT = "/etc/systemd/system/ds4.service"
DROPINS = "/etc/systemd/system/ds4.service.d"
LOG = "/var/log/ds4/ds4-server.log"
STATE = "/var/lib/ds4/update-check.json"
KV = "/var/lib/ds4/kv"
KV_RECORD = "/var/lib/ds4-fleet/kv-family.json"
# Vision-Exp's files as the sandbox catalog pins them (inventory/sandbox/group_vars/all.yml).
SANDBOX_CATALOG = yaml.safe_load(
    (SCENARIO.parents[1] / "inventory" / "sandbox" / "group_vars" / "all.yml").read_text()
)["ds4_model_catalog"]
VISION = SANDBOX_CATALOG["vision-exp"]["files"]
WRITTEN = (ENV_FILE, UNIT, "/etc/ansible/facts.d/ds4.fact", f"{DROPINS}/00-ds4-fleet-supervision.conf")


def play(*args, **kwargs):
    """Run converge.yml again on the Spark, with Molecule's settings: a nested.Run."""
    return nested_play(SCENARIO / "converge.yml", *args, project_config=False, **kwargs)


def answers(host):
    return host.run(f"curl -fsS --max-time 5 {API}/v1/models").rc == 0


def environment(host, pid):
    # As ds4: root in the container lacks CAP_SYS_PTRACE, which reading another user's environ needs.
    return host.check_output(f"runuser -u ds4 -- cat /proc/{pid}/environ").split("\0")


def mtimes(host):
    return host.check_output("stat -c '%n %.9Y' " + " ".join(WRITTEN))


def test_the_engine_runs_as_ds4_and_answers_where_configured(host):
    assert host.service("ds4").is_running and host.service("ds4").is_enabled
    pid = main_pid(host)
    assert host.check_output(f"ps -o user= -p {pid}") == "ds4"
    assert host.socket("tcp://127.0.0.1:8000").is_listening
    assert not host.socket("tcp://0.0.0.0:8000").is_listening
    models = json.loads(host.check_output(f"curl -fsS {API}/v1/models"))
    assert models["data"][0]["id"] == "deepseek-v4-flash"
    assert models["data"][0]["context_length"] == 524288
    args = host.file(f"/proc/{pid}/cmdline").content_string.split("\0")
    assert f"{GGUF}/{BASE}" in args and args[args.index("-c") + 1] == "524288"
    assert args[args.index("--kv-disk-dir") + 1] == "/var/lib/ds4/kv"
    environ = environment(host, pid)
    assert {"DS4_NO_UPDATE_CHECK=1", "DS4_LOCK_FILE=/run/ds4/ds4.lock", "DS4_CONT_DSPARK=1"} <= set(environ)
    assert f"DS4_DSPARK_MODEL={GGUF}/{DRAFTER}" in environ
    assert host.file("/run/ds4/ds4.lock").exists


def test_the_ds4_user_cannot_log_in_and_reaches_the_gpu_groups(host):
    user = host.user("ds4")
    assert user.shell == "/usr/sbin/nologin" and user.uid < 1000
    assert {"ds4", "video", "render"} <= set(user.groups)
    env = host.file(ENV_FILE)
    assert (env.user, env.group, env.mode) == ("root", "ds4", 0o640)
    assert env.content_string.startswith("#") and "DS4_NO_UPDATE_CHECK=1" in env.content_string
    kv = host.file("/var/lib/ds4/kv")
    assert (kv.user, kv.mode) == ("ds4", 0o750)


def test_status_names_the_release_and_the_model(host):
    status = host.run("systemctl status ds4 --no-pager --lines=0").stdout
    print(status)
    first = status.splitlines()[0]
    assert RELEASE in first and BASE in first and "dspark" in first
    # The family, generation and quantization it serves (issue 53).
    assert "serving deepseek-v4-flash 0731 q2 (" in first


def test_the_unit_supervises_as_a_slow_loading_gpu_server_needs(host):
    props = show(
        host,
        "ds4.service",
        "Type",
        "User",
        "Restart",
        "RestartUSec",
        "StartLimitBurst",
        "TimeoutStartUSec",
        "TimeoutStopUSec",
        "KillSignal",
        "KillMode",
        "OOMScoreAdjust",
        "LimitMEMLOCK",
        "MemoryMax",
        "SyslogIdentifier",
        "After",
        "Wants",
        "RuntimeDirectory",
        "DropInPaths",
    )
    assert props["Type"] == "exec" and props["User"] == "ds4" and props["Restart"] == "on-failure"
    # converge.yml's fast values; the role's defaults are tens of seconds and minutes.
    assert props["RestartUSec"] == "1s" and props["StartLimitBurst"] == "3"
    assert props["TimeoutStartUSec"] == "1min" and props["TimeoutStopUSec"] == "30s"
    assert props["KillSignal"] == "15" and props["KillMode"] == "mixed"
    # The engine raises its own to 1000 (CUDA backend); the unit says so from the start.
    assert props["OOMScoreAdjust"] == "1000"
    # The sandbox's container limit (inventory/sandbox/group_vars/all.yml); a Spark gets infinity.
    assert props["LimitMEMLOCK"] == str(8 * 1024 * 1024)
    assert props["MemoryMax"] == "infinity"
    assert props["SyslogIdentifier"] == "ds4-server" and props["RuntimeDirectory"] == "ds4"
    for unit in ("network-online.target", "nvidia-persistenced.service"):
        assert unit in props["After"].split() and unit in props["Wants"].split()
    assert props["DropInPaths"].split()[0] == f"{DROPINS}/00-ds4-fleet-supervision.conf"
    # The engine's own daily check is off: the timer replaces it.
    assert "update" not in host.check_output("journalctl --no-pager -o cat -u ds4")


def test_security_exposure_is_low_with_the_gpu_still_reachable(host):
    report = host.run("systemd-analyze security ds4 --no-pager")
    print(report.stdout)
    exposure = float(re.search(r"Overall exposure level for ds4\.service: ([0-9.]+)", report.stdout).group(1))
    assert exposure <= 3.0
    props = show(
        host,
        "ds4.service",
        "PrivateDevices",
        "DevicePolicy",
        "DeviceAllow",
        "ProcSubset",
        "MemoryDenyWriteExecute",
    )
    # /dev/nvidia* stay reachable: no private /dev, the NVIDIA device groups allowed, /proc whole.
    assert props["PrivateDevices"] == "no" and props["DevicePolicy"] == "closed"
    assert "char-nvidia* rwm" in props["DeviceAllow"]
    assert props["ProcSubset"] == "all" and props["MemoryDenyWriteExecute"] == "no"


def test_the_installers_server_was_drained_and_stopped_before_the_unit_started(host):
    log = host.file("/root/ds4-server.log").content_string
    # One SIGTERM: it drained and exited by itself, never hit by a second signal.
    assert log.count("shutdown requested, draining requests") == 1 and "drained, exiting" in log
    assert "second signal" not in log
    assert "-c 4096" not in host.check_output("ps -eo args")


def test_the_modules_old_copies_are_gone_and_the_new_ones_stand(host):
    # prepare.yml left ds4_drain.py as 0.1.0 installed it; engine_http.py is what the scripts import now.
    assert not host.file("/usr/local/lib/ds4/ds4_drain.py").exists
    assert host.file("/usr/local/lib/ds4/engine_http.py").is_file


def test_the_local_fact_says_what_runs(host):
    fact = json.loads(host.check_output("/etc/ansible/facts.d/ds4.fact"))
    stamp = json.loads(host.file("/opt/ds4/current/.ds4-build.json").content_string)
    assert fact["release"] == RELEASE and fact["commit"] == stamp["commit"]
    assert (fact["generation"], fact["speculation"]) == ("0731", "dspark")
    assert (fact["context"], fact["host"], fact["port"]) == (524288, "127.0.0.1", 8000)
    assert fact["models"] == {"base": BASE, "dspark": DRAFTER}


def test_kill_9_of_the_engine_brings_it_back(host):
    before, restarts = main_pid(host), int(show(host, "ds4.service", "NRestarts")["NRestarts"])
    host.check_output(f"kill -9 {before}")
    wait_for(
        "the restart",
        lambda: (
            int(show(host, "ds4.service", "NRestarts")["NRestarts"]) > restarts
            and show(host, "ds4.service", "ActiveState")["ActiveState"] == "active"
        ),
    )
    assert main_pid(host) != before and answers(host)


def test_sigterm_during_a_held_request_lets_it_finish(host):
    # The stand-in engine holds the request until the test releases it: in flight through the stop, whatever
    # the machine's load.
    since = int(time.time())
    hold_dir = "/run/ds4-standin"
    body = json.dumps(
        {
            "model": "deepseek-v4-flash",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "What is the capital of France? [[standin-hold:stop]]"}],
        }
    )
    host.check_output(
        f"mkdir -p {hold_dir} && rm -f {hold_dir}/stop /tmp/slow.out && echo '{body}' > /tmp/slow.json"
    )
    host.check_output(
        'setsid sh -c \'curl -sS -w "\\n%{http_code}\\n" -H "Content-Type: application/json" '
        f"--data @/tmp/slow.json {API}/v1/chat/completions > /tmp/slow.out 2>&1' "
        "> /dev/null 2>&1 < /dev/null &"
    )
    wait_for("the held request to be in flight", lambda: "requests_inflight 1" in metrics(host), timeout=30)
    host.check_output("systemctl restart --no-block ds4")
    wait_for("the engine to drain", lambda: "draining requests" in journal(host, "ds4", since), timeout=60)
    assert show(host, "ds4.service", "ActiveState")["ActiveState"] == "deactivating"
    assert host.file("/tmp/slow.out").content_string == ""
    host.check_output(f"touch {hold_dir}/stop")
    # Complete once curl has written the status code after the body.
    reply = wait_for(
        "the answer",
        lambda: re.search(r"\n\d{3}\n\Z", out := host.file("/tmp/slow.out").content_string) and out,
        timeout=60,
    )
    wait_for("the restart", lambda: show(host, "ds4.service", "ActiveState")["ActiveState"] == "active", 120)
    assert reply.rstrip().endswith("200") and "Paris" in reply, reply
    lines = journal(host, "ds4", since)
    assert "shutdown requested, draining requests" in lines and "drained, exiting" in lines
    assert "second signal" not in lines


def metrics(host):
    return host.run(f"curl -fsS --max-time 2 {API}/metrics").stdout


def test_logrotate_config_is_valid_and_a_forced_rotation_keeps_logging(host):
    debug = host.run("logrotate -d /etc/logrotate.d/ds4")
    assert debug.rc == 0 and "error" not in debug.stderr.lower(), debug.stderr
    assert host.file(LOG).contains("listening on http://127.0.0.1:8000")
    host.check_output("logrotate -f /etc/logrotate.d/ds4")
    assert host.file(f"{LOG}.1").contains("listening on")
    host.check_output(
        f"curl -fsS -H 'Content-Type: application/json' {API}/v1/chat/completions "
        """-d '{"model": "deepseek-v4-flash", "messages": [{"role": "user", "content": "after rotation"}]}'"""
    )
    wait_for("a line in the rotated-into file", lambda: host.file(LOG).contains("POST /v1/chat/completions"))
    # copytruncate and an append-mode writer: the new file starts with text, not a gap of zeros.
    assert host.file(LOG).content[:1] != b"\0"


def test_the_update_check_timer_is_scheduled(host):
    timer = host.service("ds4-update-check.timer")
    assert timer.is_enabled and timer.is_running
    props = show(host, "ds4-update-check.timer", "Persistent", "RandomizedDelayUSec", "TimersCalendar")
    assert props["Persistent"] == "yes" and props["RandomizedDelayUSec"] == "1h"
    assert "OnCalendar=*-*-* 00:00:00" in props["TimersCalendar"]
    assert "ds4-update-check.timer" in host.check_output("systemctl list-timers --all --no-pager")


@pytest.fixture
def feed_back(host):
    """After the test, the feed names the release that runs again, and the check has read it."""
    yield
    run_check(host, RELEASE)


def run_check(host, feed):
    """Serve `feed` as the release feed, run the check as the timer would; (state, its journal lines)."""
    host.check_output(f"curl -fsS -X PUT --data-binary @- {FEED} <<'EOF'\n{feed}\nEOF")
    since = int(time.time())
    # Many checks within seconds would hit systemd's default start limit, which a daily timer never does.
    host.check_output("systemctl reset-failed ds4-update-check.service")
    host.check_output("systemctl start ds4-update-check.service")
    assert show(host, "ds4-update-check.service", "Result")["Result"] == "success"
    return json.loads(host.file(STATE).content_string), journal(host, "ds4-update-check", since)


@pytest.mark.parametrize(
    ("feed", "available", "line"),
    [
        ("v0.6.6", True, "update available: v0.6.6 (running v0.6.5)"),
        ("v0.6.5", False, "up to date: v0.6.5 (running v0.6.5)"),
        # Four parts: the engine's own check never sees this as newer.
        ("v0.6.5.1", True, "update available: v0.6.5.1 (running v0.6.5)"),
    ],
)
def test_the_update_check_compares_full_versions(host, feed_back, feed, available, line):
    state, lines = run_check(host, feed)
    assert (state["status"], state["latest"], state["update_available"]) == ("ok", feed, available)
    assert line in lines
    fact = json.loads(host.check_output("/etc/ansible/facts.d/ds4.fact"))
    assert fact["update"] == state
    assert json.loads(host.file("/etc/ansible/facts.d/ds4_update.fact").content_string) == state


@pytest.mark.parametrize(
    ("feed", "why"),
    [
        ("v0.6", "not a release tag"),
        ("garbage", "not a release tag"),
        ("<html><body>Sign in to the network</body></html>", "HTML"),
        ("v0.6.9\n" + "x" * 8192, "larger than"),
    ],
)
def test_a_bad_feed_is_logged_and_never_reads_as_an_update(host, feed_back, feed, why):
    # A good answer first, whatever ran before: the one that must stay known.
    last_ok = run_check(host, RELEASE)[0]["last_ok"]
    state, lines = run_check(host, feed)
    assert state["status"] == "error" and state["update_available"] is False and state["latest"] is None
    assert why in state["error"] and "update check failed:" in lines and why in lines
    # The last good answer stays known.
    assert state["last_ok"] == last_ok and last_ok is not None


def test_an_unreachable_feed_is_logged_and_never_reads_as_an_update(host, feed_back):
    override = "/run/systemd/system/ds4-update-check.service.d"
    host.check_output(
        f"mkdir -p {override} && printf '[Service]\\nEnvironment=DS4_UPDATE_URL=http://forge:9/LATEST\\n'"
        f" > {override}/test.conf && systemctl daemon-reload"
    )
    try:
        state, lines = run_check(host, "v0.6.6")
    finally:
        host.check_output(f"rm -rf {override} && systemctl daemon-reload")
    assert state["status"] == "error" and state["update_available"] is False
    assert "cannot reach feed" in state["error"] and "update check failed: cannot reach feed" in lines


def test_an_operator_drop_in_survives_a_reconverge_that_changes_and_restarts_nothing(host):
    dropin = f"{DROPINS}/50-operator.conf"
    host.check_output(
        f"printf '[Service]\\nEnvironment=DS4_SERVER_MAX_CLIENTS=8\\n' > {dropin}"
        " && systemctl daemon-reload && systemctl restart ds4"
    )
    try:
        pid, written = main_pid(host), mtimes(host)
        run = play()
        assert run.rc == 0 and run.changed("spark01") == 0, run
        assert main_pid(host) == pid and mtimes(host) == written
        assert host.file(dropin).content_string == "[Service]\nEnvironment=DS4_SERVER_MAX_CLIENTS=8\n"
        assert "DS4_SERVER_MAX_CLIENTS=8" in environment(host, pid)
    finally:
        host.check_output(f"rm -f {dropin} && systemctl daemon-reload && systemctl restart ds4")


def test_check_mode_reports_changes_and_a_pending_restart_and_changes_nothing(host):
    # An engine older than its settings, as after a run that wrote new ones and failed before its restart:
    # the next run restarts it. In check mode it only says so. (Dated two seconds after the engine's start,
    # rather than touched after a pause, so that it is newer whatever the clock's granularity.)
    host.check_output(
        'started=$(date -d "$(systemctl show -P ExecMainStartTimestamp ds4)" +%s)'
        f' && touch -d "@$((started + 2))" {ENV_FILE}'
    )
    try:
        pid, written = main_pid(host), mtimes(host)
        run = play("--check", "--diff", "-e", "ds4_port=8001")
        assert run.rc == 0, run
        # The unit's diff: an ExecStart line with the new port, which it had not.
        # A result's diff is one mapping or a list of them.
        diffs = [
            diff
            for result in run.of("spark01")
            for diff in (lambda d: d if isinstance(d, list) else [d])(result.data.get("diff") or [])
        ]
        assert any(
            "ExecStart=" in str(diff.get("after", ""))
            and "--port 8001" in str(diff.get("after", ""))
            and "--port 8001" not in str(diff.get("before", ""))
            for diff in diffs
        ), diffs
        assert run.said("ds4 runs since before its environment or unit was last written"), run
        assert "Restart ds4" in [task.rsplit(" : ", 1)[-1] for task in run.tasks], run.tasks
        assert main_pid(host) == pid and mtimes(host) == written
    finally:
        # The engine newer than its settings again: the next run has no restart pending.
        host.check_output("systemctl restart ds4")


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["-e", "ds4_port=70000", "-e", "ds4_ctx=-1"], ["ds4_port must be a port number", "ds4_ctx must be"]),
        (["-e", "ds4_speculation=turbo"], ["ds4_speculation", "turbo"]),
        (["-e", "ds4_speculation=mtp"], ["ds4_speculation 'mtp' needs a mtp file", "'0731'"]),
        (["-e", "ds4_update_url=ftp://forge/LATEST"], ["ds4_update_url must be an http, https or file URL"]),
    ],
)
def test_invalid_values_are_refused_before_anything_is_written(host, extra, said):
    pid, written = main_pid(host), mtimes(host)
    run = play(*extra)
    assert run.rc != 0 and run.changed("spark01") == 0, run
    for text in said:
        assert run.said(text), run
    assert main_pid(host) == pid and mtimes(host) == written


def test_a_forbidden_take_over_is_refused_and_leaves_the_other_server_running(host):
    host.check_output(
        "DS4_LOCK_FILE=/tmp/other.lock setsid nohup /opt/ds4/current/ds4-server --cuda "
        f"-m {GGUF}/{BASE} -c 4096 --port 8002 > /tmp/other.log 2>&1 < /dev/null &"
    )
    other = wait_for("the other server", lambda: host.run("pgrep -f -- '--port 8002'").stdout.split())
    try:
        run = play("-e", "ds4_take_over_installer=false")
        assert run.rc != 0, run
        assert run.said("ds4_take_over_installer is false, so it is left running"), run
        assert host.run(f"kill -0 {other[0]}").rc == 0
    finally:
        host.run(f"kill -TERM {other[0]}")


def engine_argv(host):
    return host.file(f"/proc/{main_pid(host)}/cmdline").content_string.split("\0")


def kv_bank(host, name):
    """A KV bank on disk, as the engine leaves them (owned by ds4)."""
    host.check_output(f"runuser -u ds4 -- sh -c 'echo bank > {KV}/{name}'")


def test_a_swap_of_model_family_serves_its_encoder_on_a_cleared_kv_cache_and_back(host):
    """Issue 53, on the service alone (the weights and the activation are other scenarios'): 0731 to
    Vision-Exp and back, each in one restart, the KV banks of the family before cleared, the record saying
    which family the cache is of."""
    staged = [VISION[role] for role in ("base", "vision", "dspark")]
    for entry in staged:
        host.check_output(
            f"curl -fsSL -o {GGUF}/{entry['name']} "
            f"http://forge:18080/{entry['repo']}/resolve/{entry['revision']}/{entry['name']}"
        )
    try:
        # 1. To Vision-Exp: its encoder served, its own drafter, 0731's KV banks gone.
        kv_bank(host, "bank-0731.kv")
        run = play("-e", "ds4_model_family=deepseek-v4-flash-vision")
        assert run.rc == 0, run
        argv = engine_argv(host)
        assert f"{GGUF}/{VISION['base']['name']}" in argv
        assert argv[argv.index("--vision") + 1] == f"{GGUF}/{VISION['vision']['name']}"
        pid = main_pid(host)
        assert f"DS4_DSPARK_MODEL={GGUF}/{VISION['dspark']['name']}" in environment(host, pid)
        assert not host.file(f"{KV}/bank-0731.kv").exists
        assert json.loads(host.file(KV_RECORD).content_string)["family"] == "deepseek-v4-flash-vision"
        assert "Paris" in ask(host)
        first = host.run("systemctl status ds4 --no-pager --lines=0").stdout.splitlines()[0]
        assert "serving deepseek-v4-flash-vision vision-exp q2 (" in first

        # 2. Back to 0731: no encoder, 0731's drafter, Vision-Exp's banks gone.
        kv_bank(host, "bank-vision.kv")
        run = play()
        assert run.rc == 0, run
        argv = engine_argv(host)
        assert f"{GGUF}/{BASE}" in argv and "--vision" not in argv
        assert f"DS4_DSPARK_MODEL={GGUF}/{DRAFTER}" in environment(host, main_pid(host))
        assert not host.file(f"{KV}/bank-vision.kv").exists
        assert json.loads(host.file(KV_RECORD).content_string)["family"] == "deepseek-v4-flash"

        # 3. Again, with the same family: nothing restarts and the banks stay.
        kv_bank(host, "bank-0731.kv")
        pid = main_pid(host)
        run = play()
        assert run.rc == 0 and main_pid(host) == pid, run
        assert host.file(f"{KV}/bank-0731.kv").exists
    finally:
        host.run(f"rm -f {KV}/bank-0731.kv {KV}/bank-vision.kv")
        host.run("rm -f " + " ".join(f"{GGUF}/{entry['name']}" for entry in staged))
    assert answers(host)


def test_a_crash_loop_stops_at_the_start_limit(host):
    crash = f"{DROPINS}/90-test-crash.conf"
    host.check_output(
        "printf '[Service]\\nExecStart=\\nExecStart=/opt/ds4/current/ds4-server --cuda -m %s\\n'"
        f" /nonexistent.gguf > {crash} && systemctl daemon-reload"
    )
    since = int(time.time())
    try:
        host.run("systemctl restart ds4")
        failed_for_good(host, timeout=45)
        # "failed", not "auto-restart": no further restart is scheduled, and the journal says why.
        lines = journal(host, "ds4", since)
        assert "Start request repeated too quickly" in lines
        assert "cannot open model '/nonexistent.gguf'" in lines
    finally:
        host.check_output(f"rm -f {crash} && systemctl daemon-reload && systemctl reset-failed ds4")
        host.check_output("systemctl start ds4")
    assert answers(host)
