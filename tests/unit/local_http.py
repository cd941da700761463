"""A loopback HTTP server for the tests of clients of the engine (drain, smoke test, watchdog)."""

import contextlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    """A test's stand-in handler: `answer` sends a whole response; nothing is logged to stderr."""

    def answer(self, status, body, content_type=None):
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def local_http(handler):
    """Serve `handler` (a BaseHTTPRequestHandler class) on a free loopback port: its base URL, until the
    block ends. Each request has a thread of its own, so a held request does not stop the others."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
