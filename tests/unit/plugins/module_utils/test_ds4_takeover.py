"""Which processes are a ds4-server outside ds4.service, and whether they may be taken over."""

from __future__ import annotations

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_processes import runs_server
from ansible_collections.ds4.fleet.plugins.module_utils.ds4_takeover import service_unit, takeover


@pytest.mark.parametrize(
    "comm,cmdline",
    [
        ("ds4-server", ["/home/nvidia/code/ds4/ds4-server", "--cuda"]),
        ("ds4-serve", ["/bin/sh", "/home/nvidia/.local/bin/ds4-serve"]),
        ("sh", ["sh", "-e", "/home/nvidia/.local/bin/ds4-serve", "--port", "8000"]),
        ("bash", ["bash", "ds4-serve"]),
        ("python3", ["/usr/bin/python3.11", "/opt/ds4/current/ds4-server", "--cuda"]),
        ("ds4-server", []),
    ],
)
def test_the_server_and_its_launcher_are_found_however_they_run(comm, cmdline):
    assert runs_server(comm, cmdline)


@pytest.mark.parametrize(
    "comm,cmdline",
    [
        ("bash", ["-bash"]),
        ("vim", ["vim", "/opt/ds4/current/ds4-server"]),
        ("sh", ["sh", "-c", "echo ds4-server"]),
        ("python3", ["python3", "/usr/local/lib/ds4/ds4-watchdog"]),
        ("ds4-bench", ["/opt/ds4/current/ds4-bench"]),
    ],
)
def test_other_processes_that_mention_it_are_not_servers(comm, cmdline):
    assert not runs_server(comm, cmdline)


def test_the_service_unit_comes_from_the_cgroup_v1_or_v2():
    assert service_unit("0::/system.slice/ssh.service") == "ssh.service"
    assert service_unit("12:pids:/user.slice\n1:name=systemd:/system.slice/cron.service") == "cron.service"
    assert service_unit("0::/user.slice/user-1000.slice/session-2.scope") is None


def test_only_a_service_whose_main_process_is_the_server_blocks_the_takeover():
    servers = [
        {"pid": 100, "cmdline": ["ds4-server", "--cuda"], "cgroup": "0::/system.slice/ssh.service"},
        {"pid": 200, "cmdline": ["/opt/ds4/current/ds4-server"], "cgroup": "0::/system.slice/my-ds4.service"},
        {"pid": 300, "cmdline": ["sh", "ds4-serve"], "cgroup": "0::/user.slice/session-2.scope"},
    ]
    main_pids = {"ssh.service": 42, "my-ds4.service": 200}
    found = takeover(servers, main_pids.__getitem__)
    assert found["pids"] == [100, 200, 300]
    assert found["services"] == ["my-ds4.service"]
    assert [s["unit"] for s in found["servers"]] == ["ssh.service", "my-ds4.service", None]
    assert found["lines"] == [
        "100 ssh.service ds4-server --cuda",
        "200 my-ds4.service /opt/ds4/current/ds4-server",
        "300 - sh ds4-serve",
    ]


def test_no_server_outside_the_unit_asks_no_service():
    assert takeover([], lambda unit: pytest.fail(f"asked {unit}")) == {
        "servers": [],
        "pids": [],
        "services": [],
        "lines": [],
    }
