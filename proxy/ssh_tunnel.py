"""The SSH tunnel's bytes: a WebSocket from `gpuportal ssh-proxy` on one side, the pod's sshd on the other.

The proxy never reads SSH: binary WebSocket messages go to the pod's TCP port as they are, and what the pod
sends comes back as binary messages. SSH's own encryption and host key check run end to end between the
person's ssh client and the pod's sshd; the portal's part is the door (proxy.ssh_door) and the pipe.

Each tunnel is two small tasks and a socket: idle tunnels cost no CPU (no timers but the recheck), which is
how one proxy process holds thousands (benchmarks: ssh_sessions_per_proxy). While a tunnel is open, every
recheck also counts as activity for the idle policy: an SSH session left open is a person at work, as an
open notebook tab is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)

READ_CHUNK = 1024 * 1024
CLOSE_REVOKED = 4403  # an application close code: the door shut while the tunnel was open
CLOSE_UNREACHABLE = 1011

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def pump(
    receive: Receive,
    send: Send,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    still_open: Callable[[], Awaitable[bool]],
    recheck_seconds: float,
    touch: Callable[[], None],
) -> str:
    """Carry bytes both ways until either side ends or `still_open()` says no; returns why it ended
    ("client", "pod", "revoked"). The WebSocket must already be accepted."""

    async def from_client() -> str:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return "client"
            data = message.get("bytes")
            if data is None:
                data = (message.get("text") or "").encode()
            writer.write(data)
            await writer.drain()  # back-pressure: a slow pod slows the client, memory stays flat

    async def from_pod() -> str:
        while True:
            data = await reader.read(READ_CHUNK)
            if not data:
                return "pod"
            await send({"type": "websocket.send", "bytes": data})

    try:
        why = await first_to_end(
            (from_client, from_pod), on_error="pod", still_open=still_open, recheck_seconds=recheck_seconds, touch=touch
        )
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    if why == "revoked":
        log.info("SSH tunnel cut: the token or the access behind it is gone")
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": CLOSE_REVOKED, "reason": "Access ended."})
    elif why == "pod":
        with contextlib.suppress(Exception):
            await send({"type": "websocket.close", "code": 1000, "reason": "The service closed the connection."})
    return why


async def first_to_end(
    sides: tuple[Callable[[], Awaitable[str]], ...],
    *,
    on_error: str,
    still_open: Callable[[], Awaitable[bool]],
    recheck_seconds: float,
    touch: Callable[[], None],
) -> str:
    """Run each side of a session (a coroutine function that returns why it ended) beside a watch that asks
    `still_open()` every `recheck_seconds` (each yes counts as activity, `touch()`); once one ends, stop the
    others and return why: the side's answer, `on_error` when it raised, or "revoked" when access ended.
    The SSH tunnel and the browser's Terminal share it."""

    async def watch() -> str:
        while True:
            await asyncio.sleep(recheck_seconds)
            if not await still_open():
                return "revoked"
            touch()

    tasks = [asyncio.ensure_future(side()) for side in (*sides, watch)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finished = next(iter(done))
        return on_error if finished.exception() is not None else finished.result()
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
