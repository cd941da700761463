"""ds4.service's readiness probe (roles/ds4_service/files/ds4-ready): one process, done when the API answers
from a socket the engine holds, failed at once when the engine is gone."""

import http.server
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture
def installed(tmp_path):
    """ds4-ready with listener.py beside it, as the role installs them."""
    shutil.copy2(ROOT / "roles/ds4_service/files/ds4-ready", tmp_path / "ds4-ready")
    shutil.copy2(ROOT / "plugins/module_utils/_spark/listener.py", tmp_path / "listener.py")
    return tmp_path / "ds4-ready"


@pytest.fixture
def api():
    class Models(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the name http.server calls)
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Models)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def probe(installed, url, mainpid):
    return subprocess.Popen(
        [sys.executable, "-B", str(installed), url],
        env=dict(os.environ, MAINPID=str(mainpid)),
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ready_once_the_api_answers(api, installed):
    assert probe(installed, f"{api}/v1/models", os.getpid()).wait(timeout=10) == 0


def test_an_engine_gone_while_loading_fails_at_once(api, installed):
    gone = subprocess.Popen(["true"])
    gone.wait()
    running = probe(installed, f"{api}/nothing-here", gone.pid)
    assert running.wait(timeout=10) == 1
    said = running.stderr.read()
    assert f"ds4-server (pid {gone.pid}) exited before {api}/nothing-here answered" in said


def test_a_listener_the_engine_does_not_hold_never_makes_it_ready_and_is_named(api, installed):
    # The API answers, but from this test's socket: the unit's main process (a sleep) holds none.
    engine = subprocess.Popen(["sleep", "60"])
    running = probe(installed, f"{api}/v1/models", engine.pid)
    with pytest.raises(subprocess.TimeoutExpired):
        running.wait(timeout=2)
    engine.kill()
    engine.wait()
    assert running.wait(timeout=10) == 1
    port = api.rsplit(":", 1)[1]
    said = running.stderr.read()
    assert f"127.0.0.1:{port} is held by pid {os.getpid()} (" in said
    assert f"not by the engine (the unit's main process, pid {engine.pid})" in said


def test_a_stop_while_it_waits_ends_it_and_leaves_no_process_of_its_own(api, installed):
    running = probe(installed, f"{api}/nothing-here", os.getpid())
    # It asks again every second: let it be waiting, not starting.
    with pytest.raises(subprocess.TimeoutExpired):
        running.wait(timeout=2)
    children = subprocess.run(["pgrep", "-P", str(running.pid)], capture_output=True, text=True).stdout
    assert children == ""
    running.send_signal(signal.SIGTERM)
    assert running.wait(timeout=5) == -signal.SIGTERM
