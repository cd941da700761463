#!/usr/bin/env python3
"""STAND-IN for a git server that wants a password (a private mirror of the engine, GitHub with a token),
or serves over HTTPS (GitHub itself, a site's mirror signed by the site's own CA).

Test infrastructure of ds4-fleet, importing nothing of the product. Serves the bare repositories under
--root over git's smart HTTP protocol (git http-backend as a CGI program, as real servers run it). With
--user and --password, only to a request that carries `Authorization: Basic base64(USER:PASSWORD)`; any
other gets 401 with a `WWW-Authenticate: Basic` challenge, as a real server answers. With --tls-cert and
--tls-key, over HTTPS.

    git_http_auth.py --root DIR --port 18083 --user builder --password S3cretTok3n
    git_http_auth.py --root DIR --port 18445 --tls-cert server.pem --tls-key server.key

With --port 0 it picks a free port and prints it on its first line (`listening on PORT`).
"""

from __future__ import annotations

import argparse
import base64
import http.server
import os
import ssl
import subprocess
import sys
from urllib.parse import urlsplit

BACKEND = "/usr/lib/git-core/git-http-backend"


def _read_body(handler):
    """The request body: by Content-Length, or chunked (git streams large POSTs)."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                handler.rfile.readline()
                return body
            body += handler.rfile.read(size)
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


class Handler(http.server.BaseHTTPRequestHandler):
    root = ""
    # The Authorization header a request must carry; None: anyone may read.
    expected: str | None = None

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def _serve(self):
        if self.expected is not None and self.headers.get("Authorization") != self.expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="ds4 mirror"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        url = urlsplit(self.path)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": self.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": url.path,
            "QUERY_STRING": url.query,
            "REQUEST_METHOD": self.command,
            "REMOTE_USER": "builder",
            "REMOTE_ADDR": self.client_address[0],
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
            "GIT_PROTOCOL": self.headers.get("Git-Protocol", ""),
            # The repositories are another user's when the server runs as root in a test.
            "GIT_CONFIG_COUNT": "1",
            "GIT_CONFIG_KEY_0": "safe.directory",
            "GIT_CONFIG_VALUE_0": "*",
        }
        body = _read_body(self) if self.command == "POST" else b""
        env["CONTENT_LENGTH"] = str(len(body))
        out = subprocess.run([BACKEND], input=body, env=env, capture_output=True, check=False).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        if not _:
            head, _, payload = out.partition(b"\n\n")
        headers = [line.split(b":", 1) for line in head.splitlines() if b":" in line]
        status = next((int(v.split()[0]) for k, v in headers if k.strip().lower() == b"status"), 200)
        self.send_response(status)
        for key, value in headers:
            if key.strip().lower() != b"status":
                self.send_header(key.strip().decode(), value.strip().decode())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = _serve  # noqa: N815 - the base class's names
    do_POST = _serve  # noqa: N815


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=18083)
    parser.add_argument("--user")
    parser.add_argument("--password")
    parser.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM); needs --tls-key")
    parser.add_argument("--tls-key")
    args = parser.parse_args(argv)
    if (args.user is None) != (args.password is None):
        parser.error("--user and --password go together")
    Handler.root = os.path.abspath(args.root)
    if args.user is not None:
        Handler.expected = "Basic " + base64.b64encode(f"{args.user}:{args.password}".encode()).decode()
    server = http.server.ThreadingHTTPServer((args.bind, args.port), Handler)
    if args.tls_cert:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(args.tls_cert, args.tls_key)
        # The handshake in the request's thread (its first read), never in the accepting loop.
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    print(f"listening on {server.server_address[1]}", flush=True)
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
