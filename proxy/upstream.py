"""Plain HTTP/1.1 to a pod, with as little work per byte as Python allows.

A download is what a researcher feels (a checkpoint, a notebook's output, TensorBoard's event files), and
relaying it costs CPU in the proxy for every byte. A general HTTP client does more than a proxy needs:
it parses the body through its protocol parser (one copy of every byte in user space), queues it in a
stream reader (a Python call and a future per piece), and hands it out in pieces of at most what the
event loop read at once. Here the response head is parsed with httptools (llhttp, already under uvicorn)
and a body of known length, or one that lasts until the pod closes, is passed on as the kernel hands it
over: `socket.recv` fills a fresh bytes object of up to CHUNK bytes (no copy in user space, and immutable,
so the server may keep it queued towards a slow browser), and that object goes straight to the ASGI send.
Chunked bodies go through the parser, which removes the chunk framing.

Connections to a pod are kept alive and reused (HTTP/1.1 keep-alive), at most IDLE_PER_ORIGIN idle ones per
pod address, each for IDLE_SECONDS. One that the pod closed while idle is noticed before use (a peek
says EOF); one it closes just as a request goes out is retried once on a fresh connection when the
request has no body (nothing of it was consumed yet). WebSockets do not come here: aiohttp's client
handles those (app.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import httptools

CHUNK = 1 << 20  # the most one read takes from a pod: fewer, larger pieces, each costing one Python round
HEAD_READ = 64 * 1024
HEAD_LIMIT = 256 * 1024  # a response head larger than this is not an answer a browser could use
IDLE_SECONDS = 15.0
IDLE_PER_ORIGIN = 32
NO_BODY_STATUS = frozenset({204, 304})


class Unreachable(Exception):
    """Nothing usable came back from the pod: refused, reset, closed before answering, or not HTTP."""


class BrowserGone(Exception):
    """The browser went away while its request body was still coming."""


class Connection:
    """One non-blocking socket to a pod. `recv`/`send` try the socket first and wait on the event loop
    only when it has nothing to give (or no room): a download in flight never waits for a poll."""

    __slots__ = ("_loop", "idle_since", "key", "sock")

    def __init__(self, sock: socket.socket, key: tuple[str, int], loop: asyncio.AbstractEventLoop) -> None:
        self.sock = sock
        self.key = key
        self.idle_since = 0.0
        self._loop = loop

    async def recv(self, size: int) -> bytes:
        try:
            return self.sock.recv(size)
        except (BlockingIOError, InterruptedError):
            return await self._loop.sock_recv(self.sock, size)

    def wait_recv(self, size: int) -> Awaitable[bytes]:
        """Wait until the socket has something, then read it (after `recv` found nothing)."""
        return self._loop.sock_recv(self.sock, size)

    async def send(self, data: bytes | bytearray | memoryview) -> None:
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent < len(data):
            await self._loop.sock_sendall(self.sock, memoryview(data)[sent:])

    def usable(self) -> bool:
        """Whether an idle connection can carry another request: the pod has not closed it, sent nothing
        unasked, and it has not sat idle past IDLE_SECONDS (a pod's own keep-alive may be shorter)."""
        if time.monotonic() - self.idle_since > IDLE_SECONDS:
            return False
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        return False  # EOF, or bytes nobody asked for

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class Pool:
    """Idle keep-alive connections per pod address."""

    def __init__(self) -> None:
        self._idle: dict[tuple[str, int], list[Connection]] = {}

    async def connect(self, host: str, port: int, timeout: float) -> tuple[Connection, bool]:
        """A connection to host:port and whether it was reused (then the pod may close it under us)."""
        key = (host, port)
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.usable():
                return conn, True
            conn.close()
        loop = asyncio.get_running_loop()
        try:
            family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
            address: tuple = (host, port)
        except ValueError:  # a name (the portal's own address in development): resolve it
            try:
                infos = await asyncio.wait_for(loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout)
            except (OSError, TimeoutError) as exc:
                raise Unreachable(f"cannot resolve {host}: {exc}") from exc
            family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await asyncio.wait_for(loop.sock_connect(sock, address), timeout)
        except (OSError, TimeoutError) as exc:
            sock.close()
            raise Unreachable(f"cannot connect to {host}:{port}: {exc}") from exc
        except BaseException:
            sock.close()
            raise
        return Connection(sock, key, loop), False

    def release(self, conn: Connection) -> None:
        idle = self._idle.setdefault(conn.key, [])
        if len(idle) >= IDLE_PER_ORIGIN:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()


@dataclass
class _HeadParser:
    """httptools callbacks: the head, then (chunked bodies only) the decoded body pieces."""

    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    pieces: list[bytes] = field(default_factory=list)
    head_done: bool = False
    message_done: bool = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        self.message_done = True


@dataclass
class Response:
    """A pod's answer: status and headers as sent, and how its body is framed."""

    status: int
    headers: list[tuple[bytes, bytes]]
    keep_alive: bool
    length: int | None  # Content-Length; None: chunked or until the pod closes
    chunked: bool
    rest: bytes  # bytes read past the head (the body's start)
    parser: httptools.HttpResponseParser  # the head's; carries on with a chunked body
    state: _HeadParser


def request_head(method: str, target: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1"]
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _head_end(conn: Connection, buffer: bytes) -> tuple[bytes, int]:
    """Read until `buffer` holds a whole head: (buffer, where its blank line starts)."""
    start = 0
    while (end := buffer.find(b"\r\n\r\n", start)) < 0:
        if len(buffer) > HEAD_LIMIT:
            raise Unreachable("response head too large")
        start = max(0, len(buffer) - 3)
        try:
            data = await conn.recv(HEAD_READ)
        except OSError as exc:
            raise Unreachable(f"connection broke: {exc}") from exc
        if not data:
            raise Unreachable("closed before answering")
        buffer += data
    return buffer, end


def _framing(head: list[tuple[bytes, bytes]], close: bool) -> tuple[int | None, bool, bool]:
    """(Content-Length, chunked, close) as the head's headers say (`close`: so far, by HTTP version)."""
    length, chunked = None, False
    for name, value in head:
        lower = name.lower()
        if lower == b"content-length":
            try:
                length = int(value)
            except ValueError as exc:
                raise Unreachable("bad Content-Length") from exc
        elif lower == b"transfer-encoding":
            chunked = value.lower().rsplit(b",", 1)[-1].strip() == b"chunked"
            if not chunked:
                raise Unreachable("a transfer coding other than chunked")
        elif lower == b"connection" and b"close" in [t.strip().lower() for t in value.split(b",")]:
            close = True
    return length, chunked, close


def _body_framing(head: list[tuple[bytes, bytes]], close: bool, *, no_body: bool) -> tuple[int | None, bool, bool]:
    """(length, chunked, close) of the answer's body: none for a HEAD request or a status without one;
    Transfer-Encoding wins over Content-Length (RFC 9112 6.3); with neither, the body ends when the pod
    closes."""
    length, chunked, close = _framing(head, close)
    if no_body:
        return 0, False, close
    if chunked:
        return None, True, close
    return length, False, close or length is None


async def read_head(conn: Connection, method: str) -> Response:
    """The final response head (1xx interim answers are skipped); raises Unreachable when the pod closes
    or sends something that is not HTTP."""
    buffer = b""
    while True:
        buffer, end = await _head_end(conn, buffer)
        state = _HeadParser()
        parser = httptools.HttpResponseParser(state)
        try:
            parser.feed_data(buffer[: end + 4])
        except httptools.HttpParserError as exc:
            raise Unreachable(f"not an HTTP response: {exc}") from exc
        status = parser.get_status_code()
        buffer = buffer[end + 4 :]
        if 100 <= status < 200 and status != 101:
            continue  # 100 Continue and the like: the final answer follows
        if status == 101 or not state.head_done:
            raise Unreachable(f"unexpected answer {status}")
        break
    no_body = method == "HEAD" or status in NO_BODY_STATUS
    length, chunked, close = _body_framing(state.headers, parser.get_http_version() != "1.1", no_body=no_body)
    return Response(status, state.headers, not close, length, chunked, buffer, parser, state)


async def body(conn: Connection, response: Response) -> AsyncIterator[bytes]:
    """The body's pieces as they arrive. Leaves `response.keep_alive` true only if the connection ended
    exactly at the message's end (then it can carry the next request)."""
    rest = response.rest
    if response.chunked:
        parser, state = response.parser, response.state
        data = rest
        while True:
            if data:
                try:
                    parser.feed_data(data)
                except httptools.HttpParserError as exc:
                    response.keep_alive = False
                    raise Unreachable(f"bad chunked body: {exc}") from exc
                for piece in state.pieces:
                    yield piece
                state.pieces.clear()
                if state.message_done:
                    return
            data = await conn.recv(CHUNK)
            if not data:
                response.keep_alive = False
                raise Unreachable("closed in the middle of a chunked body")
    # The two loops below are the hot path of a download: the socket is read directly, and the event
    # loop is asked to wait only when the pod has sent nothing new yet.
    sock, wait = conn.sock, conn.wait_recv
    if response.length is None:  # until the pod closes
        if rest:
            yield rest
        while True:
            try:
                data = sock.recv(CHUNK)
            except (BlockingIOError, InterruptedError):
                data = await wait(CHUNK)
            if not data:
                return
            yield data
    remaining = response.length
    if len(rest) > remaining:  # more than announced: pass on what was announced, never reuse
        response.keep_alive = False
        rest = rest[:remaining]
    if rest:
        remaining -= len(rest)
        yield rest
    while remaining:
        try:
            data = sock.recv(CHUNK if remaining > CHUNK else remaining)
        except (BlockingIOError, InterruptedError):
            data = await wait(CHUNK if remaining > CHUNK else remaining)
        if not data:
            response.keep_alive = False
            raise Unreachable(f"closed with {remaining} bytes of the body still to come")
        remaining -= len(data)
        yield data


async def upload(
    conn: Connection,
    receive: Callable[[], Awaitable[dict]],
    *,
    chunked: bool,
    progress: list[float],
) -> None:
    """The browser's request body to the pod as it comes; `progress[0]` is when the last piece came."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise BrowserGone
        chunk = message.get("body", b"")
        progress[0] = time.monotonic()
        more = message.get("more_body", False)
        if chunk:
            await conn.send(b"%x\r\n%b\r\n" % (len(chunk), chunk) if chunked else chunk)
        if not more:
            break
    if chunked:
        await conn.send(b"0\r\n\r\n")
