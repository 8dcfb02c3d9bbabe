"""`python -m proxy --fd N` (what `make run` starts): the proxy serves on a listening socket its parent bound
and handed down, so the parent can hold the portal's port from its first moment; connections made before the
proxy is up wait in the socket's backlog and are answered once it is."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class _Portal(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"the portal saw {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_the_proxy_serves_on_the_socket_it_inherits_and_answers_what_waited_in_its_backlog():
    portal = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Portal)
    threading.Thread(target=portal.serve_forever, daemon=True).start()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    early = socket.create_connection(("127.0.0.1", port), timeout=60)  # before the proxy runs: in the backlog
    proxy = subprocess.Popen(
        [sys.executable, "-m", "proxy", "--fd", str(listener.fileno()), "--log-level", "warning",
         "--portal-upstream", f"http://127.0.0.1:{portal.server_address[1]}"],
        cwd=REPO, env=os.environ, pass_fds=(listener.fileno(),),
    )  # fmt: skip
    listener.close()  # the proxy's alone now
    try:
        early.sendall(b"GET /early HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := early.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert answer.endswith(b"the portal saw /early")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard/", timeout=60) as response:
            assert response.read() == b"the portal saw /dashboard/"
    finally:
        early.close()
        proxy.terminate()
        proxy.wait(timeout=30)
        portal.shutdown()
