"""RDMA discovery (_spark.rdma) over a fake /sys/class/infiniband in the kernel's layout: the RoCE v2 GID of a
link address, found again when its index moved, and the TCP fallback where no device serves it."""

import ipaddress

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._spark import rdma

ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def gid_text(address):
    """A GID as the kernel writes it: 8 groups of 4 hex digits (an IPv4 address mapped into IPv6)."""
    ip = ipaddress.ip_address(address)
    mapped = ipaddress.IPv6Address(f"::ffff:{ip}") if ip.version == 4 else ip
    return ":".join(mapped.exploded.split(":"))


def make_port(root, device, port, table, state="4: ACTIVE"):
    """`table`: {index: (address or None, type, ndev)}; None is an unused index (zero GID, attributes that
    cannot be read, as the kernel's EINVAL)."""
    at = root / "class" / "infiniband" / device / "ports" / str(port)
    (at / "gids").mkdir(parents=True)
    (at / "gid_attrs" / "types").mkdir(parents=True)
    (at / "gid_attrs" / "ndevs").mkdir(parents=True)
    (at / "state").write_text(state + "\n")
    for index, (address, kind, ndev) in table.items():
        (at / "gids" / str(index)).write_text((gid_text(address) if address else ZERO) + "\n")
        if address:
            (at / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
            (at / "gid_attrs" / "ndevs" / str(index)).write_text(ndev + "\n")
        else:
            # Unreadable as on the kernel (EINVAL): a directory in the file's place cannot be read.
            (at / "gid_attrs" / "types" / str(index)).mkdir()


LINK = "enP2p1s0f1np1"


@pytest.fixture
def spark(tmp_path):
    """Two ConnectX-7 ports as DGX OS shows them: the link's on the second, its IPv4 GIDs v1 and v2."""
    make_port(tmp_path, "rocep1s0f0", 1, {0: ("fe80::1", "IB/RoCE v1", "enP2p1s0f0np0"), 1: (None, "", "")})
    make_port(tmp_path, "rocep1s0f1", 1, {
        0: ("fe80::a9e:1ff:fe02:304", "IB/RoCE v1", LINK),
        1: ("fe80::a9e:1ff:fe02:304", "RoCE v2", LINK),
        2: ("10.77.0.2", "IB/RoCE v1", LINK),
        3: ("10.77.0.2", "RoCE v2", LINK),
        4: (None, "", ""),
    })  # fmt: skip
    return tmp_path


def test_the_roce_v2_gid_of_the_link_address_is_found(spark):
    assert rdma.find("10.77.0.2", str(spark)) == {
        "device": "rocep1s0f1", "port": 1, "gid_index": 3, "ndev": LINK, "active": True,
    }  # fmt: skip
    chosen = rdma.transport("10.77.0.2", str(spark))
    assert chosen["flags"] == ["--transport", "rdma", "--rdma-device", "rocep1s0f1", "--rdma-gid-index", "3"]
    assert chosen["warning"] is None


def test_an_ipv6_link_address_is_matched_as_itself(spark):
    assert rdma.find("fe80::a9e:1ff:fe02:304", str(spark))["gid_index"] == 1


def test_the_gid_index_moved_since_the_last_start_is_found_again(tmp_path):
    # After a reboot the kernel may list the link's IPv4 GIDs at other indexes (an IPv6 address came first).
    make_port(tmp_path, "rocep1s0f1", 1, {
        0: ("fe80::a9e:1ff:fe02:304", "IB/RoCE v1", LINK),
        1: ("fe80::a9e:1ff:fe02:304", "RoCE v2", LINK),
        2: ("fd00::2", "IB/RoCE v1", LINK),
        3: ("fd00::2", "RoCE v2", LINK),
        4: ("10.77.0.2", "IB/RoCE v1", LINK),
        5: ("10.77.0.2", "RoCE v2", LINK),
        10: ("10.77.0.9", "RoCE v2", LINK),
    })  # fmt: skip
    assert rdma.find("10.77.0.2", str(tmp_path))["gid_index"] == 5


def test_only_a_roce_v2_gid_serves_and_an_active_port_comes_first(tmp_path):
    make_port(tmp_path, "rocep1s0f0", 1, {2: ("10.77.0.2", "IB/RoCE v1", LINK)})
    assert rdma.find("10.77.0.2", str(tmp_path)) is None
    make_port(tmp_path, "mlx5_0", 1, {3: ("10.77.0.2", "RoCE v2", LINK)}, state="1: DOWN")
    make_port(tmp_path, "mlx5_1", 1, {7: ("10.77.0.2", "RoCE v2", LINK)})
    assert rdma.find("10.77.0.2", str(tmp_path))["device"] == "mlx5_1"


def test_a_down_port_is_still_used_with_a_warning(tmp_path):
    make_port(tmp_path, "mlx5_0", 1, {3: ("10.77.0.2", "RoCE v2", LINK)}, state="1: DOWN")
    chosen = rdma.transport("10.77.0.2", str(tmp_path))
    assert chosen["transport"] == "rdma"
    assert chosen["warning"] == "the RDMA port mlx5_0 port 1 serving 10.77.0.2 is not ACTIVE"


@pytest.mark.parametrize("address", ["10.77.0.1", "10.77.0.20"])
def test_no_device_for_the_address_falls_back_to_tcp_and_says_why(spark, address):
    chosen = rdma.transport(address, str(spark))
    assert chosen["flags"] == ["--transport", "tcp"] and chosen["found"] is None
    assert chosen["warning"] == (
        f"no RDMA device serves the link address {address} (no RoCE v2 GID under {spark}/class/infiniband "
        "holds it): the pair runs over TCP, slower; cable the ConnectX-7 port and load its driver, then "
        "restart the unit"
    )


def test_a_spark_without_any_rdma_device_falls_back_to_tcp(tmp_path):
    assert rdma.gids(str(tmp_path)) == []
    assert rdma.transport("10.77.0.2", str(tmp_path))["transport"] == "tcp"


def test_an_unused_index_and_stray_entries_are_no_gid(spark):
    (spark / "class/infiniband/rocep1s0f1/ports/1/gids/bogus").write_text(gid_text("10.77.0.2"))
    (spark / "class/infiniband/rocep1s0f1/ports/1/gids/6").write_text("not a gid\n")
    found = [(g["device"], g["gid_index"]) for g in rdma.gids(str(spark))]
    assert ("rocep1s0f0", 1) not in found and ("rocep1s0f1", 4) not in found
    assert ("rocep1s0f1", 6) not in found and len(found) == 5
