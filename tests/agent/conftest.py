"""Shared pieces for the agent's tests: a real HTTP server that plays the portal's report endpoint."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class ReceivedReport:
    path: str
    authorization: str | None
    content_type: str | None
    body: dict[str, Any]


@dataclass
class FakePortal:
    """A real HTTP server on 127.0.0.1 that records what the agent POSTs and answers `status`.

    It is created down (nothing listens on its port) so a test can show the agent coping with a
    portal that is down, then start() it."""

    port: int
    status: int = 201
    received: list[ReceivedReport] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reports(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r.body for r in self.received]


def _handler(portal: FakePortal) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            with portal.lock:
                status = portal.status
                if 200 <= status < 300:
                    portal.received.append(
                        ReceivedReport(
                            path=self.path,
                            authorization=self.headers.get("Authorization"),
                            content_type=self.headers.get("Content-Type"),
                            body=body,
                        )
                    )
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"detail": "test portal"}')

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def portal() -> Iterator[FakePortal]:
    """A running fake portal."""
    server = FakePortal(port=free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def down_portal() -> Iterator[FakePortal]:
    """A fake portal that is not listening yet; call .start() to bring it up."""
    server = FakePortal(port=free_port())
    yield server
    server.stop()
