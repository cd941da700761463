"""ds4.service's start-up, on test_service.py's Spark: a run that restarts the engine while it is still
starting after a crash (then converge's settings again), and a fresh start of the whole Spark (the
container restarts), where the GPU's device nodes must exist before the engine starts. Durations are
read from systemd's journal and properties, so that a slow machine running the playbooks cannot make them
pass or fail.
"""

import subprocess
import time

from spark import journal, main_pid, show
from test_service import DROPINS, answers, play
from waits import wait_for

# converge.yml's ds4_start_timeout and ds4_stop_timeout.
START_TIMEOUT = 60
STOP_TIMEOUT = 30
DEVICES = "ds4-nvidia-devices.service"
# The stand-in nvidia-modprobe's nodes: major and minor in hex, as stat prints them, and their mode.
NODES = {
    "/dev/nvidiactl": "c3 ff 666",
    "/dev/nvidia0": "c3 0 666",
    "/dev/nvidia-uvm": "1fe 0 666",
    "/dev/nvidia-uvm-tools": "1fe 1 666",
}


def restarts(host, since):
    """(stop began, stop ended, start ended) in unix seconds, of each stop of ds4 since SINCE, from systemd's
    own journal lines: this measures the restart itself, however slow the run around it is."""
    lines = host.check_output(f"journalctl --no-pager -o short-unix -u ds4 --since @{since}").splitlines()
    stamped = [(float(line.split(" ", 1)[0]), line) for line in lines if line[:1].isdigit()]
    found, stopping, stopped = [], None, None
    for when, line in stamped:
        if "Stopping ds4.service" in line:
            stopping, stopped = when, None
        elif (
            stopping is not None
            and stopped is None
            and ("Stopped ds4.service" in line or "Deactivated" in line)
        ):
            stopped = when
        elif stopping is not None and stopped is not None and "Started ds4.service" in line:
            found.append((stopping, stopped, when))
            stopping = None
    return found


def test_a_run_that_restarts_the_engine_while_it_starts_after_a_crash_does_not_wait_out_the_stop_timeout(
    host,
):
    # A slow load keeps the restarted engine in its readiness probe (ExecStartPost) long enough.
    slow = f"{DROPINS}/95-test-slow-load.conf"
    host.check_output(
        f"printf '[Service]\\nEnvironment=DS4_STANDIN_LOAD_DELAY=20\\n' > {slow} && systemctl daemon-reload"
    )
    try:
        crashed = main_pid(host)
        host.check_output(f"kill -9 {crashed}")
        wait_for(
            "systemd's restart to be waiting for the engine to load",
            lambda: (
                show(host, "ds4.service", "SubState")["SubState"] == "start-post"
                and main_pid(host) not in (0, crashed)
            ),
            timeout=120,
        )
        since = int(time.time())
        # A changed setting: the run restarts the engine, which is still starting.
        run = play("-e", "ds4_mem_floor_gb=5")
        assert run.rc == 0, run
    finally:
        host.check_output(f"rm -f {slow} && systemctl daemon-reload")
        # Converge's settings again (the engine restarts on them), whatever failed above.
        back = play()
    assert back.rc == 0, back
    assert show(host, "ds4.service", "ActiveState")["ActiveState"] == "active" and answers(host)
    (stopping, stopped, started), *_ = restarts(host, since)
    # The interrupted start stopped at once, not after TimeoutStopSec (30 s), and the new one was ready
    # well within TimeoutStartSec.
    assert stopped - stopping < STOP_TIMEOUT / 2, (stopping, stopped)
    assert started - stopping < START_TIMEOUT, (stopping, started)
    lines = journal(host, "ds4", since)
    assert "timed out" not in lines and "still around" not in lines, lines
    # The probe of the interrupted start left nothing behind.
    # (The bracket keeps the pattern from matching the shell that runs pgrep.)
    assert host.run("pgrep -f '[d]s4-ready'").rc == 1


def booted(host):
    """Whether HOST's systemd has finished starting up; not while its SSH server is not up yet, when ssh
    fails (testinfra raises for ssh's own exit status, 255)."""
    try:
        state = host.run("systemctl is-system-running").stdout.strip()
    except RuntimeError:
        return False
    return state in ("running", "degraded")


def test_the_device_nodes_exist_before_the_engine_starts_on_a_fresh_start(host):
    props = show(host, "ds4.service", "Requires", "After")
    assert DEVICES in props["Requires"].split() and DEVICES in props["After"].split()
    # Nothing of it inside ds4.service, whose device policy would not admit nodes made there.
    assert not host.file("/etc/systemd/system/ds4.service").contains("nvidia-modprobe")
    name = host.backend.get_hostname()
    subprocess.run(["podman", "restart", "--time", "30", name], check=True, timeout=120)
    wait_for("the Spark to boot", lambda: booted(host), timeout=300)
    wait_for(
        "ds4 to be ready",
        lambda: show(host, "ds4.service", "ActiveState")["ActiveState"] == "active",
        timeout=120,
    )
    devices = show(host, DEVICES, "Result", "ActiveState", "ActiveEnterTimestampMonotonic")
    engine = show(host, "ds4.service", "ExecMainStartTimestampMonotonic")
    assert (devices["Result"], devices["ActiveState"]) == ("success", "active")
    made, engine_started = (
        int(devices["ActiveEnterTimestampMonotonic"]),
        int(engine["ExecMainStartTimestampMonotonic"]),
    )
    assert 0 < made <= engine_started, (devices, engine)
    for node, numbers in NODES.items():
        assert host.check_output(f"stat -c '%F %t %T %a' {node}") == f"character special file {numbers}"
    assert answers(host)
