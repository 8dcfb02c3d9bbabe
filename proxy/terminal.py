"""The browser's Terminal tab (issue 39): xterm.js on the service page, a WebSocket to the proxy, and the
proxy speaking SSH (asyncssh, a kept library) to the pod's own sshd.

Why SSH and not Kubernetes exec: exec would need `pods/exec` for the proxy's service account in every team
namespace, a right that runs anything as anyone in any pod there; with SSH the proxy needs nothing from
Kubernetes beyond the Endpoints it already reads, and the shell is the same account, limits and idle
accounting as a person's own ssh. The proxy logs in with a key of its own per service, derived from the
portal's SECRET_KEY and the service's uid (HKDF): nothing to store, different for every service, and its
public half is written into that service's authorized_keys by the engine (jobs.services.ssh_access) with
`restrict,pty` (a terminal; no forwarding). Whoever holds SECRET_KEY can already sign in as anyone, so
the key adds no new power. The pod's host key is not checked: the address is the pod's own, read from the
service's Endpoints, inside the cluster network.

Wire format with the page: binary messages are keystrokes (to the shell) and output (to the page); a
text message `{"resize": [cols, rows]}` resizes the terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import asyncssh

from jobs.services.ssh_access import terminal_private_key_pem
from proxy.ssh_tunnel import first_to_end

log = logging.getLogger(__name__)

POD_USER = "user"
CLOSE_ENDED = 4403
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def connect(host: str, port: int, uid: str, *, timeout: float) -> asyncssh.SSHClientConnection:
    key = asyncssh.import_private_key(terminal_private_key_pem(uid))
    # No user or system ssh config, no agent: only this key, only this address.
    login = asyncssh.connect(
        host, port, username=POD_USER, client_keys=[key], known_hosts=None, agent_path=None, config=None,
        preferred_auth="publickey",
    )  # fmt: skip
    return await asyncio.wait_for(login, timeout)


def _size(text: str) -> tuple[int, int] | None:
    try:
        cols, rows = json.loads(text)["resize"]
        cols, rows = int(cols), int(rows)
    except (ValueError, KeyError, TypeError):
        return None
    return (cols, rows) if 1 <= cols <= 1000 and 1 <= rows <= 1000 else None


async def pump(
    conn: asyncssh.SSHClientConnection,
    receive: Receive,
    send: Send,
    *,
    still_open: Callable[[], Awaitable[bool]],
    recheck_seconds: float,
    touch: Callable[[], None],
) -> str:
    """Run a login shell on a pty and carry it to the page until either side ends or access ends."""
    process = await conn.create_process(term_type="xterm-256color", term_size=(80, 24), encoding=None)

    async def from_page() -> str:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return "page"
            if message.get("bytes") is not None:
                process.stdin.write(message["bytes"])
                touch()
            elif (size := _size(message.get("text") or "")) is not None:
                process.change_terminal_size(*size)

    async def from_shell() -> str:
        while data := await process.stdout.read(65536):
            await send({"type": "websocket.send", "bytes": data})
        return "shell"

    try:
        why = await first_to_end(
            (from_page, from_shell),
            on_error="shell",
            still_open=still_open,
            recheck_seconds=recheck_seconds,
            touch=touch,
        )
    finally:
        process.close()
        conn.close()
    with contextlib.suppress(Exception):
        if why == "revoked":
            await send({"type": "websocket.close", "code": CLOSE_ENDED, "reason": "Access ended."})
        elif why == "shell":
            await send({"type": "websocket.close", "code": 1000, "reason": "The shell ended."})
    return why
