"""Real receivers for what the portal sends out: an SMTP server (aiosmtpd) and an HTTP webhook receiver.

Both run in a thread of the test process and record what they accepted, so a test asserts on what a
person's mailbox or a chat channel would really have received. Either can be told to hold the next
delivery until the test lets it go (to kill the sender mid-send).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import quote

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Hold:
    """A gate a receiver waits at before accepting the next delivery (for kill-mid-send tests)."""

    def __init__(self) -> None:
        self.armed = False
        self.match = ""
        self.reached = threading.Event()
        self.release = threading.Event()

    def arm(self, match: str = "") -> None:
        """Hold the next delivery whose recipient (address, or path) contains `match`."""
        self.reached.clear()
        self.release.clear()
        self.match = match
        self.armed = True

    def wait_if_armed(self, recipient: str) -> bool:
        if not self.armed or self.match not in recipient:
            return False
        self.armed = False
        self.reached.set()
        self.release.wait(60)
        return True


class SmtpSink:
    """An SMTP server on 127.0.0.1 that keeps every message it accepted. With credentials, it demands
    AUTH (PLAIN/LOGIN, allowed without TLS on loopback) and refuses wrong ones."""

    def __init__(self, *, username: str = "", password: str = "") -> None:
        self.messages: list[Message] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.hold = _Hold()
        self.port = free_port()
        self._credentials = (username, password) if username else None
        kwargs: dict[str, Any] = {}
        if self._credentials:
            kwargs = {
                "authenticator": self._authenticate,
                "auth_required": True,
                "auth_require_tls": False,
                "auth_exclude_mechanism": ["LOGIN"],  # PLAIN only: smtplib then reports a refusal at once
            }
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port, **kwargs)

    def _authenticate(self, server, session, envelope, mechanism, auth_data) -> AuthResult:
        if isinstance(auth_data, LoginPassword):
            given = (auth_data.login.decode(), auth_data.password.decode())
            return AuthResult(success=given == self._credentials)
        return AuthResult(success=False)

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options) -> str:
        # The gate sits before the message is accepted: a sender killed here delivered nothing, as with
        # any real mail server (a message counts only once the server has answered the final dot).
        if self.hold.armed:
            await asyncio.get_running_loop().run_in_executor(None, self.hold.wait_if_armed, address)
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope) -> str:
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        self.messages.append(message_from_bytes(envelope.original_content or envelope.content))
        return "250 Message accepted for delivery"

    def start(self) -> SmtpSink:
        self._controller.start()
        return self

    def stop(self) -> None:
        self.hold.release.set()
        self._controller.stop()

    def url(self, scheme: str = "smtp") -> str:
        user = ""
        if self._credentials:
            user = f"{quote(self._credentials[0], safe='')}:{quote(self._credentials[1], safe='')}@"
        return f"{scheme}://{user}127.0.0.1:{self.port}"

    def wait_for(self, count: int, timeout: float = 30) -> list[Message]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.messages)


@dataclass
class Delivery:
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class WebhookReceiver:
    """An HTTP server that answers 200 to every POST and keeps what it got (headers and JSON body).

    `status` makes it answer with another code (a receiver that is down or broken); `delay` makes it
    slow. A receiver that deduplicates uses the Idempotency-Key header, as documented for ours."""

    status: int = 200
    delay: float = 0.0
    deliveries: list[Delivery] = field(default_factory=list)
    hold: _Hold = field(default_factory=_Hold)
    host: str = "127.0.0.1"  # any loopback address (127.0.0.2, ...) to stand for another machine
    bind_port: int = 0

    def __post_init__(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                held = receiver.hold.wait_if_armed(self.path)
                if held:
                    # The sender was killed while we held its request: it never learnt the outcome.
                    receiver.cut_off.append(Delivery(self.path, dict(self.headers), json.loads(raw or b"null")))
                    return
                if receiver.delay:
                    time.sleep(receiver.delay)
                receiver.deliveries.append(Delivery(self.path, dict(self.headers), json.loads(raw or b"null")))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.cut_off: list[Delivery] = []
        self._server = ThreadingHTTPServer((self.host, self.bind_port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.hold.release.set()
        self._server.shutdown()
        self._server.server_close()

    def url(self, path: str = "/hook") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def wait_for(self, count: int, timeout: float = 30) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while len(self.deliveries) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return list(self.deliveries)
