"""A /proc of a few processes, for the readers of the engine's processes (module_utils/_host/processes.py)
and the host facts that gather them: an installer's ds4-server in a session listening on 8000, the unit's
own ds4-server, a shell; and /proc/meminfo of a real GB10."""

from pathlib import Path

GB10_MEMINFO = Path(__file__).resolve().parent / "fixtures" / "gb10" / "meminfo_head.stdout"
# ss's line for each listener the fake host has: 8000 held by pid 100; 8001 by a process ss cannot show.
SS_LISTENERS = {
    8000: 'LISTEN 0      4096         0.0.0.0:8000       0.0.0.0:*    users:(("ds4-server",pid=100,fd=3))\n',
    8001: "LISTEN 0      4096            [::]:8001          [::]:*\n",
}


def fake_process(proc, pid, comm, cmdline, cgroup):
    folder = proc / str(pid)
    folder.mkdir(parents=True)
    (folder / "comm").write_text(comm + "\n")
    (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline) + b"\0")
    (folder / "cgroup").write_text(cgroup + "\n")


def fake_proc(tmp_path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text(GB10_MEMINFO.read_text())
    fake_process(proc, 100, "ds4-server", ["/home/nvidia/code/ds4/ds4-server", "--cuda", "--port", "8000"],
                 "0::/user.slice/user-1000.slice/session-2.scope")  # fmt: skip
    fake_process(proc, 200, "ds4-server", ["/opt/ds4/current/ds4-server"], "0::/system.slice/ds4.service")
    fake_process(proc, 300, "bash", ["-bash"], "0::/user.slice")
    return proc


def fake_ss(argv):
    """`ss -Hltnp 'sport = :PORT'` on the fake host."""
    port = int(argv[-1].rsplit(":", 1)[1])
    return 0, SS_LISTENERS.get(port, ""), ""
