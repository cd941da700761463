"""Who answers on the engine's port (module_utils/_spark/listener.py): canned /proc/net/tcp and tcp6 of a host
where the engine (pid 200, uid 110) or a stranger (pid 300, nobody) listens, and a real stranger's socket
for the root caller's read through the owner's credentials."""

import os
import socket
import subprocess

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._spark import listener as ds4_listener
from ansible_collections.ds4.fleet.plugins.module_utils._spark.listener import (
    holders,
    holders_as_owner,
    parse_listeners,
    problem,
    prove,
    reached,
    url_address,
)

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
# As a sandbox host printed them: 127.0.0.1:8000 held by nobody (65534), 0.0.0.0:22 by root, and an
# established connection (state 01) that is no listener.
TAIL = " 1 0000000015964c2d 100 0 0 10 0\n"
MID = " 00000000:00000000 00:00000000 00000000 "
TCP = HEADER + (
    "   0: 0100007F:1F40 00000000:0000 0A" + MID + "65534        0 27621" + TAIL
    + "   1: 00000000:0016 00000000:0000 0A" + MID + "    0        0 28419" + TAIL
    + "   2: 0100007F:1F40 0100007F:A2C4 01" + MID + "  110        0 30001" + TAIL
)  # fmt: skip
# [::]:8001 and [::1]:8002, held by uid 110.
TCP6 = HEADER + (
    "   0: 00000000000000000000000000000000:1F41 00000000000000000000000000000000:0000 0A 00000000:00000000 "
    "00:00000000 00000000   110        0 41000 1 0 100 0 0 10 0\n"
    "   1: 00000000000000000000000001000000:1F42 00000000000000000000000000000000:0000 0A 00000000:00000000 "
    "00:00000000 00000000   110        0 41001 1 0 100 0 0 10 0\n"
)


def fake_host(tmp_path, tcp=TCP, tcp6=TCP6):
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(tcp)
    (proc / "net" / "tcp6").write_text(tcp6)
    for pid, comm, fds in ((200, "ds4-server", {"3": "socket:[41000]", "4": "/dev/null"}),
                           (300, "python3", {"0": "/dev/null", "3": "socket:[27621]"})):  # fmt: skip
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(comm + "\n")
        for name, target in fds.items():
            os.symlink(target, proc / str(pid) / "fd" / name)
    return str(proc)


def test_the_listening_sockets_are_read_with_address_port_owner_and_inode():
    both = parse_listeners(TCP + TCP6[len(HEADER) :])
    assert [(str(s["address"]), s["port"], s["uid"], s["inode"]) for s in both] == [
        ("127.0.0.1", 8000, 65534, 27621),
        ("0.0.0.0", 22, 0, 28419),
        ("::", 8001, 110, 41000),
        ("::1", 8002, 110, 41001),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("host", "port", "inode"),
    [
        ("127.0.0.1", 8000, 27621),  # the very address
        ("localhost", 8000, 27621),
        ("127.0.0.1", 22, 28419),  # the IPv4 wildcard takes it
        ("127.0.0.1", 8001, 41000),  # the IPv6 wildcard takes IPv4 too
        ("::1", 8002, 41001),
        ("[::1]", 8001, 41000),
        ("127.0.0.1", 8002, None),  # ::1 takes no IPv4
        ("127.0.0.1", 9999, None),
    ],
)
def test_the_socket_a_connection_reaches_is_the_kernels_pick(host, port, inode):
    found = reached(parse_listeners(TCP) + parse_listeners(TCP6), host, port)
    assert (found and found["inode"]) == inode


def test_the_url_gives_the_address_asked():
    assert url_address("http://127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert url_address("http://[::1]:8001/v1/models") == ("::1", 8001)


def test_the_holders_are_the_processes_whose_descriptors_link_to_the_socket(tmp_path):
    proc = fake_host(tmp_path)
    assert holders(41000, proc) == ([200], 0)
    assert holders(27621, proc) == ([300], 0)
    assert holders(1, proc) == ([], 0)


def test_a_strangers_listener_is_refused_naming_its_pid_and_user(tmp_path, monkeypatch):
    proc = fake_host(tmp_path)
    names = {65534: "nobody (uid 65534)"}
    monkeypatch.setattr(ds4_listener, "user_name", lambda uid: names.get(uid, f"uid {uid}"))
    seen = prove("http://127.0.0.1:8000", 110, 200, proc)
    assert seen == {
        "problem": "127.0.0.1:8000 is held by pid 300 (python3) of user nobody (uid 65534), "
        "not by the engine user uid 110",
        "inode": 27621,
    }


def test_the_engines_own_listener_is_proven_by_its_uid_and_main_process(tmp_path):
    proc = fake_host(tmp_path)
    assert prove("http://127.0.0.1:8001", 110, 200, proc) == {"problem": None, "inode": 41000}
    # By the uid alone (the watchdog), where the descriptors are not read.
    assert prove("http://127.0.0.1:8001", 110, None, proc)["problem"] is None


def test_a_socket_of_the_engine_user_that_the_main_process_does_not_hold_is_refused(tmp_path):
    proc = fake_host(tmp_path)
    # [::1]:8002 is the engine user's, but no process's descriptors link to it.
    assert prove("http://[::1]:8002", 110, 200, proc)["problem"] == (
        "::1:8002 is held by a process of user uid 110, not by the engine (the unit's main process, pid 200)"
    )
    listener = {"uid": 110, "inode": 41001}
    assert problem(listener, "::1", 8002, 110, [], 0, 200, proc) == (
        "::1:8002 is held by a process of user uid 110, not by the engine (the unit's main process, pid 200)"
    )
    assert problem(listener, "::1", 8002, 110, [300], 0, 200, proc) == (
        "::1:8002 is held by pid 300 (python3) of user uid 110, "
        "not by the engine (the unit's main process, pid 200)"
    )
    assert problem(listener, "::1", 8002, 110, [], 1, 200, proc) == (
        "::1:8002: the engine's descriptors (pid 200) could not be read to prove it holds it"
    )
    assert problem(listener, "::1", 8002, 110, [200], 0, 200, proc) is None
    assert problem(listener, "::1", 8002, 110, [300], 0, 0, proc) == (
        "::1:8002 is held by pid 300 (python3) of user uid 110, while ds4.service runs no engine"
    )


def test_nothing_listening_is_said(tmp_path):
    proc = fake_host(tmp_path)
    seen = prove("http://127.0.0.1:9999", 110, 200, proc)
    assert seen == {"problem": "nothing listens on 127.0.0.1:9999", "inode": None}


def test_a_host_without_ipv6_reads_ipv4_alone(tmp_path):
    proc = fake_host(tmp_path)
    os.unlink(os.path.join(proc, "net", "tcp6"))
    assert prove("http://127.0.0.1:8000", 65534, None, proc) == {"problem": None, "inode": 27621}


@pytest.mark.skipif(os.geteuid() != 0, reason="a stranger's socket takes root to make")
def test_root_without_ptrace_names_a_strangers_pid_through_its_credentials():
    # A real listener of nobody's; the child reads its descriptors as nobody (as in a container, where root
    # lacks CAP_SYS_PTRACE and could not read them itself).
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    code = (
        f"import socket,sys; s=socket.socket(); s.bind(('127.0.0.1',{port})); s.listen(); "
        "print(1, flush=True); sys.stdin.read()"
    )
    stranger = subprocess.Popen(
        ["/usr/bin/python3", "-c", code],
        user=65534,
        group=65534,
        extra_groups=[],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert stranger.stdout.readline() == b"1\n"
        listener = ds4_listener.read_listener("127.0.0.1", port)
        assert listener["uid"] == 65534
        assert holders_as_owner(listener["inode"], 65534) == ([stranger.pid], 0)
        seen = prove(f"http://127.0.0.1:{port}", 0, 1, as_owner=True)["problem"]
        assert seen.startswith(f"127.0.0.1:{port} is held by pid {stranger.pid} (python")
        assert "(uid 65534), not by the engine user " in seen
    finally:
        stranger.kill()
        stranger.wait()


def test_the_units_main_process_is_read_from_systemctl():
    calls = []

    def run(argv):
        calls.append(argv)
        return 0, "4242\n", ""

    assert ds4_listener.main_pid("ds4.service", run) == 4242
    # The one reader of a unit's main process (issue 51): a unit named from a process's cgroup may begin
    # with "-", which systemctl must not take for an option.
    assert ds4_listener.main_pid("-x.service", run) == 4242
    assert calls == [
        ["systemctl", "show", "--property=MainPID", "--value", "--", "ds4.service"],
        ["systemctl", "show", "--property=MainPID", "--value", "--", "-x.service"],
    ]
    assert ds4_listener.main_pid("ds4.service", lambda argv: (0, "0\n", "")) == 0
    assert ds4_listener.main_pid("ds4.service", lambda argv: (0, "\n", "")) == 0
    assert ds4_listener.main_pid("ds4.service", lambda argv: (0, "[not set]\n", "")) == 0
    with pytest.raises(OSError, match=r"systemctl show ds4.service failed \(1\): no bus"):
        ds4_listener.main_pid("ds4.service", lambda argv: (1, "", "no bus\n"))


def test_the_prover_of_a_missing_engine_user_says_so():
    prover = ds4_listener.engine_prover("http://127.0.0.1:8000", "no-such-user-ds4", "ds4.service", None)
    assert prover() == {"problem": "the engine user no-such-user-ds4 does not exist", "inode": None}


def test_the_prover_proves_against_the_main_process_at_each_call(monkeypatch):
    seen = []
    monkeypatch.setattr(ds4_listener, "engine_uid", lambda user: 110)
    monkeypatch.setattr(
        ds4_listener, "prove", lambda *a, **k: seen.append((a, k)) or {"problem": None, "inode": 1}
    )
    pids = iter(["100\n", "101\n"])
    prover = ds4_listener.engine_prover(
        "http://127.0.0.1:8000", "ds4", "ds4.service", lambda argv: (0, next(pids), "")
    )
    prover()
    prover()
    assert seen == [
        (("http://127.0.0.1:8000", 110, 100), {"as_owner": True}),
        (("http://127.0.0.1:8000", 110, 101), {"as_owner": True}),
    ]
