"""node_exporter on a Spark (module_utils/_spark/exporter.py): where the managed one listens, a port another
program holds, and a site's own exporter's textfile directory (issue 29: a site's exporter is kept)."""

import os
import socket

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._spark.exporter import (
    EXPORTER_PROGRAMS,
    ExporterError,
    default_route_address,
    host_port,
    listen_addresses,
    listener_uid,
    port_clash,
    textfile_dir_problem,
)


def no_route():
    raise AssertionError("the route is looked up only for an empty setting")


def test_by_default_the_sparks_address_on_its_default_route_alone():
    assert listen_addresses("", 9100, lambda: "10.0.0.5") == ["10.0.0.5:9100"]
    assert listen_addresses("", 9101, lambda: "fd00::5") == ["[fd00::5]:9101"]


def test_without_a_default_route_the_default_is_refused_naming_the_setting():
    with pytest.raises(ExporterError, match="ds4_node_exporter_listen_address is empty.*no default route"):
        listen_addresses("", 9100, lambda: None)


def test_an_address_the_operator_gives_is_the_only_one():
    assert listen_addresses("10.0.0.5", 9100, no_route) == ["10.0.0.5:9100"]
    assert listen_addresses("0.0.0.0", 9100, no_route) == ["0.0.0.0:9100"]
    assert listen_addresses("::", 9100, no_route) == ["[::]:9100"]
    assert host_port("::1", 1) == "[::1]:1"


class Udp:
    """A fake UDP socket: connect() fails for the families without a route, else names SOURCE."""

    def __init__(self, routed, source):
        self.routed, self.source, self.family = routed, source, None

    def __call__(self, family, kind):
        assert kind == socket.SOCK_DGRAM
        self.family = family
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def connect(self, address):
        if self.family not in self.routed:
            raise OSError(101, "Network is unreachable")
        self.asked = address

    def getsockname(self):
        return (self.source[self.family], 0)


def test_the_default_route_address_is_the_kernels_source_for_an_unrouted_address_v4_first():
    both = Udp({socket.AF_INET, socket.AF_INET6}, {socket.AF_INET: "10.0.0.5", socket.AF_INET6: "fd00::5"})
    assert default_route_address(both) == "10.0.0.5"
    v6 = Udp({socket.AF_INET6}, {socket.AF_INET6: "fd00::5"})
    assert default_route_address(v6) == "fd00::5"
    assert default_route_address(Udp(set(), {})) is None


def test_this_hosts_default_route_address_is_one_of_its_own():
    address = default_route_address()
    if address is not None:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as own:
            own.bind((address, 0))


def holder(pid=None, in_use=True, comm=None):
    return {"number": 9100, "in_use": in_use, "pid": pid, "comm": comm, "cmdline": [], "in_service": False}


def test_a_free_port_or_the_distributions_exporter_on_it_is_no_clash():
    assert port_clash(9100, holder(in_use=False), None) is None
    # ss could not say: no refusal on a guess (the module warns).
    assert port_clash(9100, holder(in_use=None), None) is None
    assert port_clash(9100, holder(pid=42, comm="prometheus-node"), EXPORTER_PROGRAMS[0]) is None


def test_a_site_exporter_or_another_program_on_the_port_is_refused_naming_it_and_the_way_out():
    problem = port_clash(9100, holder(pid=42, comm="node_exporter"), "/usr/local/bin/node_exporter")
    assert problem.startswith(
        "ds4_node_exporter_port 9100 is held by pid 42 (/usr/local/bin/node_exporter), not the distribution's"
    )
    assert "ds4_node_exporter_manage: false" in problem and "ds4_node_exporter_textfile_dir" in problem
    unseen = port_clash(9100, holder(), None)
    assert "held by a process this run cannot see" in unseen


def test_a_site_textfile_directory_must_be_there_a_directory_and_no_link(tmp_path):
    site = tmp_path / "textfile"
    assert "does not exist" in textfile_dir_problem(str(site), os.lstat)
    site.write_text("")
    assert textfile_dir_problem(str(site), os.lstat).endswith("is not a directory")
    site.unlink()
    site.mkdir()
    assert textfile_dir_problem(str(site), os.lstat) is None
    link = tmp_path / "link"
    link.symlink_to(site)
    problem = textfile_dir_problem(str(link), os.lstat)
    assert problem == f"ds4_node_exporter_textfile_dir {link} is a link: name the directory it points to"


def test_where_the_sockets_process_is_hidden_the_units_exporter_running_as_its_owner_holds_it():
    # Root without CAP_SYS_PTRACE (a container) sees the socket's owner, not its process.
    line = "LISTEN 0 4096 *:9100 *:* uid:100 ino:629039 sk:1007 cgroup:unreachable:34a v6only:0 <->\n"
    assert listener_uid(line) == 100
    assert listener_uid("LISTEN 0 4096 *:9100 *:* ino:1 sk:2\n") is None
    unit = {"program": EXPORTER_PROGRAMS[0], "uid": 100}
    assert port_clash(9100, holder(), None, 100, unit) is None
    other_user = port_clash(9100, holder(), None, 0, unit)
    assert "held by a process this run cannot see (uid 0)" in other_user
    site_program = port_clash(
        9100, holder(), None, 100, {"program": "/usr/local/bin/node_exporter", "uid": 100}
    )
    assert "held by a process this run cannot see (uid 100)" in site_program
    assert port_clash(9100, holder(), None, 100, None) is not None
