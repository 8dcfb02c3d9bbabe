"""uvicorn's sans-I/O WebSocket protocol, quiet about a handshake the proxy refused on purpose.

The proxy refuses a WebSocket it will not carry (an SSH tunnel with a bad token, a pod whose sshd does not
answer) with a plain HTTP status, through ASGI's `websocket.http.response` extension. uvicorn 0.54's
`websockets-sansio` protocol sends that response but never marks the handshake as finished, so when the
application returns it logs "ASGI callable returned without completing handshake." at ERROR for every
refusal (its wsproto protocol does mark it; an upstream fix is proposed in Kludex/uvicorn#3138). The
websockets library also logs "connection rejected (...)" beside uvicorn's own status line. A refusal is
then three lines, one of them an error that alerting picks up, for what is an ordinary answer.

Here a refusal is one line, the proxy's own, which says why (`"WebSocket <path>" 502: the pod's sshd is not
reachable: ...`). Served by `python -m proxy` and by the tests' proxy, so both run the same protocol.
"""

from __future__ import annotations

import logging
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

# The websockets library's own messages about the handshake (its "connection rejected" line is a repeat of
# uvicorn's status line); its warnings and errors still reach the log.
QUIET_HANDSHAKE_LOG = logging.getLogger("proxy.websocket_handshake")
QUIET_HANDSHAKE_LOG.setLevel(logging.WARNING)


_SILENT = logging.getLogger("proxy.websocket_handshake.status")
_SILENT.disabled = True


class RefusalAwareWebSocketProtocol(WebSocketsSansIOProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.conn.logger = QUIET_HANDSHAKE_LOG

    async def send(self, message: Any) -> None:
        if message["type"] == "websocket.http.response.start":
            # The application that refuses says so itself, with why (proxy.app's _refuse_websocket); uvicorn's
            # bare status line would repeat it. This connection's logger only, for this one message.
            shared, self.logger = self.logger, _SILENT
            try:
                await super().send(message)
            finally:
                self.logger = shared
            return
        await super().send(message)
        if (
            message["type"] == "websocket.http.response.body"
            and not message.get("more_body", False)
            and self.close_sent  # the whole refusal is on the wire
        ):
            self.handshake_complete = True  # finished, by refusing: not an application that forgot to answer
