"""`python -m proxy [--host H] [--port P] [--portal-upstream URL]`: serve the proxy with uvicorn.

`--portal-upstream` (development only) makes the proxy pass every path outside /w/ to the Django server,
so that one origin serves the portal and its services (this is what `make run` does).
"""

from __future__ import annotations

import argparse
import os
import resource

import uvicorn


def _raise_open_files_limit() -> None:
    # Every open WebSocket holds two sockets (browser and pod); the default soft limit of 1024 is too low.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m proxy", description=__doc__)
    parser.add_argument("--host", default=os.environ.get("PROXY_HOST", "0.0.0.0"))  # noqa: S104
    parser.add_argument("--port", type=int, default=int(os.environ.get("PROXY_PORT", "8080")))
    parser.add_argument("--portal-upstream", default=None, help="development: where paths outside /w/ go")
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "info").lower())
    options = parser.parse_args()
    if options.portal_upstream is not None:
        os.environ["PROXY_PORTAL_UPSTREAM"] = options.portal_upstream
    _raise_open_files_limit()
    uvicorn.run(
        "proxy.asgi:application",
        host=options.host,
        port=options.port,
        log_level=options.log_level,
        proxy_headers=False,  # X-Forwarded-* from the ingress are passed on, not trusted for the client IP
        ws="websockets-sansio",
        ws_max_size=int(os.environ.get("PROXY_WS_MAX_MESSAGE_BYTES", str(64 * 1024 * 1024))),
        ws_per_message_deflate=False,  # bytes pass through as they are; the app and browser negotiate nothing
        timeout_keep_alive=30,
        lifespan="on",
    )


if __name__ == "__main__":
    main()
