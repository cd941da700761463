"""ds4.service's readiness probe (roles/ds4_service/files/ds4-ready): one process, done when the API answers,
failed at once when the engine is gone."""

import http.server
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

PROBE = Path(__file__).resolve().parents[4] / "roles" / "ds4_service" / "files" / "ds4-ready"


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


def probe(url, mainpid):
    return subprocess.Popen(
        [sys.executable, str(PROBE), url],
        env=dict(os.environ, MAINPID=str(mainpid)),
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ready_once_the_api_answers(api):
    assert probe(f"{api}/v1/models", os.getpid()).wait(timeout=10) == 0


def test_an_engine_gone_while_loading_fails_at_once(api):
    gone = subprocess.Popen(["true"])
    gone.wait()
    running = probe(f"{api}/nothing-here", gone.pid)
    assert running.wait(timeout=10) == 1
    assert f"ds4-server (pid {gone.pid}) exited before {api}/nothing-here answered" in running.stderr.read()


def test_a_stop_while_it_waits_ends_it_and_leaves_no_process_of_its_own(api):
    running = probe(f"{api}/nothing-here", os.getpid())
    # It asks again every second: let it be waiting, not starting.
    with pytest.raises(subprocess.TimeoutExpired):
        running.wait(timeout=2)
    children = subprocess.run(["pgrep", "-P", str(running.pid)], capture_output=True, text=True).stdout
    assert children == ""
    running.send_signal(signal.SIGTERM)
    assert running.wait(timeout=5) == -signal.SIGTERM
