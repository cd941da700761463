"""A loopback HTTP server for the tests of clients of the engine (drain, smoke test, watchdog)."""

import contextlib
import threading
from http.server import ThreadingHTTPServer


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
