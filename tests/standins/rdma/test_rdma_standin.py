"""Tests of the STAND-IN RDMA device (tests/standins/rdma/rdma_device.py): the sysfs files and the verbs
node a sandbox pair member gets, in the kernel's layout (drivers/infiniband/core/sysfs.c), which the
product's discovery and the stand-in engine both read."""

import ipaddress
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parent / "rdma_device.py"


def tool(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, TOOL, *map(str, argv)], capture_output=True, text=True, timeout=30)


@pytest.fixture
def where(tmp_path) -> dict:
    return {"sysfs": tmp_path / "sys", "dev": tmp_path / "dev"}


def install(where, *extra) -> subprocess.CompletedProcess:
    done = tool("install", "--sysfs", where["sysfs"], "--dev", where["dev"], "--address", "10.77.0.2",
                "--node", "file", *extra)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def roce_v2(sysfs: Path) -> dict[int, str]:
    """{index: address} of every RoCE v2 GID of the stand-in device's port 1, read as the kernel lays it out
    (an unused index holds the zero GID and has no type)."""
    port = sysfs / "class/infiniband/rocep1s0f1/ports/1"
    found = {}
    for gid in (port / "gids").iterdir():
        address = ipaddress.IPv6Address(gid.read_text().strip())
        kind = port / "gid_attrs/types" / gid.name
        if address != ipaddress.IPv6Address(0) and kind.exists() and kind.read_text().strip() == "RoCE v2":
            found[int(gid.name)] = str(address.ipv4_mapped or address)
    return found


def test_the_device_holds_the_link_address_as_a_roce_v2_gid_with_its_verbs_node(where):
    install(where, "--gid-index", "3")
    port = where["sysfs"] / "class/infiniband/rocep1s0f1/ports/1"
    assert (port / "state").read_text() == "4: ACTIVE\n"
    assert (port / "gids/3").read_text() == "0000:0000:0000:0000:0000:ffff:0a4d:0002\n"
    assert (port / "gid_attrs/types/2").read_text() == "IB/RoCE v1\n"
    assert (port / "gid_attrs/ndevs/3").read_text() == "enP2p1s0f1np1\n"
    assert roce_v2(where["sysfs"]) == {1: "fe80::ff:fe00:2", 3: "10.77.0.2"}
    verbs = where["sysfs"] / "class/infiniband_verbs/uverbs0/ibdev"
    assert verbs.read_text() == "rocep1s0f1\n"
    assert (where["dev"] / "infiniband/uverbs0").is_file() and (where["dev"] / "infiniband/rdma_cm").is_file()


def test_the_gid_index_moves_as_after_a_reboot(where):
    install(where, "--gid-index", "3")
    install(where, "--gid-index", "5")
    assert roce_v2(where["sysfs"]) == {1: "fe80::ff:fe00:2", 5: "10.77.0.2"}
    assert not (where["sysfs"] / "class/infiniband/rocep1s0f1/ports/1/gid_attrs/types/3").exists()


def test_the_device_can_be_taken_away_and_nothing_of_it_is_left(where):
    install(where, "--gid-index", "3")
    done = tool("remove", "--sysfs", where["sysfs"], "--dev", where["dev"])
    assert done.returncode == 0, done.stderr
    assert os.listdir(where["sysfs"] / "class/infiniband") == []
    assert os.listdir(where["sysfs"] / "class/infiniband_verbs") == []
    assert not (where["dev"] / "infiniband").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_the_verbs_node_is_a_character_device_a_container_lets_a_process_open(where):
    done = tool("install", "--sysfs", where["sysfs"], "--dev", where["dev"], "--address", "10.77.0.2")
    assert done.returncode == 0, done.stderr
    node = os.stat(where["dev"] / "infiniband/uverbs0")
    assert stat.S_ISCHR(node.st_mode) and (os.major(node.st_rdev), os.minor(node.st_rdev)) == (1, 7)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--address", "10.77.0.2", "--gid-index", "2"], "--gid-index must be 3 to 15"),
        (["--address", "spark05"], "--address must be an IPv4 address"),
    ],
)
def test_bad_arguments_are_refused(where, argv, message):
    done = tool("install", "--sysfs", where["sysfs"], "--dev", where["dev"], *argv)
    assert done.returncode == 2 and message in done.stderr, done.stderr
