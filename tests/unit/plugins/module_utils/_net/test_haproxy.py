"""The gateway's runtime-API client (module_utils/_net/haproxy.py) and module ds4_gateway_server, against a
small Unix-socket server that answers as HAProxy 2.6 does: its answers are the real ones captured in
fixtures/haproxy/ (SOURCES.md), with the fields a test changes (status, sessions, admin state) set per row."""

import socket
import threading
from pathlib import Path

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._net import haproxy as ds4_haproxy
from ansible_collections.ds4.fleet.plugins.module_utils._net.haproxy import (
    RuntimeApiError,
    admin_state,
    gateway_record,
    parse_servers_state,
    parse_stat,
    put_back,
    render_gateway_table,
    servers,
    set_state,
    take_out,
    wait_for,
)
from ansible_collections.ds4.fleet.plugins.modules import ds4_gateway_server
from module_runner import run_module

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "haproxy"
STAT = (FIXTURES / "show-stat.csv").read_text()
STATE = (FIXTURES / "show-servers-state.txt").read_text()


class FakeHAProxy:
    """The runtime API of a HAProxy whose backend ds4_sparks holds `servers`: name -> status, sessions,
    admin bits. `on_read` runs before each `show stat`, so that a test can make sessions end over time."""

    def __init__(self, path: Path):
        self.path = str(path)
        self.servers = {
            "spark01": {"status": "UP", "scur": 0, "admin": 0},
            "spark02": {"status": "UP", "scur": 0, "admin": 0},
        }
        self.commands = []
        self.on_read = None
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(8)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    data += conn.recv(4096)
                conn.sendall(self.answer(data.decode().strip()).encode())

    def answer(self, line: str) -> str:
        self.commands.append(line)
        words = line.split()
        if line == "show stat ds4_sparks 4 -1":
            if self.on_read:
                self.on_read(self)
            header, template = STAT.splitlines()[0], STAT.splitlines()[1].split(",")
            names = header[2:].split(",")
            rows = []
            for name, s in self.servers.items():
                row = list(template)
                for field, value in (("svname", name), ("status", s["status"]), ("scur", s["scur"])):
                    row[names.index(field)] = str(value)
                row[names.index("check_status")] = "L7OK" if s["status"].startswith("UP") else "L4CON"
                rows.append(",".join(row))
            return "\n".join([header, *rows]) + "\n\n"
        if line == "show servers state ds4_sparks":
            lines = STATE.splitlines()
            names = lines[1][2:].split()
            template = lines[2].split()
            rows = []
            for name, s in self.servers.items():
                row = list(template)
                row[names.index("srv_name")] = name
                row[names.index("srv_admin_state")] = str(s["admin"])
                rows.append(" ".join(row))
            return "\n".join([lines[0], lines[1], *rows]) + "\n\n"
        if words[:2] == ["show", "stat"]:
            return "No such proxy.\n\n"
        if words[:3] == ["show", "servers", "state"]:
            return "Can't find backend.\n\n"
        if words[:2] == ["set", "server"] and len(words) == 5 and words[3] == "state":
            name = words[2].split("/", 1)[1]
            if name not in self.servers:
                return "No such server.\n\n"
            bits = {"ready": 0, "drain": 0x08, "maint": 0x01}.get(words[4])
            if bits is None:
                return "'set server <srv> state' expects 'ready', 'drain' and 'maint'.\n\n"
            self.servers[name]["admin"] = bits
            return "\n"
        return "Unknown command.\n\n"

    def close(self):
        self.sock.close()


@pytest.fixture
def haproxy(tmp_path):
    fake = FakeHAProxy(tmp_path / "admin.sock")
    yield fake
    fake.close()


class Clock:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


# --- parsing the real answers ---


def test_the_captured_show_stat_parses_into_both_servers():
    rows = parse_stat(STAT)
    assert [(r["pxname"], r["svname"], r["status"], r["check_status"]) for r in rows] == [
        ("ds4_sparks", "spark01", "DOWN", "L4CON"),
        ("ds4_sparks", "spark02", "DOWN", "L4CON"),
    ]
    assert rows[0]["addr"] == "10.89.0.4:8000" and rows[0]["scur"] == "0"


def test_the_captured_servers_state_parses_after_its_version_line():
    rows = parse_servers_state(STATE)
    assert [(r["srv_name"], r["srv_admin_state"], r["srv_port"]) for r in rows] == [
        ("spark01", "0", "8000"),
        ("spark02", "0", "8000"),
    ]


@pytest.mark.parametrize(
    ("bits", "state"),
    [
        (0, "ready"),
        (0x01, "maint"),
        (0x08, "drain"),
        (0x09, "maint"),
        (0x10, "drain"),
        (0x04, "maint"),
        (0x20, "maint"),
    ],
)
def test_the_admin_state_is_read_from_its_bits(bits, state):
    assert admin_state(bits) == state


def test_an_error_answer_is_not_taken_for_a_table():
    with pytest.raises(RuntimeApiError, match="No such proxy"):
        parse_stat("No such proxy.\n\n")
    with pytest.raises(RuntimeApiError, match="Can't find backend"):
        parse_servers_state("Can't find backend.\n\n")


# --- talking to the socket ---


def test_servers_reads_status_sessions_admin_and_check(haproxy):
    haproxy.servers["spark02"].update(status="DRAIN", scur=3, admin=0x08)
    found = servers(haproxy.path, "ds4_sparks")
    assert [(s["name"], s["status"], s["admin"], s["up"], s["sessions"]) for s in found] == [
        ("spark01", "UP", "ready", True, 0),
        ("spark02", "DRAIN", "drain", False, 3),
    ]
    assert found[0]["check"] == "L7OK" and found[0]["address"] == "10.89.0.4:8000"


def test_a_server_up_by_its_checks_but_in_maintenance_is_not_up(haproxy):
    haproxy.servers["spark01"].update(status="MAINT", admin=0x01)
    haproxy.servers["spark02"].update(status="UP 1/2")
    found = {s["name"]: s for s in servers(haproxy.path, "ds4_sparks")}
    assert (found["spark01"]["up"], found["spark01"]["admin"]) == (False, "maint")
    # One failed check does not take a server out yet.
    assert found["spark02"]["up"] is True


def test_an_unknown_backend_or_server_is_an_error_that_says_so(haproxy):
    with pytest.raises(RuntimeApiError, match="No such proxy"):
        servers(haproxy.path, "nosuch")
    with pytest.raises(RuntimeApiError, match="No such server"):
        set_state(haproxy.path, "ds4_sparks", "spark09", "drain")


def test_a_missing_socket_is_an_error_naming_it(tmp_path):
    with pytest.raises(RuntimeApiError, match=r"admin\.sock could not be asked"):
        servers(str(tmp_path / "admin.sock"), "ds4_sparks")


@pytest.mark.parametrize("name", ["spark01 state maint", "a/b", "x;y", "", "a#b"])
def test_names_that_would_change_the_command_are_refused_before_sending(haproxy, name):
    with pytest.raises(RuntimeApiError):
        set_state(haproxy.path, "ds4_sparks", name, "drain")
    assert haproxy.commands == []


def test_only_ready_drain_and_maint_are_states():
    with pytest.raises(RuntimeApiError, match="not 'down'"):
        set_state("/nonexistent", "ds4_sparks", "spark01", "down")


# --- taking a server out and putting it back ---


def test_take_out_drains_waits_for_the_sessions_then_sets_maintenance(haproxy):
    clock = Clock()
    haproxy.servers["spark01"]["scur"] = 2

    def sessions_end(fake):
        # The sessions end two seconds after the drain began.
        if fake.servers["spark01"]["admin"] == 0x08 and clock.now >= 2:
            fake.servers["spark01"]["scur"] = 0

    haproxy.on_read = sessions_end
    report = take_out(haproxy.path, "ds4_sparks", "spark01", 30, 0.5, clock=clock, sleep=clock.sleep)
    assert report["sessions_ended"] and report["changed"] and report["sessions_at_start"] == 2
    assert report["waited_s"] == 2.0
    assert report["after"]["admin"] == "maint"
    sets = [c for c in haproxy.commands if c.startswith("set ")]
    assert sets == ["set server ds4_sparks/spark01 state drain", "set server ds4_sparks/spark01 state maint"]


def test_take_out_goes_to_maintenance_at_its_limit_without_cutting_the_sessions(haproxy):
    clock = Clock()
    haproxy.servers["spark01"]["scur"] = 1
    report = take_out(haproxy.path, "ds4_sparks", "spark01", 5, 1, clock=clock, sleep=clock.sleep)
    assert not report["sessions_ended"] and report["waited_s"] == 5.0
    assert report["after"]["admin"] == "maint" and report["after"]["sessions"] == 1


def test_take_out_of_a_server_in_maintenance_changes_nothing(haproxy):
    haproxy.servers["spark01"].update(status="MAINT", admin=0x01)
    report = take_out(haproxy.path, "ds4_sparks", "spark01", 5, 1)
    assert not report["changed"]
    assert not [c for c in haproxy.commands if c.startswith("set ")]


def test_put_back_sets_ready_and_waits_until_the_check_says_up(haproxy):
    clock = Clock()
    haproxy.servers["spark01"].update(status="MAINT", admin=0x01)

    def check_passes(fake):
        s = fake.servers["spark01"]
        if s["admin"] == 0:
            s["status"] = "UP" if clock.now >= 1.5 else "DOWN"

    haproxy.on_read = check_passes
    report = put_back(haproxy.path, "ds4_sparks", "spark01", 30, 0.5, clock=clock, sleep=clock.sleep)
    assert report["up"] and report["changed"] and report["waited_s"] == 1.5


def test_put_back_reports_a_server_that_never_comes_up(haproxy):
    clock = Clock()
    haproxy.servers["spark01"].update(status="DOWN", admin=0x01)
    report = put_back(haproxy.path, "ds4_sparks", "spark01", 3, 1, clock=clock, sleep=clock.sleep)
    assert not report["up"] and report["after"]["admin"] == "ready" and report["waited_s"] == 3.0


def test_wait_for_reads_once_with_no_time_to_wait():
    reads = []
    reading, done, waited = wait_for(lambda: reads.append(1) or len(reads), lambda n: n > 5, 0, 1)
    assert (reading, done, waited, len(reads)) == (1, False, 0, 1)


# --- the status report ---


def test_the_report_lists_each_gateway_and_says_why_one_could_not_be_read(haproxy):
    records = {
        "gw01": gateway_record({"changed": False, "servers": servers(haproxy.path, "ds4_sparks")}),
        "gw02": gateway_record(
            {"failed": True, "msg": "HAProxy's runtime API at /run/haproxy/admin.sock ..."}
        ),
        "gw03": gateway_record(None),
    }
    assert records["gw02"] == {
        "servers": None,
        "error": "HAProxy's runtime API at /run/haproxy/admin.sock ...",
    }
    assert records["gw03"]["error"] == "not read"
    table = render_gateway_table(records)
    assert table[0] == "gateway gw01: 2 of 2 Spark(s) up"
    assert table[1].split() == ["spark", "state", "admin", "sessions", "check"]
    assert table[2].split() == ["spark01", "UP", "ready", "0", "L7OK"]
    assert table[4:] == [
        "",
        "gateway gw02: could not be read: HAProxy's runtime API at /run/haproxy/admin.sock ...",
        "",
        "gateway gw03: could not be read: not read",
    ]


# --- the module ---


def test_the_module_reads_without_changing(haproxy):
    code, result = run_module(ds4_gateway_server, {"socket": haproxy.path})
    assert code == 0 and not result["changed"]
    assert [s["name"] for s in result["servers"]] == ["spark01", "spark02"]
    assert result["message"] == "spark01 UP (ready, 0 session(s)); spark02 UP (ready, 0 session(s))"
    assert not [c for c in haproxy.commands if c.startswith("set ")]


def test_the_module_takes_a_spark_out_and_puts_it_back(haproxy):
    code, result = run_module(
        ds4_gateway_server, {"socket": haproxy.path, "server": "spark01", "state": "maint"}
    )
    assert code == 0 and result["changed"] and result["sessions_ended"]
    assert result["server"]["admin"] == "maint"
    assert result["message"].startswith("spark01 is out of ds4_sparks: 0 session(s) ended within")
    # Again: already out, nothing changes.
    code, result = run_module(
        ds4_gateway_server, {"socket": haproxy.path, "server": "spark01", "state": "maint"}
    )
    assert code == 0 and not result["changed"]
    code, result = run_module(
        ds4_gateway_server, {"socket": haproxy.path, "server": "spark01", "state": "ready"}
    )
    assert code == 0 and result["changed"] and result["up"]


def test_the_module_fails_when_the_spark_does_not_come_up(haproxy):
    haproxy.servers["spark01"].update(status="DOWN", admin=0x01)
    code, result = run_module(
        ds4_gateway_server,
        {"socket": haproxy.path, "server": "spark01", "state": "ready", "timeout": 0.3, "interval": 0.1},
    )
    assert code == 1 and "did not say it is up within 0.3 s: DOWN (L4CON)" in result["msg"]


def test_the_module_in_check_mode_reports_the_change_and_makes_none(haproxy):
    code, result = run_module(
        ds4_gateway_server,
        {"socket": haproxy.path, "server": "spark01", "state": "maint", "_ansible_check_mode": True},
    )
    assert code == 0 and result["changed"]
    assert haproxy.servers["spark01"]["admin"] == 0


def test_the_module_needs_a_server_with_a_state(haproxy):
    code, result = run_module(ds4_gateway_server, {"socket": haproxy.path, "state": "maint"})
    assert code == 1 and "server" in result["msg"]


def test_the_module_fails_clearly_without_the_socket(tmp_path):
    code, result = run_module(ds4_gateway_server, {"socket": str(tmp_path / "none.sock")})
    assert code == 1 and "could not be asked 'show stat ds4_sparks 4 -1'" in result["msg"]


def test_the_client_module_imports_only_the_standard_library():
    source = Path(ds4_haproxy.__file__).read_text()
    imports = {line.split()[1] for line in source.splitlines() if line.startswith(("import ", "from "))}
    assert imports <= {"__future__", "socket", "time", "typing"}
