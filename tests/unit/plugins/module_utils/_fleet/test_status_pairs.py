"""The fleet report with a pair of Sparks (ds4_pairs): one record and one row for the pair, with both
members' state (module_utils/_fleet/status.py, ds4_fleet_table.py)."""

from ansible_collections.ds4.fleet.plugins.module_utils._fleet.status import fleet_records
from ansible_collections.ds4.fleet.plugins.module_utils._fleet.table import render_table
from test_status import fact, reading

PAIRS = {
    "pair01": {
        "coordinator": {"host": "spark04", "address": "10.77.0.1"},
        "worker": {"host": "spark05", "address": "10.77.0.2"},
    }
}
HOSTS = ["spark01", "spark04", "spark05"]


def worker_reading(release="v0.6.5", active="active"):
    """A worker's reading: its own unit, and no HTTP API to answer."""
    out = reading(release, answering=False, active=active)
    out["service"]["name"] = "ds4-worker.service"
    return out


def entries(worker=None, coordinator=None):
    return [
        {"host": "spark01", "reading": reading(), "fact": fact()},
        {"host": "spark04", "reading": coordinator or reading(), "fact": fact()},
        {"host": "spark05", "reading": worker or worker_reading(), "fact": fact()},
    ]


def test_a_pair_is_one_record_with_both_members():
    records = fleet_records(entries(), HOSTS, PAIRS)
    assert [r["host"] for r in records] == ["spark01", "pair01"]
    pair = records[1]
    assert pair["pair"] == {"name": "pair01", "coordinator": "spark04", "worker": "spark05",
                            "mode": "pipeline", "transport": None}  # fmt: skip
    assert [(m["host"], m["role"], m["service"]) for m in pair["members"]] == [
        ("spark04", "coordinator", "active"),
        ("spark05", "worker", "active"),
    ]
    assert pair["answering"] is True and pair["release"] == "v0.6.5"
    # The worker has no HTTP API: its silence is no note.
    assert pair["notes"] == []


def test_the_pair_row_shows_both_members_state():
    lines = render_table(fleet_records(entries(worker=worker_reading(active="failed")), HOSTS, PAIRS))
    # The first panel: its head, then a row each.
    assert lines[0].startswith("HOST") and lines[1].startswith("spark01 ")
    assert lines[2].startswith("pair01 (spark04+spark05)") and "active/failed" in lines[2]
    assert lines[3] == "" or lines[3].startswith("HOST")
    assert lines[-1] == "1 Spark, 1 pair: 1 serving v0.6.5, 1 not serving"


def test_members_on_different_releases_say_so():
    records = fleet_records(entries(worker=worker_reading("v0.6.3")), HOSTS, PAIRS)
    pair = records[1]
    assert pair["release"] == "v0.6.5/v0.6.3"
    assert (
        "the members run different releases (spark04 v0.6.5, spark05 v0.6.3): the pair cannot serve"
        in (pair["notes"])
    )
    assert pair["answering"] is False


def test_a_member_that_could_not_be_read_is_told_in_the_pair_row():
    rows = entries()
    rows[2] = {"host": "spark05", "reading": None, "error": "ssh: no route", "fact": fact()}
    pair = fleet_records(rows, HOSTS, PAIRS)[1]
    assert pair["service"] == "active/unreachable" and pair["answering"] is False
    assert "spark05 (worker): could not be read: ssh: no route" in pair["notes"]


def test_a_pair_with_one_member_in_the_report_stays_a_spark_row():
    records = fleet_records(entries()[:2], ["spark01", "spark04"], PAIRS)
    assert [r["host"] for r in records] == ["spark01", "spark04"]


def test_a_tensor_pair_says_its_mode_and_transport_and_a_tcp_fallback_is_a_note():
    tensor = {"pair01": dict(PAIRS["pair01"], mode="tensor")}
    rdma = {"transport": "rdma", "warning": None, "device": "rocep1s0f1", "gid_index": 3}
    tcp = {"transport": "tcp", "warning": "no RDMA device serves the link address 10.77.0.2 (...)",
           "device": None, "gid_index": None}  # fmt: skip
    coordinator, worker = reading(), worker_reading()
    coordinator["transport"], worker["transport"] = rdma, rdma
    pair = fleet_records(entries(worker, coordinator), HOSTS, tensor)[1]
    assert (pair["pair"]["mode"], pair["pair"]["transport"], pair["notes"]) == ("tensor", "rdma", [])
    worker = dict(worker, transport=tcp)
    pair = fleet_records(entries(worker, coordinator), HOSTS, tensor)[1]
    assert pair["pair"]["transport"] == "rdma/tcp"
    assert pair["notes"] == [
        "spark05 (worker): the tensor pair's transport is tcp: no RDMA device serves the link address "
        "10.77.0.2 (...)"
    ]


def test_the_table_shows_each_pair_s_mode_and_the_transport_its_members_use():
    tensor = {"pair01": dict(PAIRS["pair01"], mode="tensor")}
    rdma = {"transport": "rdma", "warning": None, "device": "rocep1s0f1", "gid_index": 3}
    tcp = {"transport": "tcp", "warning": "no RDMA device serves the link address 10.77.0.2 (...)"}
    coordinator = dict(reading(), transport=rdma)

    def row(records, host):
        """HOST's PAIR cell, in whichever panel of the table holds the column."""
        head = None
        for line in render_table(records):
            if line.startswith("HOST"):
                head = line if "PAIR" in line else None
            elif head and line.startswith(host):
                return line[head.index("PAIR") :].split("  ")[0].strip()
        return None

    assert row(fleet_records(entries(), HOSTS, PAIRS), "pair01") == "pipeline"
    assert row(fleet_records(entries(), HOSTS, PAIRS), "spark01") == "-"
    both = fleet_records(entries(dict(worker_reading(), transport=rdma), coordinator), HOSTS, tensor)
    assert row(both, "pair01") == "tensor rdma"
    fallback = fleet_records(entries(dict(worker_reading(), transport=tcp), coordinator), HOSTS, tensor)
    lines = render_table(fallback)
    assert row(fallback, "pair01") == "tensor rdma/tcp"
    assert "pair01: spark05 (worker): the tensor pair's transport is tcp: no RDMA device serves" in "\n".join(
        lines
    )
    # A fleet without a pair has no such column.
    single = fleet_records([{"host": "spark01", "reading": reading(), "fact": fact()}], ["spark01"], {})
    assert not any(line.startswith("HOST") and "PAIR" in line for line in render_table(single))
