"""The host-side update check (roles/ds4_service/files/ds4-update-check), run as the timer runs it.

The script and version.py are copied into one directory, as the role installs them in
/usr/local/lib/ds4/, and run as a subprocess against a feed served on 127.0.0.1 or read from file://.
"""

import contextlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
SCRIPT = ROOT / "roles/ds4_service/files/ds4-update-check"
VERSION_MODULE = ROOT / "plugins/module_utils/_spark/version.py"

HTML = b"<!DOCTYPE html>\n<html><body>Sign in to the network</body></html>\n"
ROUTES = {
    "/newer": (200, "text/plain; charset=utf-8", b"v0.6.5\n"),
    "/four-part": (200, "text/plain; charset=utf-8", b"v0.5.6.1\n"),
    "/extra-lines": (200, "text/plain", b"\xef\xbb\xbfv0.6.5\r\nreleased 2026-08-27\r\n"),
    "/malformed": (200, "text/plain", b"latest\n"),
    "/three-numbers-only": (200, "text/plain", b"404\n"),
    "/empty": (200, "text/plain", b""),
    "/binary": (200, "application/octet-stream", b"\xff\xfe\x00v"),
    "/html": (200, "text/html; charset=utf-8", HTML),
    "/html-as-text": (200, "text/plain", HTML),
    "/huge": (200, "text/plain", b"v0.6.5\n" + b"x" * 5000),
    "/missing": (404, "text/plain", b"404: Not Found"),
    "/broken": (500, "text/plain", b"v0.6.5\n"),
}


class FeedHandler(BaseHTTPRequestHandler):
    release = threading.Event()

    def do_GET(self):  # noqa: N802 - the name http.server calls
        if self.path == "/hang":
            # Headers never come: the socket timeout has to fire.
            self.release.wait(5)
            return
        if self.path == "/drip":
            # Headers at once, then a byte at a time: only the overall deadline stops it.
            self.send_response(200)
            self.send_header("Content-Length", "4000")
            self.end_headers()
            for _ in range(40):
                if self.release.wait(0.2):
                    return
                self.wfile.write(b"v")
                self.wfile.flush()
            return
        status, content_type, body = ROUTES[self.path]
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle(self):
        # The check gives up on a slow feed and closes the connection, as it should.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().handle()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def feed():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FeedHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    FeedHandler.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def host(tmp_path):
    """A host layout: the installed script beside version.py, a build record, state and fact dirs."""
    lib = tmp_path / "usr/local/lib/ds4"
    lib.mkdir(parents=True)
    shutil.copy2(SCRIPT, lib / "ds4-update-check")
    shutil.copy2(VERSION_MODULE, lib / "version.py")
    for directory in ("opt/ds4/current", "var/lib/ds4", "etc/ansible/facts.d"):
        (tmp_path / directory).mkdir(parents=True)
    return tmp_path


def set_running(host, release):
    build = host / "opt/ds4/current/.ds4-build.json"
    build.write_text(json.dumps({"release": release, "commit": "d92d93ad"}), encoding="utf-8")


def run(host, *args, url=None, env=None, running_file=True, interpreter=sys.executable):
    """Run the installed script; returns (exit code, stdout lines, state dict or None)."""
    state = host / "var/lib/ds4/update-check.json"
    command = [str(host / "usr/local/lib/ds4/ds4-update-check")]
    if interpreter:
        command.insert(0, interpreter)
    if url is not None:
        command += ["--url", url]
    if running_file:
        command += ["--running-file", str(host / "opt/ds4/current/.ds4-build.json")]
    command += ["--state", str(state), "--fact", str(host / "etc/ansible/facts.d/ds4_update.fact")]
    # No proxy variables: the feed is on 127.0.0.1. Run from elsewhere, so nothing of the repository
    # can stand in for the installed version.py.
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})}
    proc = subprocess.run(
        command + list(args), env=clean, cwd=host, capture_output=True, text=True, timeout=30
    )
    assert proc.stderr == ""
    data = json.loads(state.read_text(encoding="utf-8")) if state.exists() else None
    return proc.returncode, proc.stdout.splitlines(), data


def fact(host):
    return json.loads((host / "etc/ansible/facts.d/ds4_update.fact").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("path", "running", "line", "available"),
    [
        ("/newer", "v0.6.3", "update available: v0.6.5 (running v0.6.3)", True),
        ("/newer", "v0.6.5", "up to date: v0.6.5 (running v0.6.5)", False),
        ("/newer", "v0.6.5.1", "up to date: v0.6.5 (running v0.6.5.1)", False),
        ("/newer", "v0.10.0", "up to date: v0.6.5 (running v0.10.0)", False),
        ("/four-part", "v0.5.6", "update available: v0.5.6.1 (running v0.5.6)", True),
        ("/four-part", "v0.5.6.1", "up to date: v0.5.6.1 (running v0.5.6.1)", False),
        ("/extra-lines", "v0.6.3.1", "update available: v0.6.5 (running v0.6.3.1)", True),
    ],
)
def test_feed_read(host, feed, path, running, line, available):
    set_running(host, running)
    code, out, state = run(host, url=feed + path)
    assert (code, out) == (0, [line])
    latest = line.split(": ")[1].split(" ")[0]
    assert state == {
        "checked_at": state["checked_at"],
        "feed_url": feed + path,
        "running": running,
        "latest": latest,
        "update_available": available,
        "status": "ok",
        "error": None,
        "last_ok": {"checked_at": state["checked_at"], "latest": latest},
        "available_since": state["checked_at"] if available else None,
    }
    assert time.strptime(state["checked_at"], "%Y-%m-%dT%H:%M:%SZ")
    assert fact(host) == state
    for name in ("var/lib/ds4/update-check.json", "etc/ansible/facts.d/ds4_update.fact"):
        assert stat.S_IMODE((host / name).stat().st_mode) == 0o644
    # Nothing but the two files is left behind by the atomic writes.
    assert sorted(p.name for p in (host / "var/lib/ds4").iterdir()) == ["update-check.json"]


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("/malformed", "feed's first line is not a release tag"),
        ("/three-numbers-only", "feed's first line is not a release tag"),
        ("/empty", "feed is empty"),
        ("/binary", "feed is not UTF-8 text"),
        ("/html", "feed answered HTML, not a release tag: '<!DOCTYPE html>'"),
        ("/html-as-text", "feed answered HTML, not a release tag: '<!DOCTYPE html>'"),
        ("/huge", "feed is larger than 4096 bytes, not a one-line release file"),
        ("/missing", "feed answered HTTP 404 Not Found"),
        ("/broken", "feed answered HTTP 500 Internal Server Error"),
    ],
)
def test_bad_feed_is_never_an_update(host, feed, path, error):
    set_running(host, "v0.6.3")
    code, out, state = run(host, url=feed + path)
    assert code == 0
    assert len(out) == 1 and out[0].startswith("update check failed: " + error)
    assert state["status"] == "error"
    assert state["error"].startswith(error)
    assert state["update_available"] is False
    assert state["latest"] is None
    assert state["running"] == "v0.6.3"
    assert fact(host) == state


def test_malformed_feed_names_the_line(host, feed):
    set_running(host, "v0.6.3")
    _, out, state = run(host, url=feed + "/malformed")
    assert out == [f"update check failed: {state['error']}"]
    assert state["error"].endswith(": 'latest'")


def test_unreachable_feed(host):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    set_running(host, "v0.6.3")
    code, out, state = run(host, url=f"http://127.0.0.1:{port}/LATEST")
    assert code == 0
    assert out == ["update check failed: cannot reach feed: [Errno 111] Connection refused"]
    assert (state["status"], state["update_available"], state["latest"]) == ("error", False, None)


@pytest.fixture
def raw_server():
    """A TCP server that answers every connection with fixed bytes and closes: not (quite) HTTP."""
    answers = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()

    def serve():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(4096)
                conn.sendall(answers[0])

    threading.Thread(target=serve, daemon=True).start()
    yield answers, f"http://127.0.0.1:{sock.getsockname()[1]}/LATEST"
    sock.close()


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"SSH-2.0-OpenSSH_9.2\r\n", "feed did not answer proper HTTP: BadStatusLine"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nv0.6.5", "feed was cut short after 6 of 8 bytes"),
        (b"", "feed did not answer proper HTTP: RemoteDisconnected"),
    ],
)
def test_feed_that_is_not_http(host, raw_server, answer, error):
    answers, url = raw_server
    answers.append(answer)
    set_running(host, "v0.6.3")
    code, out, state = run(host, url=url)
    assert code == 0
    assert out[0].startswith("update check failed: " + error)
    assert (state["status"], state["update_available"], state["latest"]) == ("error", False, None)


def test_malformed_url(host):
    set_running(host, "v0.6.3")
    code, out, state = run(host, url="http://[::1/LATEST")
    assert code == 0
    assert out == ["update check failed: feed URL is malformed: http://[::1/LATEST: Invalid IPv6 URL"]
    assert state["status"] == "error"


@pytest.mark.parametrize("path", ["/hang", "/drip"])
def test_slow_feed_times_out(host, feed, path):
    set_running(host, "v0.6.3")
    code, out, state = run(host, "--timeout", "0.5", url=feed + path)
    assert code == 0
    # No other end is possible: /hang closes without an answer and /drip stops short of its length, each
    # only after the 0.5 s have passed many times over (a message of their own).
    assert out == ["update check failed: feed took longer than 0.5 s"]
    assert (state["status"], state["update_available"]) == ("error", False)


@pytest.mark.parametrize(
    ("content", "running", "line", "available"),
    [
        ("v0.6.5\n", "v0.6.3", "update available: v0.6.5 (running v0.6.3)", True),
        ("v0.6.5", "v0.6.5", "up to date: v0.6.5 (running v0.6.5)", False),
        ("v0.6.3\n", "v0.6.5", "up to date: v0.6.3 (running v0.6.5)", False),
        ("v0.5.6.2\n", "v0.5.6.1", "update available: v0.5.6.2 (running v0.5.6.1)", True),
    ],
)
def test_file_feed(host, content, running, line, available):
    latest = host / "LATEST"
    latest.write_text(content, encoding="utf-8")
    set_running(host, running)
    code, out, state = run(host, url=latest.as_uri())
    assert (code, out, state["update_available"], state["status"]) == (0, [line], available, "ok")


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (None, "cannot reach feed: [Errno 2] No such file or directory"),
        ("v0.6.5\n" + "#" * 5000, "feed is larger than 4096 bytes"),
        ("<html>\n", "feed answered HTML, not a release tag: '<html>'"),
        ("v0.6\n", "feed's first line is not a release tag"),
    ],
)
def test_bad_file_feed(host, content, error):
    latest = host / "LATEST"
    if content is not None:
        latest.write_text(content, encoding="utf-8")
    set_running(host, "v0.6.3")
    code, out, state = run(host, url=latest.as_uri())
    assert code == 0
    assert out[0].startswith("update check failed: " + error)
    assert (state["status"], state["update_available"], state["latest"]) == ("error", False, None)


def test_unsupported_scheme(host):
    set_running(host, "v0.6.3")
    code, out, state = run(host, url="ftp://example.invalid/LATEST")
    assert code == 0
    assert out == ["update check failed: feed URL must be http, https or file: ftp://example.invalid/LATEST"]
    assert state["status"] == "error"


def test_last_good_result_survives_a_failed_check(host, feed):
    set_running(host, "v0.6.3")
    _, _, first = run(host, url=feed + "/newer")
    _, _, second = run(host, url=feed + "/missing")
    assert second["latest"] is None
    assert second["update_available"] is False
    assert second["last_ok"] == {"checked_at": first["checked_at"], "latest": "v0.6.5"}
    _, _, third = run(host, url=feed + "/four-part")
    assert third["last_ok"] == {"checked_at": third["checked_at"], "latest": "v0.5.6.1"}


def test_an_update_is_known_since_it_was_first_seen_even_over_failed_checks(host, feed):
    set_running(host, "v0.6.3")
    state = host / "var/lib/ds4/update-check.json"
    _, _, first = run(host, url=feed + "/newer")
    assert first["available_since"] == first["checked_at"]
    # As if the first check had run days ago: later ones keep that time, a failed one too.
    first["available_since"] = "2026-09-01T03:00:00Z"
    state.write_text(json.dumps(first), encoding="utf-8")
    _, _, failed = run(host, url=feed + "/missing")
    _, _, again = run(host, url=feed + "/newer")
    assert failed["available_since"] == again["available_since"] == "2026-09-01T03:00:00Z"
    # Up to date: no longer lagging.
    set_running(host, "v0.6.5")
    _, _, current = run(host, url=feed + "/newer")
    assert current["update_available"] is False and current["available_since"] is None


def test_corrupt_previous_state_is_ignored(host, feed):
    set_running(host, "v0.6.3")
    (host / "var/lib/ds4/update-check.json").write_text("{not json", encoding="utf-8")
    code, _, state = run(host, url=feed + "/missing")
    assert code == 0
    assert state["last_ok"] is None


def test_running_given_on_the_command_line(host, feed):
    code, out, state = run(host, "--running", "v0.5.6", url=feed + "/four-part", running_file=False)
    assert (code, out) == (0, ["update available: v0.5.6.1 (running v0.5.6)"])
    assert state["running"] == "v0.5.6"


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (None, "cannot read the running release from "),
        ("{}", "running release from "),
        ('{"release": "main"}', "running release from "),
        ("[1]", "running release from "),
        ("nonsense", "cannot read the running release from "),
    ],
)
def test_unknown_running_release_is_a_host_fault(host, feed, build, error):
    if build is not None:
        (host / "opt/ds4/current/.ds4-build.json").write_text(build, encoding="utf-8")
    code, out, state = run(host, url=feed + "/newer")
    assert code == 1
    assert out[0].startswith("update check failed: " + error)
    assert (state["status"], state["update_available"], state["running"]) == ("error", False, None)


def test_unwritable_state_is_a_host_fault(host, feed):
    set_running(host, "v0.6.3")
    shutil.rmtree(host / "var/lib/ds4")
    code, out, state = run(host, url=feed + "/newer")
    assert code == 1
    assert out[0] == "update available: v0.6.5 (running v0.6.3)"
    assert out[1].startswith(f"update check failed: cannot write {host}/var/lib/ds4/update-check.json: ")
    assert state is None
    assert fact(host)["update_available"] is True


def test_url_from_environment(host):
    latest = host / "LATEST"
    latest.write_text("v0.6.5\n", encoding="utf-8")
    set_running(host, "v0.6.3")
    code, out, state = run(host, env={"DS4_UPDATE_URL": latest.as_uri()})
    assert (code, out[0], state["feed_url"]) == (
        0,
        "update available: v0.6.5 (running v0.6.3)",
        latest.as_uri(),
    )


def test_failures_reach_the_journal_as_warnings(host, feed):
    set_running(host, "v0.6.3")
    _, out, _ = run(host, url=feed + "/missing", env={"JOURNAL_STREAM": "8:1234"})
    assert out == ["<4>update check failed: feed answered HTTP 404 Not Found"]
    _, out, _ = run(host, url=feed + "/newer", env={"JOURNAL_STREAM": "8:1234"})
    assert out == ["update available: v0.6.5 (running v0.6.3)"]


@pytest.mark.parametrize("timeout", ["0", "-1", "nan"])
def test_bad_timeout_is_a_usage_error(host, timeout):
    proc = subprocess.run(
        [sys.executable, str(host / "usr/local/lib/ds4/ds4-update-check"), "--timeout", timeout],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "--timeout must be more than 0 seconds" in proc.stderr


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="hosts run it with /usr/bin/python3")
def test_runs_as_installed_through_its_shebang_and_a_link(host, feed):
    # The role installs it executable; a link in /usr/local/bin must still find version.py.
    installed = host / "usr/local/lib/ds4/ds4-update-check"
    assert os.access(installed, os.X_OK)
    link = host / "ds4-update-check"
    link.symlink_to(installed)
    set_running(host, "v0.6.3")
    proc = subprocess.run(
        [str(link), "--url", feed + "/newer", "--running-file", str(host / "opt/ds4/current/.ds4-build.json")]
        + ["--state", str(host / "var/lib/ds4/update-check.json")]
        + ["--fact", str(host / "etc/ansible/facts.d/ds4_update.fact")],
        env={"PATH": "/usr/bin:/bin"},
        cwd=host,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0,
        "update available: v0.6.5 (running v0.6.3)\n",
        "",
    )
