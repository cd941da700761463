"""The engine's processes on a host (module_utils/_host/processes.py): the servers outside ds4.service, read
from a fake /proc, and the process listening on the engine's port, as `ss` shows it."""

import os
import shutil
import socket
import subprocess

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._host.processes import (
    find_stray_servers,
    parse_ss_listeners,
    port_holder,
    ss_command,
)
from fake_proc import fake_proc, fake_ss


def test_stray_servers_are_those_outside_the_unit(tmp_path):
    assert find_stray_servers(str(fake_proc(tmp_path))) == [
        {
            "pid": 100,
            "cmdline": ["/home/nvidia/code/ds4/ds4-server", "--cuda", "--port", "8000"],
            "cgroup": "0::/user.slice/user-1000.slice/session-2.scope",
        }
    ]


def test_ss_lines_name_each_listeners_first_process():
    text = (
        'LISTEN 0 4096 0.0.0.0:8000 0.0.0.0:* users:(("ds4-server",pid=100,fd=3),("ds4",pid=101,fd=3))\n'
        "LISTEN 0 4096 [::]:8000 [::]:*\n"
        "\n"
    )
    assert parse_ss_listeners(text) == [100, None]
    assert parse_ss_listeners("") == []


def test_port_holder_from_ss(tmp_path):
    proc = str(fake_proc(tmp_path))
    assert port_holder(8000, fake_ss, "/usr/bin/ss", proc) == (
        {
            "number": 8000,
            "in_use": True,
            "pid": 100,
            "comm": "ds4-server",
            "cmdline": ["/home/nvidia/code/ds4/ds4-server", "--cuda", "--port", "8000"],
            "in_service": False,
        },
        [],
    )
    # Listening over IPv6 with an owner this reader cannot see: in use, holder unknown.
    hidden, _ = port_holder(8001, fake_ss, "/usr/bin/ss", proc)
    assert (hidden["in_use"], hidden["pid"]) == (True, None)
    assert port_holder(8002, fake_ss, "/usr/bin/ss", proc)[0]["in_use"] is False


def test_without_ss_whether_the_port_is_used_is_unknown_and_said(tmp_path):
    facts, warnings = port_holder(8000, fake_ss, None, str(fake_proc(tmp_path)))
    assert (facts["in_use"], facts["pid"]) == (None, None)
    assert warnings == ["ss is not installed: whether anything listens on the engine's port is unknown"]
    facts, warnings = port_holder(8000, lambda argv: (1, "", "Cannot open netlink socket\n"), "/usr/bin/ss")
    assert facts["in_use"] is None and warnings == ["ss exited 1: Cannot open netlink socket"]


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_port_holder_on_this_machine():
    def run(argv):
        done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
        return done.returncode, done.stdout, done.stderr

    assert ss_command("/usr/bin/ss", 8000) == ["/usr/bin/ss", "-Hltnp", "sport = :8000"]
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        facts, warnings = port_holder(listener.getsockname()[1], run, shutil.which("ss"))
    assert (facts["in_use"], facts["pid"], warnings) == (True, os.getpid(), [])


def test_the_owners_of_the_engine_s_port_are_read_without_seeing_their_processes():
    from ansible_collections.ds4.fleet.plugins.module_utils._host.processes import (
        listener_uids_command,
        parse_listener_uids,
    )

    assert listener_uids_command("/usr/bin/ss", 8000) == ["/usr/bin/ss", "-Hltne", "sport = :8000"]
    text = (
        "LISTEN 0 4096 127.0.0.1:8000 0.0.0.0:* uid:107 ino:51234 sk:1 cgroup:/system.slice/ds4.service <->\n"
        "LISTEN 0 4096 [::1]:8000 [::]:* ino:51240 sk:2 <->\n"
    )
    assert parse_listener_uids(text) == {107, 0}
    assert parse_listener_uids("") == set()
