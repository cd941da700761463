"""Reading a Spark (_service/host_status.py and the module ds4_host_status): a release tree on disk,
systemctl answering as told, a small HTTP server as the engine."""

import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ds4.fleet.plugins.module_utils._service.host_status import read_host
from ansible_collections.ds4.fleet.plugins.modules import ds4_host_status

BASE = "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
GIB = 1024**3


class Stats(BaseHTTPRequestHandler):
    body = {}

    def do_GET(self):
        if self.path == "/v1/stats" and self.headers.get("Accept") == "application/json":
            data = json.dumps(Stats.body).encode()
            self.send_response(200)
        else:
            data = b"unknown endpoint"
            self.send_response(404)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def engine():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Stats)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    Stats.body = {
        "server": {
            "requests_inflight": 1,
            "uptime_seconds": 3725.4,
            "context": 524288,
            "model": f"/var/lib/ds4/gguf/{BASE}",
        }
    }
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def down():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def release(root, tag, commit="c" * 40):
    path = root / "releases" / tag
    path.mkdir(parents=True)
    (path / ".ds4-build.json").write_text(json.dumps({"release": tag, "commit": commit}))
    return path


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "opt-ds4"
    release(root, "v0.6.3", "a" * 40)
    release(root, "v0.6.5", "b" * 40)
    os.symlink("releases/v0.6.5", root / "current")
    os.symlink(str(root / "releases" / "v0.6.3"), root / "previous")
    # Switched a minute ago, before the engine of these tests started.
    os.utime(root / "current", (time.time() - 60, time.time() - 60), follow_symlinks=False)
    return root


def systemctl(active="active", sub="running", load="loaded", started_ago=20.0):
    """A systemctl that answers `show` as a unit in this state would; records the calls."""
    calls = []
    mono = int((time.monotonic() - started_ago) * 1e6) if started_ago is not None else 0

    def run(argv):
        calls.append(argv)
        out = (
            f"LoadState={load}\nActiveState={active}\nSubState={sub}\nUnitFileState=enabled\n"
            f"MainPID={4242 if active == 'active' else 0}\n"
            f"ExecMainStartTimestampMonotonic={mono}\nNRestarts=0\n"
        )
        return 0, out, ""

    run.calls = calls
    return run


# --- reading a Spark ---


def test_a_serving_spark_is_read_from_its_links_unit_engine_and_disk(root, engine, tmp_path):
    run = systemctl()
    status = read_host(str(root), str(tmp_path / "gguf" / "not-yet"), engine, run)
    assert status["current"]["release"] == "v0.6.5" and status["current"]["commit"] == "b" * 40
    assert status["current"]["target"] == str(root / "releases" / "v0.6.5")
    assert status["previous"]["release"] == "v0.6.3"
    assert status["service"]["active_state"] == "active" and status["service"]["main_pid"] == 4242
    assert abs(status["service"]["started_at"] - (time.time() - 20)) < 2
    assert status["engine"] == {
        "url": engine,
        "answering": True,
        "requests_inflight": 1,
        "uptime_seconds": 3725.4,
        "context": 524288,
        "model": f"/var/lib/ds4/gguf/{BASE}",
        "error": None,
    }
    # A weights directory that does not exist yet is measured at its nearest existing folder.
    assert status["disk"]["checked_at"] == str(tmp_path) and status["disk"]["free_bytes"] > 0
    assert not status["current_changed_since_start"]
    assert run.calls[0][:3] == ["systemctl", "show", "ds4.service"]


def test_a_link_switched_after_the_engine_started_is_flagged(root, engine, tmp_path):
    link = root / "current"
    status = read_host(str(root), str(tmp_path), engine, systemctl(started_ago=20))
    assert not status["current_changed_since_start"]
    # Re-pointed now, after the engine started.
    link.unlink()
    os.symlink("releases/v0.6.3", link)
    status = read_host(str(root), str(tmp_path), engine, systemctl(started_ago=20))
    assert status["current_changed_since_start"]


def test_a_spark_without_a_release_or_unit_or_engine_says_so(tmp_path, down):
    status = read_host(
        str(tmp_path / "none"), str(tmp_path), down, systemctl("inactive", "dead", "not-found", None)
    )
    assert status["current"]["release"] is None and status["previous"]["release"] is None
    assert status["service"]["load_state"] == "not-found" and status["service"]["started_at"] is None
    assert status["engine"]["answering"] is False and "could not be reached" in status["engine"]["error"]


def test_a_release_without_its_stamp_is_named_by_its_directory(tmp_path, down):
    (tmp_path / "releases" / "v0.6.5").mkdir(parents=True)
    os.symlink("releases/v0.6.5", tmp_path / "current")
    status = read_host(str(tmp_path), str(tmp_path), down, systemctl())
    assert status["current"]["release"] == "v0.6.5"
    assert "no readable build stamp" in status["current"]["stamp_error"]


def test_a_failing_systemctl_is_reported_not_raised(root, down):
    status = read_host(str(root), str(root), down, lambda argv: (1, "", "Failed to connect to bus"))
    assert status["service"] == {
        "error": "systemctl show ds4.service exited 1: Failed to connect to bus",
        "name": "ds4.service",
    }


def test_the_module_reads_and_changes_nothing(root, engine, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(
        ds4_host_status.AnsibleModule, "get_bin_path", lambda self, name, required=False: "/bin/sc"
    )
    seen = []

    def run_command(self, argv, environ_update=None):
        seen.append((argv, environ_update))
        return systemctl()(argv)

    monkeypatch.setattr(ds4_host_status.AnsibleModule, "run_command", run_command)
    port = int(engine.rsplit(":", 1)[1])
    args = {
        "root": str(root),
        "gguf_dir": str(tmp_path),
        "host": "0.0.0.0",
        "port": port,
        "_ansible_check_mode": True,
    }
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        ds4_host_status.main()
    out = json.loads(capsys.readouterr().out)
    assert exc.value.code == 0 and out["changed"] is False
    assert out["status"]["current"]["release"] == "v0.6.5" and out["status"]["engine"]["url"] == engine
    assert seen[0][0][:3] == ["/bin/sc", "show", "ds4.service"] and seen[0][1] == {"LC_ALL": "C"}


# --- a tensor pair member: the transport its engine was started with (ds4-rdma-launch's state) ---


def test_the_transport_of_the_engines_start_is_read_from_the_launchers_state(root, engine, tmp_path):
    state = tmp_path / "transport.json"
    found = {"device": "rocep1s0f1", "port": 1, "gid_index": 3, "ndev": "enP2p1s0f1np1", "active": True}
    state.write_text(json.dumps({"transport": "rdma", "flags": [], "found": found, "warning": None}))
    status = read_host(str(root), str(tmp_path), engine, systemctl(), transport_state=str(state))
    assert status["transport"] == {
        "transport": "rdma",
        "warning": None,
        "device": "rocep1s0f1",
        "gid_index": 3,
    }
    state.write_text(json.dumps({"transport": "tcp", "found": None, "warning": "no RDMA device serves it"}))
    status = read_host(str(root), str(tmp_path), engine, systemctl(), transport_state=str(state))
    assert status["transport"] == {
        "transport": "tcp", "warning": "no RDMA device serves it", "device": None, "gid_index": None,
    }  # fmt: skip
    state.write_text("{half")
    status = read_host(str(root), str(tmp_path), engine, systemctl(), transport_state=str(state))
    assert status["transport"]["transport"] is None and "cannot be read" in status["transport"]["warning"]
    missing = read_host(str(root), str(tmp_path), engine, systemctl(), transport_state=str(tmp_path / "none"))
    assert missing["transport"] is None
