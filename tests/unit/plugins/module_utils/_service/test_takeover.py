"""Which processes are a ds4-server outside ds4.service, and whether they may be taken over."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys

import pytest
from ansible_collections.ds4.fleet.plugins.module_utils._host.processes import find_stray_servers, runs_server
from ansible_collections.ds4.fleet.plugins.module_utils._service.takeover import (
    accepted_programs,
    matches,
    service_unit,
    takeover,
)
from waits import wait_for

ACCEPTED = accepted_programs("/opt/ds4", "/home/nvidia")


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
        ("python3", ["python3", "-c", "import time; time.sleep(9) #/ds4-server"]),
        ("ds4-bench", ["/opt/ds4/current/ds4-bench"]),
    ],
)
def test_other_processes_that_mention_it_are_not_servers(comm, cmdline):
    assert not runs_server(comm, cmdline)


def test_the_service_unit_comes_from_the_cgroup_v1_or_v2():
    assert service_unit("0::/system.slice/ssh.service") == "ssh.service"
    assert service_unit("12:pids:/user.slice\n1:name=systemd:/system.slice/cron.service") == "cron.service"
    assert service_unit("0::/user.slice/user-1000.slice/session-2.scope") is None


def fake_proc(root, pid, exe, cwd="/"):
    """/proc/PID of a process that runs EXE (what the kernel's exe link would name) in CWD."""
    base = root / str(pid)
    base.mkdir(parents=True)
    os.symlink(exe, base / "exe")
    os.symlink(cwd, base / "cwd")


def test_only_a_service_whose_main_process_is_the_server_blocks_the_takeover(tmp_path):
    fake_proc(tmp_path, 100, "/home/nvidia/code/ds4/ds4-server")
    fake_proc(tmp_path, 200, "/opt/ds4/releases/v0.6.5/ds4-server")
    fake_proc(tmp_path, 300, "/usr/bin/dash", cwd="/home/nvidia/.local/bin")
    servers = [
        {"pid": 100, "cmdline": ["ds4-server", "--cuda"], "cgroup": "0::/system.slice/ssh.service"},
        {"pid": 200, "cmdline": ["/opt/ds4/current/ds4-server"], "cgroup": "0::/system.slice/my-ds4.service"},
        {"pid": 300, "cmdline": ["sh", "ds4-serve"], "cgroup": "0::/user.slice/session-2.scope"},
    ]
    main_pids = {"ssh.service": 42, "my-ds4.service": 200}
    found = takeover(servers, main_pids.__getitem__, ACCEPTED, proc_root=str(tmp_path))
    assert found["pids"] == [100, 200, 300] and found["refused"] == []
    assert found["services"] == ["my-ds4.service"]
    assert [s["unit"] for s in found["servers"]] == ["ssh.service", "my-ds4.service", None]
    assert [s["program"] for s in found["servers"]] == [
        "/home/nvidia/code/ds4/ds4-server",
        "/opt/ds4/releases/v0.6.5/ds4-server",
        "/home/nvidia/.local/bin/ds4-serve",
    ]
    user = pwd.getpwuid(os.geteuid()).pw_name
    assert found["lines"] == [
        f"100 ssh.service ds4-server --cuda (runs /home/nvidia/code/ds4/ds4-server as {user})",
        f"200 my-ds4.service /opt/ds4/current/ds4-server "
        f"(runs /opt/ds4/releases/v0.6.5/ds4-server as {user})",
        f"300 - sh ds4-serve (runs /home/nvidia/.local/bin/ds4-serve as {user})",
    ]


def test_a_script_still_in_its_env_shebang_is_judged_by_the_script(tmp_path):
    # `#!/usr/bin/env python3`: for a moment the kernel runs env under the script's name, before env execs
    # python3. Judged in that moment, the server is still the script, not /usr/bin/env.
    fake_proc(tmp_path, 100, "/usr/bin/env")
    fake_proc(tmp_path, 200, "/usr/bin/env")
    servers = [
        {"pid": 100, "cmdline": ["/usr/bin/env", "python3", "/opt/ds4/current/ds4-server"], "cgroup": ""},
        {"pid": 200, "cmdline": ["env", "-i", "A=1", "python3", "-u", "/tmp/ds4-server"], "cgroup": ""},
    ]
    found = takeover(servers, lambda unit: 0, ACCEPTED, proc_root=str(tmp_path))
    assert [s["program"] for s in found["servers"]] == [
        os.path.realpath("/opt/ds4/current/ds4-server"),
        "/tmp/ds4-server",
    ]
    assert found["pids"] == [] and len(found["refused"]) == 2


def test_no_server_outside_the_unit_asks_no_service():
    assert takeover([], lambda unit: pytest.fail(f"asked {unit}"), ACCEPTED) == {
        "servers": [],
        "pids": [],
        "services": [],
        "refused": [],
        "lines": [],
        "ignored": [],
    }


@pytest.mark.parametrize(
    ("path", "accepted"),
    [
        ("/opt/ds4/releases/v0.6.5/ds4-server", True),
        ("/home/nvidia/code/ds4/ds4-server", True),
        ("/opt/ds4/releases/v0.6.5/sub/ds4-server", False),
        ("/opt/ds4/current/ds4-server", False),
        ("/opt/ds4/releases/v0.6.5/ds4-bench", False),
        ("/home/mallory/code/ds4/ds4-server", False),
        ("/tmp/ds4-server", False),
    ],
)
def test_accepted_programs_are_ours_and_the_installers_build_only(path, accepted):
    assert matches(path, ACCEPTED) is accepted


@pytest.fixture
def servers(tmp_path):
    """Start real processes named ds4-server (copies of sleep, or a Python script of that name, run by the
    interpreter or, with script="shebang", by its #! line from a script already there) and stop them all at
    the end. start(path, script=False, cwd=None) -> the stray server found for it."""
    started = []

    def start(path, script=False, cwd=None):
        path.parent.mkdir(parents=True, exist_ok=True)
        if script == "shebang":
            argv = [str(path)]
        elif script:
            path.write_text("#!/usr/bin/env python3\nimport time\ntime.sleep(600)\n")
            path.chmod(0o755)
            argv = [sys.executable, os.path.relpath(path, cwd) if cwd else str(path)]
        else:
            shutil.copy("/bin/sleep", path)
            argv = [str(path), "600"]
        proc = subprocess.Popen(argv, cwd=cwd)
        started.append(proc)

        def found():
            # Once exec'd: the copy of sleep shows its own name, the script its arguments.
            mine = [server for server in find_stray_servers() if server["pid"] == proc.pid]
            return mine and mine[0]

        return wait_for(f"the process {argv} runs as a ds4-server", found, timeout=30)

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def judge(server, root, home):
    return takeover([server], lambda unit: 0, accepted_programs(str(root), str(home)))


def test_a_server_outside_the_accepted_programs_is_refused_and_named(tmp_path, servers):
    root, home = tmp_path / "opt-ds4", tmp_path / "home"
    impostor = servers(tmp_path / "elsewhere" / "ds4-server")
    found = judge(impostor, root, home)
    user = pwd.getpwuid(os.geteuid()).pw_name
    assert found["pids"] == []
    program = str(tmp_path / "elsewhere" / "ds4-server")
    assert found["refused"] == [f"pid {impostor['pid']}: {program} (exe {program}), user {user}"]
    # A release directory's name does not make a copy elsewhere ours: the path decides, not the name.
    link = root / "releases" / "v0.6.5"
    link.parent.mkdir(parents=True)
    os.symlink(tmp_path / "elsewhere", link)
    assert judge(impostor, root, home)["pids"] == []


def test_our_release_and_the_installers_build_are_taken_over(tmp_path, servers):
    root, home = tmp_path / "opt-ds4", tmp_path / "home"
    ours = servers(root / "releases" / "v0.6.5" / "ds4-server")
    installers = servers(home / "code" / "ds4" / "ds4-server")
    for server in (ours, installers):
        found = judge(server, root, home)
        assert (found["pids"], found["refused"]) == ([server["pid"]], [])


def test_a_rebuilt_installer_binary_is_still_the_installers(tmp_path, servers):
    root, home = tmp_path / "opt-ds4", tmp_path / "home"
    path = home / "code" / "ds4" / "ds4-server"
    server = servers(path)
    path.unlink()  # the kernel now names the executable "... (deleted)"
    assert os.readlink(f"/proc/{server['pid']}/exe").endswith(" (deleted)")
    assert judge(server, root, home)["pids"] == [server["pid"]]


def test_a_script_server_is_judged_by_the_script_it_runs(tmp_path, servers):
    root, home = tmp_path / "opt-ds4", tmp_path / "home"
    # The stand-in engine is such a script: python3 runs releases/<tag>/ds4-server (through current).
    release = root / "releases" / "v0.6.5"
    ours = servers(release / "ds4-server", script=True, cwd=release)
    assert judge(ours, root, home)["pids"] == [ours["pid"]]
    # As the installer's nohup starts it: by its shebang, through the current link.
    current = root / "current"
    os.symlink(release, current)
    by_link = servers(current / "ds4-server", script="shebang")
    assert judge(by_link, root, home)["pids"] == [by_link["pid"]]
    other = servers(tmp_path / "elsewhere" / "ds4-server", script=True)
    found = judge(other, root, home)
    assert found["pids"] == [] and found["refused"][0].startswith(
        f"pid {other['pid']}: {tmp_path / 'elsewhere' / 'ds4-server'} (exe {os.path.realpath(sys.executable)}"
    )


def test_another_user_s_server_off_the_engine_s_port_is_reported_not_fatal(tmp_path):
    # Any local user may run a program named ds4-server: only one on the engine's port stops the run.
    fake_proc(tmp_path, 400, "/home/mallory/bin/ds4-server")
    os.chown(tmp_path / "400", 65534, 65534, follow_symlinks=False)
    fake_proc(tmp_path, 500, "/tmp/ds4-server")
    servers = [
        {"pid": 400, "cmdline": ["ds4-server"], "cgroup": "0::/user.slice/session-9.scope"},
        {"pid": 500, "cmdline": ["/tmp/ds4-server"], "cgroup": "0::/user.slice/session-2.scope"},
    ]

    def judge_with(port_uids):
        return takeover(
            servers, lambda unit: 0, ACCEPTED, proc_root=str(tmp_path), port_uids=port_uids, counted_uids={0}
        )

    # The engine's own user (ds4, say 107) listens on the port; nobody does not.
    off_port = judge_with({107})
    user = pwd.getpwuid(65534).pw_name
    assert off_port["ignored"] == [f"400 - ds4-server (runs /home/mallory/bin/ds4-server as {user})"]
    # Root's own is still refused: not another user's.
    assert off_port["refused"] == ["pid 500: /tmp/ds4-server (exe /tmp/ds4-server), user root"]
    assert [s["pid"] for s in off_port["servers"]] == [500]
    on_port = judge_with({107, 65534})
    assert on_port["ignored"] == []
    assert on_port["refused"][0].startswith("pid 400: /home/mallory/bin/ds4-server")
