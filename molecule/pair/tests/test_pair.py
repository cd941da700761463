"""Two sandbox Sparks as one endpoint (docs/pair.md): after converge spark04 coordinates and spark05 works
for the pair pair01, serving the Q4 quantization that one sandbox Spark cannot hold.

Each test starts from converge's state and leaves the pair serving as it found it, whatever ran before it
(conftest.py may run them in reverse). The engine's distributed protocol is the stand-in's
(tests/standins/engine/tree/ds4_dist.py), which follows the engine contract.
"""

import json

import pytest
from members import COORDINATOR, UNITS, WORKER, answers, site_run
from nested import PROJECT, play
from spark import API, QUESTION, ask, main_pid, sandbox_host, show
from waits import wait_for

PAIR = f"{COORDINATOR},{WORKER}"
LINK = {COORDINATOR: "10.77.0.1", WORKER: "10.77.0.2"}
PORT = 9400
Q4 = (
    "DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-chat-v2-imatrix-0731"
    ".gguf"
)
DRAFTER = "DSpark-drafter-Q2K-Q8-0731.gguf"
GGUF = "/var/lib/ds4/gguf"
HUB = "http://forge:18080"
# A bound on each wait for the pair to serve again: an engine's restart (RestartSec, the stand-in's load)
# and the worker's registration, on a loaded machine.
BACK_TIMEOUT = 180


@pytest.fixture(scope="module")
def coordinator():
    return sandbox_host(COORDINATOR)


@pytest.fixture(scope="module")
def worker():
    return sandbox_host(WORKER)


def route(host):
    """The coordinator's route, as the stand-in reports it on /v1/stats (None when it does not answer)."""
    done = host.run(f"curl -fsS --max-time 5 -H 'Accept: application/json' {API}/v1/stats")
    return json.loads(done.stdout).get("dist") if done.rc == 0 else None


def serving_again(coordinator, before_pid, host, unit):
    """Wait until UNIT on HOST runs a process other than BEFORE_PID and the pair answers through the
    coordinator with the worker registered once more."""
    wait_for(
        f"{unit} running anew",
        lambda: main_pid(host, unit) not in (0, before_pid),
        timeout=BACK_TIMEOUT,
    )
    wait_for("the pair answering through its coordinator", lambda: answers(coordinator), timeout=BACK_TIMEOUT)
    assert route(coordinator)["route_complete"] is True


# --- provisioned as one ----------------------------------------------------------------------------------


def test_site_again_changes_nothing_on_either_member_and_ends_in_its_first_play():
    """Issue 50: the worker serves no HTTP, and its run record asked it for /v1/stats, so every run on it
    was a whole run that rewrote its files (`changed=2` each time). Again with converge's settings, both
    members are as the last run left them: nothing changes, no engine restarts (the state holds each unit's
    MainPID and every launch file's time), and each run ends in site.yml's first play. A whole run changes
    nothing either: on the worker it made ds4.service's drop-in directory for the firewall and removed it as
    an old part's remains, every run. (That run's record holds ds4_skip_when_unchanged=false among its
    settings, so the next run with converge's settings is a whole run again, and records them.)"""
    run, before, after = site_run()
    assert run.rc == 0, run
    assert {name: run.changed(name) for name in (COORDINATOR, WORKER)} == {COORDINATOR: 0, WORKER: 0}, run
    for name in (COORDINATOR, WORKER):
        assert run.said("Nothing to change: the Spark is as the last finished run left it", name), run
        assert run.plays_of(name) == ["Find out which Sparks have anything to change"], run
    assert after == before
    whole, before, after = site_run("-e", "ds4_skip_when_unchanged=false")
    assert whole.rc == 0, whole
    assert {name: whole.changed(name) for name in (COORDINATOR, WORKER)} == {COORDINATOR: 0, WORKER: 0}, whole
    assert after == before


def test_the_model_crossed_the_hub_link_once(coordinator, worker):
    """Both members hold the same verified Q4 GGUF and drafter, and the hub sent each file once: the second
    member had them from the first, over the pair's link. The hub counts the release feed it serves too
    (each Spark's update check reads it): every byte beyond the model's is one of the feed's."""
    hub = json.loads(PROJECT.joinpath(".sandbox/forge/hub/hub.json").read_text())
    sizes = {
        name: entry["size"]
        for repo in hub["repos"].values()
        for entry_set in (repo["commits"][repo["refs"]["main"]]["files"],)
        for name, entry in entry_set.items()
    }
    sums = [host.check_output(f"cd {GGUF} && sha256sum {Q4} {DRAFTER}") for host in (coordinator, worker)]
    assert sums[0] == sums[1]
    feed = len(coordinator.check_output(f"curl -fsS {HUB}/Entrpi/ds4-on-spark/main/LATEST")) + 1
    sent = json.loads(coordinator.check_output(f"curl -fsS {HUB}/_standin/stats"))["content_bytes"]
    model = sizes[Q4] + sizes[DRAFTER]
    extra = sent - model
    assert 0 <= extra < sizes[DRAFTER] and extra % feed == 0, f"hub sent {sent} bytes, model {model}"


def test_each_member_runs_its_part_as_its_own_unit(coordinator, worker):
    """The coordinator runs ds4.service with its API and --listen on its link address; the worker runs
    ds4-worker.service with no API, joining the coordinator there; each restarts on failure."""
    lead = show(coordinator, "ds4.service", "ActiveState", "ExecStart", "Restart")
    assert lead["ActiveState"] == "active"
    assert f"--role coordinator --layers 0:20 --listen {LINK[COORDINATOR]} {PORT}" in lead["ExecStart"]
    follow = show(worker, "ds4-worker.service", "ActiveState", "ExecStart", "Restart", "UnitFileState")
    assert follow["ActiveState"] == "active" and follow["UnitFileState"] == "enabled"
    assert f"--role worker --layers 21:output --coordinator {LINK[COORDINATOR]} {PORT}" in follow["ExecStart"]
    assert lead["Restart"] == follow["Restart"] == "on-failure"
    # No second engine, and no API, on the worker.
    assert show(worker, "ds4.service", "LoadState")["LoadState"] == "not-found"
    assert worker.run(f"curl -fsS --max-time 5 {API}/v1/models").rc != 0


def test_the_pair_answers_through_its_coordinator(coordinator):
    assert "Paris" in ask(coordinator, QUESTION)
    report = route(coordinator)
    assert (report["role"], report["layers"], report["route_complete"]) == ("coordinator", "0:20", True)
    assert report["worker"].startswith(f"{LINK[WORKER]}:")


def connect(host, target, source):
    """Whether HOST connects to TARGET (address, port) from SOURCE (its address): 'connected', 'refused'
    (a reset, the firewall's answer) or 'timeout'."""
    script = (
        "import socket,sys\n"
        "s=socket.socket(); s.settimeout(5); s.bind((sys.argv[3],0))\n"
        "try:\n s.connect((sys.argv[1],int(sys.argv[2]))); print('connected')\n"
        "except ConnectionRefusedError: print('refused')\n"
        "except OSError: print('timeout')\n"
    )
    return host.check_output("python3 -c %s %s %s %s", script, target[0], str(target[1]), source)


def test_the_link_port_takes_the_workers_link_address_only(coordinator, worker):
    """The coordinator's --listen port answers the worker's link address; another address on the same link
    gets the firewall's reset; the Sparks' usual network does not reach it."""
    target = (LINK[COORDINATOR], PORT)
    assert connect(worker, target, LINK[WORKER]) == "connected"
    worker.check_output("ip addr add 10.77.0.3/24 dev enP2p1s0f1np1")
    try:
        assert connect(worker, target, "10.77.0.3") == "refused"
    finally:
        worker.check_output("ip addr del 10.77.0.3/24 dev enP2p1s0f1np1")
    usual = coordinator.check_output("getent ahostsv4 %s", COORDINATOR).split()[0]
    mine = worker.check_output("getent ahostsv4 %s", WORKER).split()[0]
    assert connect(worker, (usual, PORT), mine) in ("refused", "timeout")
    assert "Paris" in ask(coordinator)


# --- supervised ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("member", [COORDINATOR, WORKER])
def test_a_killed_engine_comes_back_and_the_pair_serves_again(coordinator, member):
    """SIGKILL, a crash: systemd restarts that member's engine and the worker registers again, with no
    operator."""
    host = sandbox_host(member)
    unit = UNITS[member]
    before = main_pid(host, unit)
    host.check_output(f"kill -KILL {before}")
    serving_again(coordinator, before, host, unit)


@pytest.mark.parametrize("member", [COORDINATOR, WORKER])
def test_a_restarted_member_rejoins_and_the_pair_serves_again(coordinator, member):
    host = sandbox_host(member)
    unit = UNITS[member]
    before = main_pid(host, unit)
    host.check_output(f"systemctl restart --no-block {unit}")
    serving_again(coordinator, before, host, unit)


# --- a member that changes its part ----------------------------------------------------------------------


def parts(host):
    """What each engine unit of HOST is: its unit file state and active state, and the roles' files of it."""
    out = {}
    for unit in ("ds4.service", "ds4-worker.service"):
        state = show(host, unit, "LoadState", "ActiveState", "UnitFileState")
        files = host.run(
            f"ls /etc/systemd/system/{unit} /etc/systemd/system/{unit}.d/00-ds4-fleet-* 2>/dev/null"
        )
        out[unit] = (state["LoadState"], state["ActiveState"], state["UnitFileState"], files.stdout.split())
    return out


def runs_only(host, unit):
    """Whether HOST runs UNIT alone of the two engine units, enabled, and keeps nothing of the other's."""
    other = "ds4-worker.service" if unit == "ds4.service" else "ds4.service"
    found = parts(host)
    return (
        found[unit][:3] == ("loaded", "active", "enabled")
        and found[other] == ("not-found", "inactive", "", [])
    ), found


def test_a_member_that_changes_its_part_keeps_nothing_of_its_old_unit(coordinator, worker):
    """The pair declared the other way round: spark04, which ran ds4.service, becomes the worker, and
    spark05, which ran ds4-worker.service, the coordinator (as a Spark that served alone joins a pair as its
    worker, or a worker is provisioned alone). Each stops and disables its old unit before the new one
    starts, and once the new one serves removes its old unit file and the roles' drop-ins for it. Then the
    pair as converge declared it, which changes them back."""
    swapped = {"pair01": {"coordinator": {"host": WORKER, "address": LINK[WORKER]},
                          "worker": {"host": COORDINATOR, "address": LINK[COORDINATOR]}}}  # fmt: skip
    try:
        # Step 1: the parts swapped.
        run = play(PROJECT / "site.yml", "-l", PAIR, "-e", json.dumps({"ds4_pairs": swapped}))
        assert run.rc == 0, run
        for host, unit in ((coordinator, "ds4-worker.service"), (worker, "ds4.service")):
            only, found = runs_only(host, unit)
            assert only, found
        assert "Paris" in ask(worker)
    finally:
        # Step 2: back as converge left them.
        run = play(PROJECT / "site.yml", "-l", PAIR)
    assert run.rc == 0, run
    for host, unit in ((coordinator, "ds4.service"), (worker, "ds4-worker.service")):
        only, found = runs_only(host, unit)
        assert only, found
    assert answers(coordinator)
