"""Whether a ds4-server running outside ds4.service may be taken over, and how it is said.

The servers are module_utils/ds4_processes.py's find_stray_servers (the installer's `nohup ds4-serve &`
and the like). One whose service (systemd unit) has it as its main process would be started again by
that service once stopped, so it is not taken over; one in a session, or in ssh.service or cron.service
where a nohup one lands, may be.
"""

from __future__ import annotations


def service_unit(cgroup):
    """The .service unit a process runs in, from its /proc/PID/cgroup text; None outside any service."""
    for line in cgroup.splitlines():
        unit = line.rsplit("/", 1)[-1]
        if unit.endswith(".service"):
            return unit
    return None


def takeover(servers, main_pid_of):
    """{servers, pids, services, lines} for the stray servers; `main_pid_of(unit)` is the unit's main pid.

    servers: each stray server with its `unit`; pids: theirs; services: the units whose main process is
    one of them; lines: one per server, "PID UNIT ARGS", for the messages."""
    servers = [dict(server, unit=service_unit(server["cgroup"])) for server in servers]
    pids = [server["pid"] for server in servers]
    units = sorted({server["unit"] for server in servers if server["unit"]})
    return {
        "servers": servers,
        "pids": pids,
        "services": [unit for unit in units if main_pid_of(unit) in pids],
        "lines": [f"{s['pid']} {s['unit'] or '-'} {' '.join(s['cmdline'])}" for s in servers],
    }
