"""The guard's HTTPS server: `python -m admission --port 8443 --cert tls.crt --key tls.key`.

Stateless and Django-free: each request's path names the guard it applies (rules.guard_from_path), so one
server serves every portal installation registered with it. GET /healthz answers "ok".
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from admission.rules import guard_from_path, review_answer

log = logging.getLogger("admission")

MAX_BODY = 3 * 1024 * 1024  # the API server sends objects of at most about 1.5 MiB, twice for an update


class GuardHandler(BaseHTTPRequestHandler):
    server_version = "gpuportal-admission-guard"

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, b"ok", "text/plain")
        else:
            self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:
        guard = guard_from_path(self.path)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if guard is None or not 0 < length <= MAX_BODY:
            self._send(
                400, b"expected an AdmissionReview POSTed to /provisioner/<ns>/<account>/<prefix>/<roles>", "text/plain"
            )
            return
        try:
            review = json.loads(self.rfile.read(length))
            answer = review_answer(review, guard)
        except (ValueError, AttributeError, TypeError):
            self._send(400, b"not an AdmissionReview", "text/plain")
            return
        response = answer["response"]
        if not response["allowed"]:
            request = review.get("request") or {}
            log.warning(
                "refused %s %s %s/%s for %s: %s",
                request.get("operation"), (request.get("resource") or {}).get("resource"),
                request.get("namespace") or "-", request.get("name") or "-", guard.user,
                response["status"]["message"],
            )  # fmt: skip
        self._send(200, json.dumps(answer).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:
        pass  # one line per refusal is logged above; allowed requests are not news


def make_server(host: str, port: int, cert: str, key: str) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), GuardHandler)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m admission", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="0.0.0.0")  # noqa: S104 - the API server must reach it; TLS only
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument(
        "--cert", required=True, help="PEM serving certificate (the CA that signed it is the webhook's caBundle)"
    )
    parser.add_argument("--key", required=True, help="PEM private key")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server = make_server(options.host, options.port, options.cert, options.key)
    except OSError as exc:
        print(f"cannot serve on {options.host}:{options.port}: {exc}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    log.info("admission guard on https://%s:%d", options.host, options.port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
