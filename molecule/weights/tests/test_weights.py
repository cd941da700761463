"""The weights role on sandbox Sparks: a verified 0731 set, check mode, adoption from ~/gguf, a cut
download that resumes, and a move from legacy to 0731 under each ds4_old_weights policy.

spark01 has room to spare; spark02's /var/lib/ds4 is a 640 KiB tmpfs that holds one generation of the
stand-in's weights but not two. Cases that change the host run the role nested (weights.yml, through
molecule/shared/nested.py), as an operator would, and assert on the run's exit status, its results and the
files left. Expected sizes and hashes come from the stand-in hub's own hub.json. Each test starts from
converge's state and leaves the Sparks in it (what converge left is kept aside once and put back after each
test), so that any one passes alone and in any order (pytest --reverse, molecule/shared/ordering.py).
"""

import json
import os
import re
import time
from pathlib import Path

import pytest
from nested import play as nested_play
from spark import sandbox_host
from waits import wait_for

ROOT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
PLAYBOOK = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "weights.yml"
# The directory, so that the sandbox group_vars linked beside the inventory file apply too.
INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
GGUF = "/var/lib/ds4/gguf"
FACT = "/etc/ansible/facts.d/ds4_weights.fact"
CONVERGED = "/root/converged-weights"
LEGACY_COPY = "/root/legacy-gguf"
HUB = "http://forge:18080"

_doc = json.loads((ROOT / ".sandbox" / "forge" / "hub" / "hub.json").read_text())
FILES = {
    name: dict(entry, repo=repo)
    for repo, content in _doc["repos"].items()
    for commit in content["commits"].values()
    for name, entry in commit["files"].items()
}


def named(generation, role):
    return next(n for n, f in FILES.items() if (f["generation"], f["role"]) == (generation, role))


BASE, DRAFTER = named("0731", "base"), named("0731", "dspark")
OLD_BASE, OLD_DRAFTER, OLD_MTP = named("legacy", "base"), named("legacy", "dspark"), named("legacy", "mtp")
NEW = {BASE, DRAFTER}
OLD = {OLD_BASE, OLD_DRAFTER, OLD_MTP}


@pytest.fixture(scope="module")
def spark01():
    return sandbox_host("spark01")


@pytest.fixture(scope="module")
def spark02():
    return sandbox_host("spark02")


@pytest.fixture(scope="module", autouse=True)
def converged(spark01, spark02):
    """What converge left on both Sparks (the 0731 set, the role's fact), kept aside once before this
    file's tests; the function it returns puts it back."""
    for host in (spark01, spark02):
        host.run_expect([0], f"rm -rf {CONVERGED} && mkdir {CONVERGED} && cp -a {GGUF} {FACT} {CONVERGED}/")

    def put_back():
        for host in (spark01, spark02):
            host.run_expect(
                [0],
                f"rm -rf {GGUF} /root/gguf && cp -a {CONVERGED}/gguf {GGUF}"
                f" && cp -a {CONVERGED}/{Path(FACT).name} {FACT}",
            )

    yield put_back
    for host in (spark01, spark02):
        host.run_expect([0], f"rm -rf {CONVERGED}")


@pytest.fixture(autouse=True)
def put_back(converged):
    """Each test leaves the Sparks as converge left them, whatever it changed."""
    yield
    converged()


def play(*args, limit=None, during=None):
    """The role nested, as an operator runs it, with Molecule's settings: a nested.Run. `during` acts while
    it runs (nested.play)."""
    if limit:
        args = (*args, "--limit", limit)
    return nested_play(PLAYBOOK, *args, inventory=INVENTORY, project_config=False, during=during)


def cleanup(*args):
    """Only the activation step's removal after a passed smoke test, on spark01, under `remove`."""
    only = ("-e", "ds4_old_weights=remove", "-e", "weights_cleanup=true", "-e", "weights_cleanup_only=true")
    return play(*only, *args, limit="spark01")


def ggufs(host, directory=GGUF):
    """The weight files in a directory: neither records, progress files nor partial downloads."""
    listing = host.run(f"ls -A {directory}").stdout.split()
    return {n for n in listing if n.endswith(".gguf")}


def entries(host):
    return set(host.run(f"ls -A {GGUF}").stdout.split())


def traces(names):
    """Each file with its record and progress file: what a finished fetch leaves."""
    return {t for n in names for t in (n, f".{n}.verified.json", f".{n}.progress.json")}


def empty(host):
    host.run_expect([0], f"rm -rf {GGUF} && install -d -m 0755 {GGUF}")


def release(host, name):
    """Let the stand-in hub's held transfers of `name` go on."""
    host.run_expect([0], f"curl -fsS -X POST {HUB}/_standin/holds/release -d '{json.dumps({'file': name})}'")


def url(name):
    return f"{HUB}/{FILES[name]['repo']}/resolve/main/{name}"


def fault(host, **spec):
    body = json.dumps(spec)
    host.run_expect([0], f"curl -fsS -X POST {HUB}/_standin/faults -d '{body}'")


def assert_verified(host, name):
    path = f"{GGUF}/{name}"
    assert host.check_output(f"sha256sum {path}").split()[0] == FILES[name]["sha256"]
    record = json.loads(host.file(f"{GGUF}/.{name}.verified.json").content_string)
    assert (record["sha256"], record["size"]) == (FILES[name]["sha256"], FILES[name]["size"])
    assert record["commit"] == _doc["repos"][FILES[name]["repo"]]["refs"]["main"]


def test_converge_fetched_the_0731_set_verified(spark01, spark02):
    for host in (spark01, spark02):
        directory = host.file(GGUF)
        assert (directory.user, directory.group, directory.mode) == ("root", "root", 0o755)
        assert entries(host) == traces(NEW)
        for name in NEW:
            assert_verified(host, name)
            weights = host.file(f"{GGUF}/{name}")
            assert (weights.user, weights.mode) == ("root", 0o644)
        fact = json.loads(host.file(FACT).content_string)
        assert (fact["generation"], fact["speculation"], fact["gguf_dir"]) == ("0731", "dspark", GGUF)
        assert {role: f["name"] for role, f in fact["files"].items()} == {"base": BASE, "dspark": DRAFTER}


def test_check_mode_says_what_it_would_fetch_and_changes_nothing(spark01):
    before = spark01.check_output(f"ls -lA --time-style=+%s.%N {GGUF}")
    run = play("--check", "-e", "ds4_model_generation=legacy", "-e", "ds4_speculation=mtp", limit="spark01")
    assert run.rc == 0, run
    size = FILES[OLD_BASE]["size"] + FILES[OLD_MTP]["size"]
    assert run.said(f"would fetch {size:,} bytes in 2 file(s)")
    assert run.said(f"fetch {OLD_BASE}: {FILES[OLD_BASE]['size']:,} bytes")
    assert spark01.check_output(f"ls -lA --time-style=+%s.%N {GGUF}") == before


def test_an_installers_files_are_adopted_and_its_partial_download_resumed(spark01, spark02):
    partial = 20000
    for host in (spark01, spark02):
        empty(host)
        host.run_expect([0], "rm -rf /root/gguf && mkdir /root/gguf")
        # What install.sh leaves: curl -L -C - writes under the final name; the drafter was cut short.
        host.run_expect([0], f"curl -fsSL -o /root/gguf/{BASE} {url(BASE)}")
        host.run_expect([0], f"curl -fsSL -r 0-{partial - 1} -o /root/gguf/{DRAFTER} {url(DRAFTER)}")
    inode = spark01.file(f"/root/gguf/{BASE}").inode

    run = play()
    assert run.rc == 0, run
    for host in (spark01, spark02):
        assert entries(host) == traces(NEW)
        for name in NEW:
            assert_verified(host, name)
    # Same filesystem: moved in (the very file), the partial download resumed where curl stopped.
    assert spark01.file(f"{GGUF}/{BASE}").inode == inode
    assert ggufs(spark01, "/root/gguf") == set()
    progress = json.loads(spark01.file(f"{GGUF}/.{DRAFTER}.progress.json").content_string)
    assert (progress["state"], progress["resumed_from"]) == ("done", partial)
    assert run.said(f"after the {partial:,} already on disk")
    # spark02's weights are on another filesystem: the full file copied, the originals left alone.
    assert ggufs(spark02, "/root/gguf") == NEW
    assert spark02.file(f"/root/gguf/{DRAFTER}").size == partial


def test_a_cut_download_resumes_on_the_next_run_showing_progress(spark01):
    size, cut = FILES[BASE]["size"], 200000
    empty(spark01)
    fault(spark01, file=BASE, cut_after=cut, times=1)
    run = play("-e", "ds4_weights_retries=0", limit="spark01")
    assert run.rc != 0 and run.said(f"ended at byte {cut:,} of {size:,}"), run
    assert spark01.file(f"{GGUF}/{BASE}.part").size == cut
    assert not spark01.file(f"{GGUF}/{BASE}").exists
    assert DRAFTER in ggufs(spark01)

    # The rest comes down until 100,000 bytes, then holds until a progress line with numbers (bytes, rate,
    # time left) was printed: arranged, so it holds however slowly a loaded machine runs the play. The
    # read timeout is only a hang guard here: the test, not the clock, ends the hold.
    fault(spark01, file=BASE, hold_after=100000, times=1)
    line = (
        rf"spark01: {re.escape(BASE)}: fetching [\d.]+ KiB of {size / 1024:.1f} KiB \(\d+%\), "
        rf"[\d.]+ (bytes|KiB)/s, .+ left( over \d+ connections)?, resumed with {cut:,} bytes on disk"
    )

    def let_go(live):
        live.wait_for("a progress line with numbers", lambda: live.printed(line))
        release(spark01, BASE)

    run = play(
        "-e", "ds4_weights_progress_interval=1", "-e", "ds4_weights_timeout=3600", limit="spark01",
        during=let_go,
    )  # fmt: skip
    assert run.rc == 0, run
    assert_verified(spark01, BASE)
    assert not spark01.file(f"{GGUF}/{BASE}.part").exists
    progress = json.loads(spark01.file(f"{GGUF}/.{BASE}.progress.json").content_string)
    assert (progress["state"], progress["resumed_from"], progress["bytes_done"]) == ("done", cut, size)
    assert run.said(f"resumed, {size - cut:,} bytes after the {cut:,} already on disk")


@pytest.fixture(scope="module")
def legacy(spark01, spark02):
    """Both Sparks with every legacy file, fetched by the role once for this file's tests (run with the
    drafter, then with the MTP head, as the installer's launcher ladder uses both); kept aside to restore
    before each case, removed after them."""
    for host in (spark01, spark02):
        empty(host)
    for speculation in ("dspark", "mtp"):
        run = play("-e", "ds4_model_generation=legacy", "-e", f"ds4_speculation={speculation}")
        assert run.rc == 0, run
    for host in (spark01, spark02):
        assert entries(host) == traces(OLD)
        for name in OLD:
            assert_verified(host, name)
        host.run_expect([0], f"rm -rf {LEGACY_COPY} && cp -a {GGUF} {LEGACY_COPY}")

    def restore():
        for host in (spark01, spark02):
            host.run_expect([0], f"rm -rf {GGUF} && cp -a {LEGACY_COPY} {GGUF}")

    yield restore
    for host in (spark01, spark02):
        host.run_expect([0], f"rm -rf {LEGACY_COPY}")


def test_keep_keeps_both_where_they_fit_and_refuses_with_the_shortfall_where_not(legacy, spark01, spark02):
    legacy()
    run = play("-e", "ds4_old_weights=keep")
    assert (run.failed("spark01"), run.failed("spark02")) == (0, 1), run
    assert ggufs(spark01) == OLD | NEW
    shortfall = run.search(r"not enough space in /var/lib/ds4/gguf: .* short by ([\d,]+) bytes")
    assert shortfall and int(shortfall[1].replace(",", "")) > 0, run
    assert run.said("ds4_old_weights=keep forbids removing the other generation")
    # Refused before any byte moved.
    assert entries(spark02) == traces(OLD)


def test_an_installers_file_too_large_to_copy_is_used_in_place(legacy, spark02):
    legacy()
    spark02.run_expect([0], "rm -rf /root/gguf && mkdir /root/gguf")
    spark02.run_expect([0], f"curl -fsSL -o /root/gguf/{BASE} {url(BASE)}")
    # Beside the kept legacy files there is room to fetch the drafter, not to copy the base.
    run = play("-e", "ds4_old_weights=keep", limit="spark02")
    assert run.rc == 0, run
    assert run.said("too large to copy, link it from its place")
    link = spark02.file(f"{GGUF}/{BASE}")
    assert link.is_symlink and link.linked_to == f"/root/gguf/{BASE}"
    assert ggufs(spark02) == OLD | NEW
    for name in NEW:
        assert_verified(spark02, name)
    # Verified through the link: the next run neither hashes it again nor changes anything.
    again = play("-e", "ds4_old_weights=keep", limit="spark02")
    assert again.rc == 0 and again.changed("spark02") == 0, again


def test_auto_removes_first_only_where_space_demands_it(legacy, spark01, spark02):
    legacy()
    run = play()
    assert run.rc == 0, run
    assert ggufs(spark01) == OLD | NEW
    assert run.said("keep DSpark-drafter-Q2K-Q8.gguf: fits beside the new files")
    # The legacy files went with their records and progress files; only 0731's are left.
    assert entries(spark02) == traces(NEW)
    for name in NEW:
        assert_verified(spark02, name)


def test_remove_removes_after_the_smoke_test_never_a_file_in_use(legacy, spark01, spark02):
    legacy()
    run = play("-e", "ds4_old_weights=remove")
    assert run.rc == 0, run
    # spark01 waits for the smoke test; spark02 had to make room first.
    assert ggufs(spark01) == OLD | NEW
    assert run.said(f"remove after the smoke test {GGUF}/{OLD_BASE}")
    assert entries(spark02) == traces(NEW)

    # The activation step's cleanup while a process holds the legacy drafter open and the MTP head is
    # named in ds4_weights_in_use: both stay, the base goes.
    hold = f"exec 3<{GGUF}/{OLD_DRAFTER}; exec sleep 600"
    spark01.run_expect([0], f"systemd-run --unit=weights-holder sh -c '{hold}'")
    try:
        # Until the holder has the file open (a bound, not a pace).
        spark01.run_expect(
            [0],
            "timeout 60 sh -c 'until ls -l /proc/$(systemctl show -p MainPID --value weights-holder)/fd "
            f"2>/dev/null | grep -q {OLD_DRAFTER}; do sleep 0.1; done'",
        )
        run = cleanup("-e", json.dumps({"ds4_weights_in_use": [f"{GGUF}/{OLD_MTP}"]}))
        assert run.rc == 0, run
        assert ggufs(spark01) == NEW | {OLD_DRAFTER, OLD_MTP}
        assert run.said("kept DSpark-drafter-Q2K-Q8.gguf: in use by the running service")
    finally:
        spark01.run("systemctl stop weights-holder")
    run = cleanup()
    assert run.rc == 0, run
    assert entries(spark01) == traces(NEW)
    for name in NEW:
        assert_verified(spark01, name)


def address(host):
    return host.check_output("ip -4 -o route get 1.1.1.1").split(" src ")[1].split()[0]


def listens(host, on, port=18090):
    return host.run(f"timeout 2 bash -c '</dev/tcp/{on}/{port}'").rc == 0


def test_peers_each_file_crosses_the_hub_once_and_the_port_closes_even_after_a_failure(spark01, spark02):
    for host in (spark01, spark02):
        empty(host)
    run = play()
    assert run.rc == 0, run
    seed = f"http://{address(spark01)}:18090"
    for name in NEW:
        assert run.said(f"spark01 seeds {name} from the hub for spark02")
        assert run.said(f"{GGUF}/{name}: fetched, {FILES[name]['size']:,} bytes")
        assert run.search(rf"{re.escape(GGUF)}/{re.escape(name)}: fetched, .* from the hub;")
        assert run.search(rf"{re.escape(GGUF)}/{re.escape(name)}: fetched, .* from the peer {seed};")
        for host in (spark01, spark02):
            assert_verified(host, name)
    assert run.search(r"served .*bytes to " + re.escape(address(spark02))), run
    assert not listens(spark02, address(spark01)), "the peer port is closed after the run"

    # A lying seed (its base has a flipped byte, its record says it is fine) and a hub that fails: spark02
    # catches the copy, cannot get another and fails; spark01's port is closed all the same.
    empty(spark02)
    spark01.run_expect([0], f"printf '\\377' | dd of={GGUF}/{BASE} bs=1 seek=1000 conv=notrunc status=none")
    spark01.run_expect(
        [0],
        "python3 -c 'import json, os, sys; p, r = sys.argv[1:]; d = json.load(open(r)); st = os.stat(p);"
        " d.update(size=st.st_size, mtime_ns=st.st_mtime_ns, ino=st.st_ino, dev=st.st_dev);"
        f' json.dump(d, open(r, "w"))\' {GGUF}/{BASE} {GGUF}/.{BASE}.verified.json',
    )
    fault(spark01, file=BASE, status=500, times=None)
    try:
        run = play("-e", "ds4_weights_retries=0")
    finally:
        spark01.run_expect([0], f"curl -fsS -X DELETE {HUB}/_standin/faults")
    assert run.rc != 0
    caught = f"the copy of {BASE} from the peer {seed} had sha256"
    assert any(caught in warning for warning in run.warnings("spark02")), run.warnings("spark02")
    assert run.failed("spark02") == 1 and run.failed("spark01") == 0, run
    assert not listens(spark02, address(spark01)), "the peer port is closed after a failed run"
    assert not spark02.file(f"{GGUF}/{BASE}").exists


def part_bytes(host, name):
    """Bytes of `name` listed as written by the fetch under way (its relay list), 0 before it has one."""
    doc = host.run(f"cat {GGUF}/.{name}.part.held.json 2>/dev/null").stdout
    return sum(end - start for start, end in json.loads(doc)["held"]) if doc.strip() else 0


def test_a_relay_serves_what_it_holds_mid_transfer_and_its_death_sends_its_receiver_on(spark01, spark02):
    try:
        relay_mid_transfer_then_killed(spark01, spark02)
    finally:
        spark01.run_expect([0], f"curl -fsS -X DELETE {HUB}/_standin/faults")


def relay_mid_transfer_then_killed(spark01, spark02):
    # The hub holds spark01's transfer of the base after 100,000 bytes (one ranged GET: the stand-in's
    # file is smaller than a piece), so that spark01 is still receiving when spark02 asks it. The read
    # timeout is only a hang guard here: the test, not the clock, ends the hold.
    size, slow = FILES[BASE]["size"], ("-e", "ds4_weights_timeout=3600")
    seed = f"http://{address(spark01)}:18090"
    for host in (spark01, spark02):
        empty(host)
    fault(spark01, file=BASE, hold_after=100000, times=1)

    def relayed(spark01, spark02):
        """spark02 holds all that spark01 has received so far, some of the file and not all of it."""
        has = part_bytes(spark01, BASE)
        return 0 < has < size and part_bytes(spark02, BASE) >= has

    def relayed_then_let_go(live):
        live.wait_for("spark02 holding what spark01 has so far", lambda: relayed(spark01, spark02))
        release(spark01, BASE)

    run = play(*slow, during=relayed_then_let_go)
    assert run.rc == 0, run
    assert run.said(f"spark01 seeds {BASE} from the hub for spark02, relaying it to spark02 as it comes")
    assert run.search(rf"{re.escape(BASE)}: fetched, {size:,} bytes .* from the peer {seed};"), run
    for host in (spark01, spark02):
        assert_verified(host, BASE)
        assert not host.file(f"{GGUF}/.{BASE}.part.held.json").exists

    # The relay dies mid-transfer (its fetch killed, as a Spark that goes down): spark02 keeps the bytes it
    # had from it and takes the rest from its next source, the hub.
    for host in (spark01, spark02):
        empty(host)
    fault(spark01, file=BASE, hold_after=100000, times=1)
    had = {}

    def relay_dies(live):
        live.wait_for("spark02 holding what spark01 has so far", lambda: relayed(spark01, spark02))
        had["bytes"] = part_bytes(spark01, BASE)
        pid = json.loads(spark01.file(f"{GGUF}/.{BASE}.part.held.json").content_string)["pid"]
        spark01.run_expect([0], f"kill -9 {pid}")
        release(spark01, BASE)

    run = play(*slow, during=relay_dies)
    assert run.failed("spark02") == 0 and run.failed("spark01") == 1, run
    came = run.search(rf"{re.escape(BASE)}: fetched, .* from the hub \({re.escape(seed)}: (\d+) bytes, hub")
    assert came and int(came.group(1)) >= had["bytes"], run
    warnings = run.warnings("spark02")
    assert any(f"the peer {seed} failed for {BASE}" in w for w in warnings), warnings
    assert_verified(spark02, BASE)


# A local user's server on a Spark's peer port (issue 55, point 1): it answers every request as a relay of
# this run that does not hold the bytes yet would ("503 not yet"), and writes a line for each request to a
# file.
SQUATTER = """
import http.server, sys
class NotYet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        with open(sys.argv[1], "a") as seen:
            seen.write(self.path + "\\n")
        self.send_response(503)
        self.send_header("X-Ds4-Relay", "not-yet")
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_HEAD = do_GET
http.server.ThreadingHTTPServer(("0.0.0.0", 18090), NotYet).serve_forever()
"""
SQUATTER_LOG = "/tmp/squatter.log"
SQUATTER_UNIT = "test-squatter"
# How long a peer saying "not yet" was waited for before its receiver took the hub (_weights.hub.PEER_STALL,
# 330 s): each squatted source cost a receiver that long. Now it costs a try at once, and the whole run over
# both Sparks ends well inside it, on a loaded machine too (it takes tens of seconds on a quiet one).
STALL_BEFORE = 330


def weight_jobs(host):
    """The command lines of the fetches and the peer server (async jobs) still running on HOST."""
    return host.run("pgrep -af '[d]s4_hub_file|[d]s4_peer_serve'").stdout.splitlines()


def test_a_local_user_on_a_peer_port_fails_that_sparks_run_and_costs_the_others_a_try_at_once(
    spark01, spark02
):
    """Issue 55, point 1, as it was reproduced: user nobody listens on spark01's peer port and answers
    "not yet"; spark02's weights are gone. spark01's run fails naming the socket's user; spark02 asks the
    squatter once a file, takes the answer without the run's token for a stranger's, and gets its weights
    from the hub within the bound; no fetch or peer server of the run is left running."""
    spark01.check_output("install -o nobody -m 0644 /dev/null %s", SQUATTER_LOG)
    spark01.check_output(
        "systemd-run --unit=%s --uid=nobody --gid=nogroup python3 -c %s %s",
        SQUATTER_UNIT,
        SQUATTER,
        SQUATTER_LOG,
    )
    try:
        wait_for(
            "the squatter listening on spark01's peer port", lambda: listens(spark01, address(spark01)), 60
        )
        empty(spark02)
        started = time.monotonic()

        def bounded(live):
            # Ends the run (the test then fails) rather than wait out a stall as long as it cost before.
            wait_for("the run over both Sparks ending", lambda: not live.running, STALL_BEFORE, longest=2.0)

        run = play(during=bounded)
        took = time.monotonic() - started
        asked = spark01.file(SQUATTER_LOG).content_string.splitlines()
    finally:
        spark01.run("systemctl stop %s; systemctl reset-failed %s", SQUATTER_UNIT, SQUATTER_UNIT)
        spark01.run("rm -f %s", SQUATTER_LOG)
    assert not run.killed and took < STALL_BEFORE, f"the run took {took:.0f} s\n{run}"

    # spark01: the port is not its own server's, and the run says whose it is.
    assert run.failed("spark01") >= 1, run
    refused = run.result("Wait until this Spark's own peer server listens for its peers", "spark01")
    assert refused.failed and "held by a socket of nobody" in refused.msg, refused.msg

    # spark02: each file asked of the squatter once or so, taken from the hub, verified.
    assert run.failed("spark02") == 0, run
    seed = f"http://{address(spark01)}:18090"
    warnings = run.warnings("spark02")
    for name in NEW:
        assert any(
            f"the peer {seed} failed for {name}" in w and "not this run's peer server" in w for w in warnings
        ), warnings
        assert run.search(rf"{re.escape(GGUF)}/{re.escape(name)}: fetched, .* from the hub"), run
        assert_verified(spark02, name)
    assert 0 < len(asked) <= 2 * len(NEW), asked

    # Each job's processes end as it reports; a job left behind would run on until the heartbeat (300 s).
    for name, host in (("spark01", spark01), ("spark02", spark02)):
        wait_for(f"no fetch or peer server left on {name}", lambda h=host: not weight_jobs(h), 30)
