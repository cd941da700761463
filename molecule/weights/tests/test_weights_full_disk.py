"""A disk that fills while the weights come down, on a real filesystem: spark02's /var/lib/ds4, a 640 KiB
tmpfs, filled beside the fetch by another file (as a log or a second download fills a disk in the field).

Twice in one story (each step needs the one before): the plan passed and the disk filled before the first
byte, then it filled half way. Each time the run ends with an error that names the directory, the bytes
still to come and the free space; what came down stays for the next run, which resumes once room was made;
no other file is lost or cut short; and a process serving from the weights it has mapped (what the engine
does) keeps answering with the same bytes. The fetch is held by the hub stand-in (`hold_after`) while the
disk fills, so the order is arranged, not timed. The Spark is left with its verified 0731 set, as converge
left it.
"""

import base64
import json
import os
import re
import threading
from pathlib import Path

import pytest
from nested import play
from spark import sandbox_host
from waits import wait_for

PLAYBOOK = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "weights.yml"
# The directory, so that the sandbox group_vars linked beside the inventory file apply too.
INVENTORY = Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent
HUB = "http://forge:18080"
DISK = "/var/lib/ds4"
GGUF = f"{DISK}/gguf"
FILLER = f"{DISK}/filler"
_doc = json.loads(
    (Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]) / ".sandbox/forge/hub/hub.json").read_text()
)
FILES = {
    name: entry
    for content in _doc["repos"].values()
    for commit in content["commits"].values()
    for name, entry in commit["files"].items()
}
BASE = next(n for n, f in FILES.items() if (f["generation"], f["role"]) == ("0731", "base"))
DRAFTER = next(n for n, f in FILES.items() if (f["generation"], f["role"]) == ("0731", "dspark"))
ENGINE_PORT = 18111
# What stands in for the running engine: it maps its weight file, as ds4-server does, and answers each
# request with the sha256 of the bytes it maps.
ENGINE = f"""
import hashlib, http.server, mmap, sys
held = open(sys.argv[1], "rb")
weights = mmap.mmap(held.fileno(), 0, access=mmap.ACCESS_READ)
class Serve(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = hashlib.sha256(weights).hexdigest().encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("127.0.0.1", {ENGINE_PORT}), Serve).serve_forever()
"""


@pytest.fixture(scope="module")
def spark02():
    return sandbox_host("spark02")


def hub(host, method, path, body=None):
    data = f" -d '{json.dumps(body)}'" if body is not None else ""
    return json.loads(host.check_output(f"curl -fsS -X {method} {HUB}{path}{data}"))


def free(host):
    return int(host.check_output(f"df --output=avail -B1 {DISK} | tail -1"))


def entries(host):
    return set(host.run(f"ls -A {GGUF}").stdout.split())


def sha256(host, path):
    return host.check_output(f"sha256sum {path}").split()[0]


def kept(host):
    """Bytes of the base's part that its range list says are on disk."""
    doc = json.loads(host.file(f"{GGUF}/.{BASE}.part.json").content_string)
    return sum(end - start for start, end in doc["done"])


def weights(*args):
    """The role nested on spark02, as an operator runs it: a nested.Run."""
    return play(PLAYBOOK, "--limit", "spark02", *args, inventory=INVENTORY, project_config=False)


def others(host):
    """The sha256 of every file in the weights directory but the base's own (its part, lists, record)."""
    return host.check_output(f"cd {GGUF} && ls -A | grep -vF {BASE} | xargs -r sha256sum")


def written(host):
    """Bytes the base's part holds on the disk (its blocks: it is written out of order, sparse)."""
    done = host.run(f"stat -c '%b %B' {GGUF}/{BASE}.part")
    blocks, size = map(int, done.stdout.split()) if done.rc == 0 else (0, 0)
    return blocks * size


def fill_while_held(host, hold_after):
    """Run the role on HOST; once the hub holds the base's transfer after `hold_after` bytes, fill the
    disk beside it and let the transfer go on. The nested.Run."""
    hub(host, "POST", "/_standin/faults", {"file": BASE, "hold_after": hold_after, "times": 1})
    done = {}
    # The read timeout is only a hang guard here: the test, not the clock, ends the hold.
    runner = threading.Thread(target=lambda: done.update(run=weights("-e", "ds4_weights_timeout=3600")))
    runner.start()
    try:
        wait_for(
            f"the hub holding {BASE} after {hold_after:,} bytes",
            lambda: hub(host, "GET", "/_standin/holds")["holds"][BASE]["waiting"],
            timeout=600,
        )
        # And the fetch having written some of them: urllib3 1.26 (the Sparks' Debian) reads in growing
        # blocks and waits for a whole block, so part of what the hub sent may wait in the socket.
        wait_for(
            f"bytes of {BASE} written to its part",
            lambda: written(host) >= min(hold_after, 1),
            timeout=600,
        )
        # dd stops at the full disk (and says so): it is the other writer.
        host.run(f"dd if=/dev/zero of={FILLER} bs=4096")
        assert free(host) < FILES[BASE]["size"] - hold_after
    finally:
        hub(host, "POST", "/_standin/holds/release", {"file": BASE})
        runner.join()
    return done["run"]


@pytest.fixture
def the_0731_set(spark02):
    """spark02 with the verified 0731 set alone, as converge leaves it: fetched again by the role when
    another test left something else (the legacy files leave no room on its small disk). The role runs
    either way: a set put back by copying (test_weights.py's put_back) has new inodes, so its records no
    longer vouch for it, and the test's own first run would hash the files again and rewrite them."""
    names = {BASE, DRAFTER}
    wanted = {t for n in names for t in (n, f".{n}.verified.json", f".{n}.progress.json")}
    if entries(spark02) != wanted or any(sha256(spark02, f"{GGUF}/{n}") != FILES[n]["sha256"] for n in names):
        spark02.run_expect([0], f"rm -rf {GGUF} {FILLER} && install -d -m 0755 {GGUF}")
    run = weights()
    assert run.rc == 0, run


@pytest.fixture
def engine(spark02, the_0731_set):
    """The stand-in engine serving from the drafter; stopped after the test. Returns a function that
    asks it for the sha256 of what it maps."""
    script = base64.b64encode(ENGINE.encode()).decode()
    spark02.run_expect([0], f"echo {script} | base64 -d > /root/weights-engine.py")
    # --collect: a unit that failed is not kept, and the next test starts its own.
    spark02.run_expect(
        [0], f"systemd-run --collect --unit=weights-engine python3 /root/weights-engine.py {GGUF}/{DRAFTER}"
    )

    def ask():
        return spark02.run(f"curl -fsS --max-time 10 http://127.0.0.1:{ENGINE_PORT}/").stdout

    try:
        wait_for("the stand-in engine answering", ask, timeout=60)
        yield ask
    finally:
        spark02.run("systemctl stop weights-engine; rm -f /root/weights-engine.py")


def assert_said_no_space(run, needed):
    """The run failed on spark02 with the message the issue asks: the directory, the bytes still to
    come and the free space."""
    assert run.rc != 0 and run.failed("spark02") == 1, run
    said = run.search(
        rf"{re.escape(GGUF)} filled up while fetching {re.escape(BASE)}: ([\d,]+) bytes .*still to come "
        r"and ([\d,]+) bytes .*free",
        "spark02",
    )
    assert said, run
    assert int(said[1].replace(",", "")) == needed, said[0]


def test_a_disk_that_fills_during_the_fetch_keeps_what_came_and_resumes(spark02, engine):
    size = FILES[BASE]["size"]
    serving = engine()
    assert serving == FILES[DRAFTER]["sha256"]
    spark02.run_expect([0], f"rm -f {FILLER} {GGUF}/{BASE} {GGUF}/.{BASE}.*")
    before = others(spark02)
    try:
        # 1. The plan passed (the disk had room), then the disk filled before the first byte came.
        run = fill_while_held(spark02, 0)
        assert run.result("Plan the weights against what is on disk", "spark02").data["fits"], run
        assert_said_no_space(run, size)
        assert not spark02.file(f"{GGUF}/{BASE}").exists

        # 2. Room made, the disk fills again while half the file is coming: what came stays, listed.
        spark02.run_expect([0], f"rm -f {FILLER}")
        half = size // 2
        run = fill_while_held(spark02, half)
        assert 0 < kept(spark02) < size, run
        assert_said_no_space(run, size - kept(spark02))
        assert not spark02.file(f"{GGUF}/{BASE}").exists

        # Nothing else lost or cut short, and the engine still serves its weights.
        assert others(spark02) == before
        assert engine() == serving

        # 3. Room made: the next run resumes with what the failed one kept.
        on_disk = kept(spark02)
        spark02.run_expect([0], f"rm -f {FILLER}")
        run = weights()
        assert run.rc == 0, run
        assert run.said(f"resumed, {size - on_disk:,} bytes after the {on_disk:,} already on disk")
        assert sha256(spark02, f"{GGUF}/{BASE}") == FILES[BASE]["sha256"]
        assert engine() == serving
    finally:
        spark02.run(f"rm -f {FILLER}")
        hub(spark02, "DELETE", "/_standin/faults")
        if spark02.run(f"sha256sum {GGUF}/{BASE}").stdout.split()[:1] != [FILES[BASE]["sha256"]]:
            assert weights().rc == 0
