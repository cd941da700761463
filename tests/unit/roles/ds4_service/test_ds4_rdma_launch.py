"""A tensor pair member's RDMA launcher (roles/ds4_service/files/ds4-rdma-launch): at each start it finds the
device and GID index in sysfs, records them, says so in the journal (stderr), and becomes the engine."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
LINK = "enP2p1s0f1np1"
# The engine's stand-in: prints the arguments it was given, as JSON.
ENGINE = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]


@pytest.fixture
def installed(tmp_path):
    """ds4-rdma-launch with rdma.py beside it, as the role installs them."""
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy2(ROOT / "roles/ds4_service/files/ds4-rdma-launch", lib / "ds4-rdma-launch")
    shutil.copy2(ROOT / "plugins/module_utils/_spark/rdma.py", lib / "rdma.py")
    return lib / "ds4-rdma-launch"


def sysfs(root, index):
    """One ConnectX-7 port whose RoCE v2 GID of 10.77.0.2 sits at `index`."""
    port = root / "class/infiniband/rocep1s0f1/ports/1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True, exist_ok=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "gids" / str(index)).write_text("0000:0000:0000:0000:0000:ffff:0a4d:0002\n")
    (port / "gid_attrs/types" / str(index)).write_text("RoCE v2\n")
    (port / "gid_attrs/ndevs" / str(index)).write_text(LINK + "\n")


def launch(installed, root, state):
    argv = [sys.executable, "-B", str(installed), "--address", "10.77.0.2", "--root", str(root)]
    argv += ["--state", str(state), "--", *ENGINE, "--tensor-parallel", "--role", "worker"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout), done.stderr, json.loads(state.read_text())


def test_the_engine_gets_the_device_and_the_gid_index_of_each_start(installed, tmp_path):
    root, state = tmp_path / "sys", tmp_path / "transport.json"
    sysfs(root, 3)
    args, journal, recorded = launch(installed, root, state)
    assert args == ["--tensor-parallel", "--role", "worker", "--transport", "rdma", "--rdma-device",
                    "rocep1s0f1", "--rdma-gid-index", "3"]  # fmt: skip
    assert journal == (
        f"ds4-rdma-launch: 10.77.0.2 on RDMA device rocep1s0f1 port 1 (RoCE v2 GID index 3, {LINK})\n"
    )
    assert recorded["transport"] == "rdma" and recorded["found"]["gid_index"] == 3
    # After a "reboot" the index moved: the next start finds it there.
    shutil.rmtree(root)
    sysfs(root, 5)
    args, _journal, recorded = launch(installed, root, state)
    assert args[-2:] == ["--rdma-gid-index", "5"] and recorded["found"]["gid_index"] == 5


def test_without_a_device_the_engine_runs_over_tcp_and_the_journal_and_state_say_so(installed, tmp_path):
    state = tmp_path / "transport.json"
    args, journal, recorded = launch(installed, tmp_path / "sys", state)
    assert args == ["--tensor-parallel", "--role", "worker", "--transport", "tcp"]
    assert journal.startswith("ds4-rdma-launch: warning: no RDMA device serves the link address 10.77.0.2")
    assert recorded["transport"] == "tcp" and recorded["warning"].startswith("no RDMA device serves")
