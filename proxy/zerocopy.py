"""Large downloads moved from the pod's socket to the browser's inside the kernel, with splice(2).

Relaying a body through Python costs two copies of every byte (the kernel's socket buffer into a bytes
object, then that object into the browser's socket buffer) and a round of the event loop per piece. On a
busy node the proxy then needs about as much CPU per GB as the pod and the browser's side together, and a
download through it runs at half the speed of one straight to the pod. splice(2) moves the pod's bytes into
a pipe and from the pipe into the browser's socket by handing over page references: no copy in user space,
no Python object per piece. HAProxy relays bodies the same way.

The head of the answer (status, the headers the proxy rewrote) still goes out through the ASGI server, and
so does the end of the answer: only the bytes in between take the short way. That needs the browser's
socket, which ASGI does not hand out, so `sink_for` finds it on uvicorn's httptools protocol (the server
the proxy ships with, pinned in requirements/base.txt) and returns None wherever it cannot be sure it is
safe: another server or protocol, TLS on the connection (the bytes must be encrypted by the transport), a
platform without splice, or bytes still queued in the transport (they must go first). The body then goes
through the ordinary ASGI path, as before; tests/proxy/test_zerocopy.py fails if the pinned server stops
offering the short way.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from typing import Any

SPLICE_AT_LEAST = 1 << 20  # smaller bodies: the ordinary path costs less than setting up a pipe
PIPE_BYTES = 1 << 20  # asked for; a pipe the system will not grow keeps its default (64 KB)
_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
_HTTPTOOLS_CYCLE = "uvicorn.protocols.http.httptools_impl.RequestResponseCycle"


class PodClosed(Exception):
    """The pod closed its connection before the announced length came."""


class Sink:
    """The browser's connection of one request, written to directly between the head and the end."""

    __slots__ = ("_cycle", "_fd", "_transport")

    def __init__(self, cycle: Any, transport: asyncio.Transport, fd: int) -> None:
        self._cycle = cycle
        self._transport = transport
        self._fd = fd

    def ready(self, length: int) -> bool:
        """Whether the next `length` bytes may bypass the server: the head went out whole (nothing queued
        in the transport), the connection is open, and the server expects exactly a body of that length."""
        cycle = self._cycle
        return (
            cycle.response_started
            and not cycle.response_complete
            and not cycle.disconnected
            and cycle.chunked_encoding is False
            and cycle.expected_content_length == length
            and not self._transport.is_closing()
            and self._transport.get_write_buffer_size() == 0
        )

    async def _write_all(self, loop: asyncio.AbstractEventLoop, browser: int, data: bytes) -> None:
        """Write `data` to the browser's descriptor, waiting for room as needed."""
        view = memoryview(data)
        while view:
            try:
                sent = os.write(browser, view)
            except BlockingIOError:
                await _ready(loop, None, browser)
                continue
            self._cycle.expected_content_length -= sent
            view = view[sent:]

    async def relay(self, pod_fd: int, first: bytes, length: int) -> None:
        """Send `first` (body bytes already read with the head), then splice the rest of `length` from
        `pod_fd`. Raises PodClosed when the pod stops early and OSError when the browser's side breaks;
        either way the answer stays incomplete, and the server closes the browser's connection."""
        loop = asyncio.get_running_loop()
        browser = os.dup(self._fd)  # a descriptor of our own to wait on: the transport owns the original
        read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            with contextlib.suppress(OSError):
                fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
            room = fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ)
            await self._write_all(loop, browser, first)
            to_read, in_pipe = length - len(first), 0
            while to_read or in_pipe:
                moved = False
                if to_read and in_pipe < room:
                    got = _splice_in(pod_fd, write_end, min(to_read, room - in_pipe), to_read=to_read)
                    if got is not None:
                        to_read -= got
                        in_pipe += got
                        moved = True
                if in_pipe:
                    sent = _splice(read_end, browser, in_pipe)
                    if sent is not None:
                        in_pipe -= sent
                        self._cycle.expected_content_length -= sent
                        moved = True
                if not moved:
                    await _ready(loop, pod_fd if to_read and in_pipe < room else None, browser if in_pipe else None)
        finally:
            for fd in (read_end, write_end, browser):
                os.close(fd)


def _splice(source: int, target: int, count: int) -> int | None:
    """Bytes moved from `source` to `target` (at most `count`); None when either side would block."""
    try:
        return os.splice(source, target, count, flags=_FLAGS)
    except BlockingIOError:
        return None


def _splice_in(pod_fd: int, write_end: int, count: int, *, to_read: int) -> int | None:
    """`_splice` from the pod into the pipe; PodClosed when the pod closed with `to_read` bytes still due."""
    got = _splice(pod_fd, write_end, count)
    if got == 0:
        raise PodClosed(f"closed with {to_read} bytes of the body still to come")
    return got


async def _ready(loop: asyncio.AbstractEventLoop, readable: int | None, writable: int | None) -> None:
    """Until `readable` has bytes or `writable` has room, whichever comes first."""
    waiter = loop.create_future()

    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    if readable is not None:
        loop.add_reader(readable, wake)
    if writable is not None:
        loop.add_writer(writable, wake)
    try:
        await waiter
    finally:
        if readable is not None:
            loop.remove_reader(readable)
        if writable is not None:
            loop.remove_writer(writable)


def _plain_tcp(transport: Any) -> bool:
    """A transport without TLS (the kernel can only splice plain bytes)."""
    return transport is not None and not (
        transport.get_extra_info("sslcontext") or transport.get_extra_info("ssl_object")
    )


def sink_for(scope: dict[str, Any], send: Any) -> Sink | None:
    """The browser's connection behind `send`, when the short way is known to be safe; else None."""
    if not hasattr(os, "splice") or scope.get("type") != "http" or scope.get("method") == "HEAD":
        return None
    cycle = getattr(send, "__self__", None)
    if cycle is None or f"{type(cycle).__module__}.{type(cycle).__qualname__}" != _HTTPTOOLS_CYCLE:
        return None
    transport = getattr(cycle, "transport", None)
    if not _plain_tcp(transport):
        return None
    sock = transport.get_extra_info("socket")
    fd = sock.fileno() if sock is not None else -1
    return Sink(cycle, transport, fd) if fd >= 0 else None
