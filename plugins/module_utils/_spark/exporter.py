"""node_exporter on a Spark: where the distribution's listens, whether its port is free for it, and whether
a site's own exporter's textfile directory can take the watchdog's ds4.prom.

With ds4_node_exporter_manage the role installs and configures the distribution's prometheus-node-exporter;
without it, the site's exporter is left alone and only its textfile directory is written into. Every fact
comes in as a value or a callable (the port's holder, the directory's lstat), so that each rule
is tested without a host.
"""

from __future__ import annotations

import os
import re
import socket
import stat
from typing import TYPE_CHECKING

# For the type checker only: the hosts' Pythons need not subscript Callable.
if TYPE_CHECKING:
    from collections.abc import Callable

# The distribution's node_exporter (Debian's and Ubuntu's prometheus-node-exporter): the one program the
# role may find on its port when it manages the exporter.
EXPORTER_PROGRAMS = ("/usr/bin/prometheus-node-exporter",)
# The distribution's unit, whose main process stands for the exporter where the socket's is hidden.
EXPORTER_UNIT = "prometheus-node-exporter.service"
# The socket's owner in `ss -Hltne` (extended): ... uid:100 ino:629039 ...
_SS_UID_RE = re.compile(r"\buid:(\d+)\b")


class ExporterError(Exception):
    """A setting node_exporter cannot listen by, with the message for the operator."""


def host_port(address: str, port: int) -> str:
    """ADDRESS:PORT as node_exporter's --web.listen-address takes it (an IPv6 address in brackets)."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


# Documentation addresses (RFC 5737, RFC 3849): no site routes them, so the kernel's route to them is the
# default route. Nothing is sent to them: a UDP socket's connect() only looks the route up.
_ROUTE_PROBES = ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1"))


def default_route_address(open_socket: Callable[..., socket.socket] = socket.socket) -> str | None:
    """This host's source address on its default route (IPv4 first, then IPv6): the address the site's
    network reaches it at. None without a default route. OPEN_SOCKET is socket.socket."""
    for family, probe in _ROUTE_PROBES:
        try:
            with open_socket(family, socket.SOCK_DGRAM) as udp:
                udp.connect((probe, 9))
                return str(udp.getsockname()[0])
        except OSError:
            continue
    return None


def listen_addresses(setting: str, port: int, route_address: Callable[[], str | None]) -> list[str]:
    """[ADDRESS:PORT]: where node_exporter listens, by ds4_node_exporter_listen_address. An address: that
    one alone (0.0.0.0 or :: for every address, as the distribution's package). Empty: the Spark's address
    on its default route (ROUTE_ADDRESS(), asked only then), where a site's Prometheus reaches it, so that
    its other networks (the link between two Sparks, a public one) do not carry the host's details.
    ExporterError where it has no default route."""
    if setting:
        return [host_port(setting, port)]
    address = route_address()
    if address is None:
        raise ExporterError(
            "ds4_node_exporter_listen_address is empty, which means this Spark's address on its default"
            " route, and it has no default route: set ds4_node_exporter_listen_address to the address the"
            " site's Prometheus scrapes (0.0.0.0 for every address)"
        )
    return [host_port(address, port)]


def ss_uid_command(ss: str, port: int) -> list[str]:
    """Listening TCP sockets on PORT with their owners' uids (extended), no header."""
    return [ss, "-Hltne", f"sport = :{port}"]


def listener_uid(text: str) -> int | None:
    """The owner's uid of the first listener in `ss -Hltne`'s lines; None without one."""
    match = _SS_UID_RE.search(text)
    return int(match.group(1)) if match else None


def port_clash(
    port: int,
    holder: dict,
    program: str | None,
    uid: int | None = None,
    unit_process: dict | None = None,
) -> str | None:
    """Why node_exporter cannot listen on PORT, or None. Only the distribution's exporter may hold it.

    HOLDER is _host.processes.port_holder's facts of its listener and PROGRAM that process's executable.
    Where the kernel hides the socket's process even from root (a container without CAP_SYS_PTRACE), the
    listener is the exporter when the distribution's unit's main process (UNIT_PROCESS: {'program', 'uid'},
    its command line's program) runs it as the socket's owner (UID)."""
    if not holder.get("in_use"):
        return None
    if holder.get("pid") is not None:
        if program in EXPORTER_PROGRAMS:
            return None
        who = f"pid {holder['pid']} ({program or holder.get('comm') or 'unknown program'})"
    else:
        process = unit_process or {}
        if uid is not None and process.get("program") in EXPORTER_PROGRAMS and process.get("uid") == uid:
            return None
        who = "a process this run cannot see" + ("" if uid is None else f" (uid {uid})")
    return (
        f"ds4_node_exporter_port {port} is held by {who}, not the distribution's node_exporter"
        f" ({', '.join(EXPORTER_PROGRAMS)}). If that is the site's own node_exporter, set"
        " ds4_node_exporter_manage: false and ds4_node_exporter_textfile_dir to its textfile directory;"
        " else choose another ds4_node_exporter_port"
    )


def textfile_dir_problem(path: str, lstat: Callable[[str], os.stat_result]) -> str | None:
    """Why the site's exporter's textfile directory PATH cannot take ds4.prom, or None: it must be there (the
    role makes nothing of a site's exporter), a directory, and not a link (the root-run watchdog writes in
    it). LSTAT is os.lstat."""
    try:
        info = lstat(path)
    except FileNotFoundError:
        return (
            f"ds4_node_exporter_textfile_dir {path} does not exist; with ds4_node_exporter_manage false it"
            " must be the textfile directory of the site's node_exporter (--collector.textfile.directory)"
        )
    except OSError as exc:
        return f"ds4_node_exporter_textfile_dir {path} cannot be read: {exc.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return f"ds4_node_exporter_textfile_dir {path} is a link: name the directory it points to"
    if not stat.S_ISDIR(info.st_mode):
        return f"ds4_node_exporter_textfile_dir {path} is not a directory"
    return None
