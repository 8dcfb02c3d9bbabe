"""`python -m proxy [--host H] [--port P | --fd N] [--portal-upstream URL]`: serve the proxy with uvicorn.

`--fd` serves on a listening socket the caller bound and passed down (`make run` holds its port from the
moment it starts, so a second run on that port is refused at once rather than after its whole setup).

`--portal-upstream` (development only) makes the proxy pass every path outside /w/ to the Django server,
so that one origin serves the portal and its services (this is what `make run` does).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import socket
import sys

import uvicorn

from proxy.handshake import RefusalAwareWebSocketProtocol


def _raise_open_files_limit() -> None:
    # Every open WebSocket holds two sockets (browser and pod); the default soft limit of 1024 is too low.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m proxy", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("PROXY_HOST", "0.0.0.0"))  # noqa: S104
    parser.add_argument("--port", type=int, default=int(os.environ.get("PROXY_PORT", "8080")))
    parser.add_argument("--fd", type=int, default=None, help="serve on this inherited listening socket instead")
    parser.add_argument("--portal-upstream", default=None, help="development: where paths outside /w/ go")
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "info").lower())
    options = parser.parse_args()
    if options.portal_upstream is not None:
        os.environ["PROXY_PORTAL_UPSTREAM"] = options.portal_upstream
    _raise_open_files_limit()
    config = uvicorn.Config(
        "proxy.asgi:application",
        host=options.host,
        port=options.port,
        log_level=options.log_level,
        proxy_headers=False,  # X-Forwarded-* from the ingress are passed on, not trusted for the client IP
        ws=RefusalAwareWebSocketProtocol,  # websockets-sansio, quiet about a refused handshake
        ws_max_size=int(os.environ.get("PROXY_WS_MAX_MESSAGE_BYTES", str(64 * 1024 * 1024))),
        ws_per_message_deflate=False,  # bytes pass through as they are; the app and browser negotiate nothing
        timeout_keep_alive=30,
        lifespan="on",
    )
    server = uvicorn.Server(config)
    # An inherited socket as what it is (TCP, so accepted connections get TCP_NODELAY), not as uvicorn's own
    # --fd takes it (a Unix socket).
    sockets = [socket.socket(fileno=options.fd)] if options.fd is not None else None
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
    if not server.started:
        sys.exit(3)  # as uvicorn.run: it could not start (the port taken, the app failed to load)


if __name__ == "__main__":
    main()
