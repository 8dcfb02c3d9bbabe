"""The service proxy: an ASGI app that passes /w/<uid>/... to the service's pod, HTTP and WebSocket.

Why these parts: **uvicorn** serves it (the reference ASGI server, maintained by the Encode team; HTTP/1.1
through httptools and WebSockets through the `websockets` library, flow control both ways). Plain HTTP
goes to the pods through proxy/upstream.py, a small keep-alive HTTP/1.1 client over httptools (llhttp, the
parser uvicorn itself uses) that passes bodies on as the kernel hands them over: a general client parsed
and re-queued every byte, which nearly doubled the proxy's CPU per GB downloaded. A large body of known
length skips Python altogether: proxy/zerocopy.py splices it from the pod's socket to the browser's.
WebSockets to the pods go through **aiohttp**'s client (maintained, with the close codes and subprotocols a
proxy must pass on; it was already in the lock file through the Kubernetes client). The app itself is
plain ASGI, no framework: it is one routing rule.

Per request: the portal session decides (proxy.access.door, in a worker thread: Django is synchronous),
then the Endpoints give the pod's address, then bytes flow. The path is forwarded unchanged, prefix
included: the apps are told their base path (`/w/<uid>/`) when they start (catalog templates,
GPUPORTAL_BASE_URL), which is how Jupyter, TensorBoard and DIGITS expect to sit behind a proxy.
Whatever goes wrong ends in a portal page (starting, ended, timeout, unreachable, 404), never a bare 502.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import re
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import asyncssh
from django.conf import settings
from django.db import connections
from django.http.cookie import parse_cookie

from jobs.kube import ssh_objects
from jobs.services import opening
from portal.security import is_trusted_proxy
from proxy import access, headers, ssh_door, ssh_tunnel, terminal, upstream, zerocopy
from proxy.access import Door, Outcome

log = logging.getLogger(__name__)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

SERVICE_PATH = re.compile(r"^/w/(?P<uid>[0-9a-f]{1,16})(?P<rest>/.*)?$")
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})  # RFC 9110 9.2.2: safe to retry
WORKERS = 8  # threads for Django work (sessions, policy, EndpointSlices, activity)
# Close codes an endpoint may not send (RFC 6455 7.4.1): "no status", "abnormal", "TLS failure".
UNSENDABLE_CLOSE = {1005, 1006, 1015}
# The service page's Terminal tab (proxy/terminal.py): a WebSocket under the service's own prefix, so the same
# cookie and origin rules as Open apply to it.
TERMINAL_REST = "/.gpuportal-terminal"


# When a pod cuts a body short, the proxy leaves the browser's answer incomplete on purpose (completing it
# would make a truncated download look whole; uvicorn then closes the connection). uvicorn logs that at
# ERROR as if the proxy had failed; it is the pod's doing, which the proxy logs itself, so those lines are
# told as INFO. Only for answers the proxy cut: the flag lives in the request's own context.
_cut_on_purpose: contextvars.ContextVar[bool] = contextvars.ContextVar("proxy_cut_on_purpose", default=False)
_INCOMPLETE = "ASGI callable returned without completing response."


class _CutBodyIsNotAnError(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and _cut_on_purpose.get() and record.getMessage() == _INCOMPLETE:
            record.levelno, record.levelname = logging.INFO, "INFO"
            return logging.getLogger(record.name).isEnabledFor(logging.INFO)
        return True


_CUT_FILTER = _CutBodyIsNotAnError()


def _blocked_cookies() -> frozenset[str]:
    return frozenset(
        {
            settings.SESSION_COOKIE_NAME,
            settings.CSRF_COOKIE_NAME,
            settings.PROXY_APP_COOKIE_NAME,
            *settings.PROXY_BLOCKED_COOKIES,
        }
    )


def _str_headers(scope: Scope) -> list[headers.Header]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope.get("headers", [])]


def _bytes_headers(items: list[headers.Header]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in items]


def _credential(scope: Scope) -> str | None:
    """The cookie that says who this is: the portal's session, or on a separate apps' origin the proxy's
    own cookie (access.credential_cookie)."""
    wanted = access.credential_cookie()
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            found = parse_cookie(value.decode("latin-1")).get(wanted)
            if found:
                return found
    return None


def _client_ip(scope: Scope) -> str:
    """The address that connected to the proxy (uvicorn runs without proxy_headers: the real peer)."""
    return (scope.get("client") or ("", 0))[0]


def _behind_trusted_proxy(peer: str) -> bool:
    """Whether the peer is a proxy in front of this one (PROXY_TRUSTED_PROXIES), whose chain goes on."""
    return is_trusted_proxy(peer, settings.PROXY_TRUSTED_PROXIES)


def _origin_allowed(scope: Scope) -> bool:
    """A WebSocket's page origin: the one it came to, or the portal's where services share it."""
    found = {k.decode(): v.decode("latin-1") for k, v in scope.get("headers", []) if k in (b"origin", b"host")}
    site = urlsplit(settings.SITE_URL)
    portal_origin = "" if settings.PROXY_ORIGIN else f"{site.scheme}://{site.netloc}"
    return headers.websocket_origin_allowed(
        found.get("origin"), found.get("host", ""), portal_origin=portal_origin,
        https_only=settings.SESSION_COOKIE_SECURE,
    )  # fmt: skip


def _full_path(scope: Scope) -> str:
    path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string") or b""
    return path.decode("latin-1") + (f"?{query.decode('latin-1')}" if query else "")


def _on_apps_origin(scope: Scope) -> bool:
    """Whether the request came to the services' own origin (PROXY_ORIGIN), where the portal's pages must
    never be served, even by a proxy that passes other hosts to the portal (compose, one entry)."""
    if not settings.PROXY_ORIGIN:
        return False
    host = next((v.decode("latin-1").lower() for k, v in scope.get("headers", []) if k == b"host"), "")
    apps = urlsplit(settings.PROXY_ORIGIN.replace("{uid}.", "")).netloc.lower()
    return host == apps or ("{uid}." in settings.PROXY_ORIGIN and host.endswith(f".{apps}"))


def _host_is_another_service(scope: Scope, uid: str) -> bool:
    """With one origin per service (PROXY_ORIGIN `https://{uid}.apps.example.org`), whether this request for
    service `uid` came to some other host: each service's origin serves that service and nothing else, so
    its JavaScript can never read another service, whatever cookies exist."""
    if "{uid}." not in settings.PROXY_ORIGIN or not _on_apps_origin(scope):
        return False
    host = next((v.decode("latin-1").lower() for k, v in scope.get("headers", []) if k == b"host"), "")
    return host.split(".", 1)[0] != uid


def _landing(wanted: str, prefix: str) -> str:
    """Where a handoff lands: the page asked for, only ever inside this service (the ticket names it)."""
    if not wanted.startswith(prefix) or "\\" in wanted or any(ord(c) < 0x20 for c in wanted):
        return prefix
    return wanted


async def _wait_for_answer(
    answer: asyncio.Future, uploading: asyncio.Future, progress: list[float], limit: float | None
) -> None:
    """Wait until the answer comes, the upload ends or `limit` seconds pass without progress: raises
    BrowserGone when the upload found the browser gone, TimeoutError past the limit."""
    waiting = {answer} if uploading.done() else {answer, uploading}
    wait = None if limit is None else max(0.05, progress[0] + limit - time.monotonic())
    await asyncio.wait(waiting, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
    if uploading.done() and isinstance(uploading.exception(), upstream.BrowserGone):
        raise upstream.BrowserGone
    # Any other upload failure: the pod stopped reading, and may be answering already.
    if not answer.done() and limit is not None and time.monotonic() - progress[0] >= limit:
        raise TimeoutError


async def _copy_body(
    conn: upstream.Connection, response: upstream.Response, send: Send, sink: zerocopy.Sink | None
) -> bool:
    """Copy the answer's body to the browser (inside the kernel through `sink` when given); whether it
    went out whole."""
    try:
        if sink is not None:
            await sink.relay(conn.sock.fileno(), response.rest, response.length)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return True
        async for piece in upstream.body(conn, response):
            await send({"type": "http.response.body", "body": piece, "more_body": True})
    except (upstream.Unreachable, zerocopy.PodClosed, OSError) as exc:
        # Not completed on purpose: uvicorn then closes the browser's connection, so a truncated
        # body never looks whole.
        log.info("backend stream broke off: %s", exc)
        return False
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    return True


async def _browser_gone(receive: Receive, uploading: asyncio.Future | None) -> None:
    """Returns once the browser has gone away."""
    if uploading is not None:  # until the upload ends, it is the one reading receive()
        await asyncio.wait({uploading})
        if uploading.cancelled() or isinstance(uploading.exception(), upstream.BrowserGone):
            return
    while (await receive())["type"] != "http.disconnect":
        pass


def _ended_cleanly(copying: asyncio.Future, uploading: asyncio.Future | None, response: upstream.Response) -> bool:
    """After the copy: whether the connection to the pod can carry another request (body and upload both
    whole). A copy that broke off marks the request cut on purpose."""
    copied = copying.result() if copying.done() and not copying.cancelled() else None
    if copied is False:
        _cut_on_purpose.set(True)  # in this request's task: uvicorn reads it when the app returns
    return bool(copied and _finished_well(uploading) and response.keep_alive)


def _finished_well(uploading: asyncio.Future | None) -> bool:
    """No upload, or one that ended without an error."""
    return uploading is None or (uploading.done() and not uploading.cancelled() and uploading.exception() is None)


def _splices(sink: zerocopy.Sink | None, response: upstream.Response) -> bool:
    """Does the answer's body go through the kernel (`sink`: proxy/zerocopy.py)? A large one of known
    length, when the sink is ready for it."""
    return (
        sink is not None
        and response.length is not None
        and response.length - len(response.rest) >= zerocopy.SPLICE_AT_LEAST
        and sink.ready(response.length)
    )


def _outgoing_headers(
    request_headers: list[headers.Header], target: tuple[str, int], method: str, framing: str | None
) -> list[headers.Header]:
    """The request's headers as they go to `target`: a Host if the browser sent none, and the framing of the
    body as it is forwarded (chunked as it comes, or an explicit empty body where one is expected)."""
    outgoing = [(k, v) for k, v in request_headers if k.lower() != "content-length" or framing != "chunked"]
    names = {k.lower() for k, _ in outgoing}
    if "host" not in names:
        outgoing.insert(0, ("Host", headers.authority(*target)))
    if framing == "chunked":
        outgoing.append(("Transfer-Encoding", "chunked"))
    elif framing is None and method in ("POST", "PUT", "PATCH") and "content-length" not in names:
        outgoing.append(("Content-Length", "0"))
    return outgoing


def _response_headers(response: upstream.Response, target: tuple[str, int], *, strip: bool) -> list[headers.Header]:
    """The answer's headers as they go to the browser: a pod's cleaned (`headers.response_headers`), the
    portal's (development) only without hop-by-hop ones."""
    raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in response.headers]
    if strip:
        raw = headers.response_headers(raw, blocked_cookies=_blocked_cookies(), backend_origin=headers.origin(*target))
    else:
        raw = [(k, v) for k, v in raw if k.lower() not in headers.HOP_BY_HOP | headers.connection_tokens(raw)]
    if response.chunked:  # the length the pod announced beside a chunked body is not the body's (RFC 9112 6.3)
        raw = [(k, v) for k, v in raw if k.lower() != "content-length"]
    return raw


def _door_refusal(door: Door) -> tuple[int, str]:
    """A WebSocket the door did not open: its status, and why in the log's words (the client hears only 404)."""
    if door.outcome == Outcome.STARTING:
        return 503, "the service is not running yet"
    if door.outcome == Outcome.ENDED:
        return 404, "the service has ended"
    return 404, "no such service for this person or token (or the page's origin is not allowed)"


def _request_framing(scope: Scope) -> str | None:
    """How the browser's request body is framed: "chunked", "length", or None (no body)."""
    framing = None
    for name, value in scope.get("headers", []):
        if name == b"transfer-encoding":
            return "chunked"  # uvicorn removed the chunk framing; the pod gets it anew
        if name == b"content-length" and value.strip() not in (b"", b"0"):
            framing = "length"
    return framing


class ServiceProxy:
    """The ASGI application. `portal_upstream` (development only) receives everything outside /w/;
    `endpoints` finds a service's pod (by default through Kubernetes EndpointSlices, briefly cached)."""

    def __init__(
        self,
        *,
        portal_upstream: str = "",
        endpoints: Callable[[str, str], tuple[str, int] | None] = access.ready_endpoint,
        ssh_port: int = ssh_objects.SSH_PORT,
    ) -> None:
        self.portal_upstream = portal_upstream.rstrip("/")
        self._endpoints = endpoints  # (namespace, service) -> a ready pod's address; tests pin one
        self._ssh_port = ssh_port  # where sshd listens on the pod's address (tests: a loopback stand-in)
        self._client: aiohttp.ClientSession | None = None  # WebSockets to pods
        self._pool = upstream.Pool()  # plain HTTP to pods (upstream.py says why not aiohttp)
        self._touched: dict[int | None, float] = {}
        self._doors: dict[tuple[str | None, str], tuple[float, Door]] = {}
        self._targets: dict[tuple[str, str], tuple[float, tuple[str, int] | None]] = {}
        # Django work (sessions, policy, Endpoints, activity) runs here, off the event loop.
        self._django = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="proxy-django")
        server_errors = logging.getLogger("uvicorn.error")
        if _CUT_FILTER not in server_errors.filters:
            server_errors.addFilter(_CUT_FILTER)

    # --- plumbing -------------------------------------------------------------------------------------
    async def _sync(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._django, fn, *args)

    async def _door(self, session_key: str | None, uid: str, *, fresh: bool = False) -> Door:
        """access.door, answered on the event loop while fresh: most requests of a page load are assets.
        `fresh`: ask the database whatever the cache holds (the service seemed to be gone)."""
        key = (session_key, uid)
        hit = self._doors.get(key)
        if hit is not None and hit[0] > time.monotonic() and not fresh:
            return hit[1]
        door = await self._sync(functools.partial(access.door, session_key, uid, fresh=fresh))
        if door.outcome != Outcome.SIGN_IN and settings.PROXY_ACCESS_CACHE_SECONDS > 0:
            if len(self._doors) > 10_000:
                self._doors.clear()
            self._doors[key] = (time.monotonic() + settings.PROXY_ACCESS_CACHE_SECONDS, door)
        return door

    async def _target(self, door: Door) -> tuple[str, int] | None:
        """The pod's address, answered on the event loop while fresh (PROXY_ENDPOINT_CACHE_SECONDS)."""
        key = (door.namespace, door.service)
        hit = self._targets.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        target = await self._sync(self._endpoints, door.namespace, door.service)
        if target is not None and settings.PROXY_ENDPOINT_CACHE_SECONDS > 0:
            if len(self._targets) > 10_000:
                self._targets.clear()
            self._targets[key] = (time.monotonic() + settings.PROXY_ENDPOINT_CACHE_SECONDS, target)
        return target

    def _forget_target(self, door: Door) -> None:
        self._targets.pop((door.namespace, door.service), None)

    @property
    def client(self) -> aiohttp.ClientSession:
        if self._client is None or self._client.closed:
            self._client = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True),
                cookie_jar=aiohttp.DummyCookieJar(),  # never carry one user's cookies into another's request
                auto_decompress=False,  # bytes pass through as the app encoded them
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=settings.PROXY_CONNECT_TIMEOUT),
            )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
        self._pool.close()
        # Each worker thread holds its own database connection: close every one (a barrier makes each of
        # the pool's threads take exactly one of these jobs), so none is left open on the server.
        barrier = threading.Barrier(WORKERS)

        def close_connections() -> None:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=5)
            connections.close_all()

        await asyncio.gather(*(self._sync(close_connections) for _ in range(WORKERS)), return_exceptions=True)
        self._django.shutdown(wait=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if settings.PROXY_ORIGIN and scope["path"] == opening.HANDOFF_PATH:
            if kind == "http":
                await self._handoff(scope, send)
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        ssh = ssh_door.SSH_PATH.match(scope["path"])
        if ssh is not None:
            await self._ssh(scope, receive, send, ssh["uid"])
            return
        match = SERVICE_PATH.match(scope["path"])
        if match is None:
            await self._not_a_service(scope, receive, send)
        else:
            await self._service(scope, receive, send, match["uid"], match["rest"])

    async def _not_a_service(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A path outside /w/<uid>: refused on the apps' origin, the portal's own pages in development."""
        if scope["path"].startswith(settings.PROXY_PREFIX) or not self.portal_upstream or _on_apps_origin(scope):
            await self._refuse(scope, receive, send, None)
        elif scope["type"] == "http":
            await self._pass_to_portal(scope, receive, send)
        else:
            await send({"type": "websocket.close", "code": 1008})

    async def _service(self, scope: Scope, receive: Receive, send: Send, uid: str, rest: str | None) -> None:
        """A request to service `uid` (`rest`: the path after /w/<uid>, None without its slash)."""
        kind = scope["type"]
        if _host_is_another_service(scope, uid):
            await self._refuse(scope, receive, send, None)
            return
        if rest is None:  # /w/<uid> -> /w/<uid>/: relative links in the app resolve under its prefix
            if kind == "http":
                query = scope.get("query_string") or b""
                target = f"/w/{uid}/" + (f"?{query.decode('latin-1')}" if query else "")
                await self._respond(send, 308, "", extra=[("Location", target)])
            else:
                await send({"type": "websocket.close", "code": 1008})
            return
        if kind == "websocket" and rest == TERMINAL_REST:
            await self._terminal(scope, receive, send, uid)
            return
        if kind == "websocket":
            if not _origin_allowed(scope):
                log.info("WebSocket to %s refused: its page's origin is not the portal's or the service's", uid)
                await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake gets 403
                return
            door = await self._door(_credential(scope), uid)
            await self._websocket(scope, receive, send, door)
            return
        await self._service_http(scope, receive, send, uid)

    async def _service_http(self, scope: Scope, receive: Receive, send: Send, uid: str) -> None:
        """An HTTP request to service `uid`; should anything fail before the answer started, a portal page."""
        started = False
        sink = zerocopy.sink_for(scope, send)  # before `send` is wrapped: it needs the server's own

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            door = await self._door(_credential(scope), uid)
            await self._http(scope, receive, tracked, door, sink)
        except Exception:  # the database is away, a template broke: a portal page, never a traceback
            log.exception("proxying %s failed", scope["path"])
            if not started:
                html = await self._sync(access.render_error)
                await self._respond(send, 500, html)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _respond(self, send: Send, status: int, html: str, *, extra: list[headers.Header] | None = None) -> None:
        body = html.encode()
        head = [
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
            *(extra or []),
        ]
        await send({"type": "http.response.start", "status": status, "headers": _bytes_headers(head)})
        await send({"type": "http.response.body", "body": body})

    async def _page(self, send: Send, kind: str, door: Door | None, path: str = "") -> None:
        status, html = await self._sync(access.page, kind, door, path)
        extra = [("Retry-After", str(settings.PROXY_STARTING_REFRESH_SECONDS))] if kind == "starting" else []
        await self._respond(send, status, html, extra=extra)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, door: Door | None) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # before accept: the handshake fails (403)
            return
        match = SERVICE_PATH.match(scope["path"])
        if door is not None and door.outcome == Outcome.SIGN_IN and match is not None:
            location = await self._sync(access.sign_in_url, _full_path(scope), match["uid"])
            await self._respond(send, 302, "", extra=[("Location", location)])
            return
        await self._page(send, "not_found", door)

    async def _handoff(self, scope: Scope, send: Send) -> None:
        """`/w/_login?ticket=…&next=…` on the apps' origin: a ticket from the portal becomes the proxy's
        own cookie for that one service (host-only, its path only, HttpOnly), then on to the service."""
        query = parse_qs((scope.get("query_string") or b"").decode("latin-1"))
        handoff = await self._sync(access.redeem, (query.get("ticket") or [""])[0])
        if handoff.refused:
            status, html = await self._sync(access.page, "handoff", None, "", handoff.refused)
            await self._respond(send, status, html, extra=[("Referrer-Policy", "no-referrer")])
            return
        if not handoff.cookie or _host_is_another_service(scope, handoff.door.uid):
            await self._page(send, "not_found", handoff.door)
            return
        prefix = f"{settings.PROXY_PREFIX}{handoff.door.uid}/"
        landing = _landing((query.get("next") or [""])[0], prefix)
        secure = "; Secure" if scope.get("scheme") == "https" or settings.SESSION_COOKIE_SECURE else ""
        cookie = (
            f"{settings.PROXY_APP_COOKIE_NAME}={handoff.cookie}; Path={prefix}; Max-Age="
            f"{settings.PROXY_APP_COOKIE_SECONDS}; HttpOnly; SameSite=Lax{secure}"
        )
        extra = [("Location", landing), ("Set-Cookie", cookie), ("Referrer-Policy", "no-referrer")]
        await self._respond(send, 302, "", extra=extra)

    # --- HTTP ----------------------------------------------------------------------------------------
    async def _http(
        self, scope: Scope, receive: Receive, send: Send, door: Door, sink: zerocopy.Sink | None = None
    ) -> None:
        if door.outcome in (Outcome.SIGN_IN, Outcome.NOT_FOUND):
            await self._refuse(scope, receive, send, door)
            return
        if door.outcome == Outcome.ENDED:
            await self._page(send, "ended", door)
            return
        target = None
        if door.outcome == Outcome.OPEN:
            target = await self._target(door)
        if target is None:  # no ready pod: starting, or ended since the door was cached
            await self._page_after_recheck(scope, receive, send, door, "starting")
            return
        forwarded = headers.request_headers(
            _str_headers(scope),
            blocked_cookies=_blocked_cookies(),
            client_ip=_client_ip(scope),
            scheme=scope.get("scheme", "http"),
            prefix=f"/w/{door.uid}/",
            from_trusted_proxy=_behind_trusted_proxy(_client_ip(scope)),
        )
        self._touch(door)
        outcome = await self._forward(scope, receive, send, target, forwarded, strip=True, sink=sink)
        if outcome == "unreachable":
            self._forget_target(door)
            await self._sync(access.forget_endpoint, door.namespace, door.service)
            await self._page_after_recheck(scope, receive, send, door, "unreachable")
        elif outcome == "timeout":
            await self._page(send, "timeout", door)

    async def _page_after_recheck(self, scope: Scope, receive: Receive, send: Send, door: Door, kind: str) -> None:
        """The `kind` page for a service whose pod did not answer, unless the database says, asked again
        past the cache, that it ended meanwhile (a cancel a moment ago: then the ended page) or that this
        person may no longer see it."""
        door = await self._door(_credential(scope), door.uid, fresh=True)
        if door.outcome in (Outcome.SIGN_IN, Outcome.NOT_FOUND):
            await self._refuse(scope, receive, send, door)
        else:
            await self._page(send, "ended" if door.outcome == Outcome.ENDED else kind, door)

    async def _pass_to_portal(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Development only: the portal's own pages, so one origin serves both (see devtools/run.py)."""
        client_ip = _client_ip(scope)
        forwarded = headers.portal_request_headers(
            _str_headers(scope),
            client_ip=client_ip,
            scheme=scope.get("scheme", "http"),
            from_trusted_proxy=_behind_trusted_proxy(client_ip),
        )
        parts = urlsplit(self.portal_upstream)
        target = (parts.hostname or "127.0.0.1", parts.port or 80)
        outcome = await self._forward(scope, receive, send, target, forwarded, strip=False, base=parts.path)
        if outcome is not None:
            await self._respond(send, 502, "<h1>The portal's web server is not answering yet.</h1>")

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        target: tuple[str, int],
        request_headers: list[headers.Header],
        *,
        strip: bool,
        base: str = "",
        sink: zerocopy.Sink | None = None,
    ) -> str | None:
        """Send the request to `target` (a pod's address, or the portal's in development) and stream the
        answer back. Returns None when an answer went out, else "unreachable" or "timeout" (nothing was
        sent: the caller shows a page)."""
        method = scope["method"]
        framing = _request_framing(scope)
        head = upstream.request_head(
            method, base.rstrip("/") + _full_path(scope), _outgoing_headers(request_headers, target, method, framing)
        )
        # The backend gets PROXY_RESPONSE_TIMEOUT seconds of silence: counted from the last upload chunk,
        # so a slow 10 GB upload is fine and a backend that never answers is not.
        limit = settings.PROXY_RESPONSE_TIMEOUT if strip else None
        outcome, answered = await self._exchange(receive, target, head, method, framing, limit)
        if answered is None:
            return outcome
        conn, response, uploading = answered
        reusable = False
        try:
            raw = _response_headers(response, target, strip=strip)
            await send({"type": "http.response.start", "status": response.status, "headers": _bytes_headers(raw)})
            reusable = await self._stream_back(conn, response, receive, send, uploading, sink)
        finally:
            await self._done_with(conn, uploading, reusable=reusable)
        return None

    async def _exchange(
        self,
        receive: Receive,
        target: tuple[str, int],
        head: bytes,
        method: str,
        framing: str | None,
        limit: float | None,
    ) -> tuple[str | None, tuple[upstream.Connection, upstream.Response, asyncio.Future | None] | None]:
        """Connect to `target`, send the request and read the answer's head: (None, (connection, answer,
        upload still running or None)), or (what went wrong as `_forward` returns it, None)."""
        progress = [time.monotonic()]
        retry = framing is None and method in IDEMPOTENT
        while True:
            try:
                conn, reused = await self._pool.connect(*target, settings.PROXY_CONNECT_TIMEOUT)
            except upstream.Unreachable as exc:  # the pod went away or is not listening yet: no traceback
                log.info("backend %s:%s unreachable: %s", *target, exc)
                return "unreachable", None
            try:
                response, uploading = await self._ask(conn, receive, head, method, framing, progress, limit)
                return None, (conn, response, uploading)
            except upstream.Unreachable as exc:
                conn.close()
                if reused and retry:
                    retry = False  # the pod closed a kept-alive connection just as we used it: once more
                    continue
                log.info("backend %s:%s gave no answer: %s", *target, exc)
                return "unreachable", None
            except TimeoutError:
                conn.close()
                return "timeout", None
            except upstream.BrowserGone:
                conn.close()
                return None, None  # nobody left to answer
            except BaseException:
                conn.close()
                raise

    async def _done_with(self, conn: upstream.Connection, uploading: asyncio.Future | None, *, reusable: bool) -> None:
        """Stop an upload still running (the pod answered before it ended); keep the connection for the next
        request when it ended cleanly, else close it."""
        if uploading is not None and not uploading.done():
            uploading.cancel()
            with contextlib.suppress(BaseException):
                await uploading
        if reusable:
            self._pool.release(conn)
        else:
            conn.close()

    async def _ask(
        self,
        conn: upstream.Connection,
        receive: Receive,
        head: bytes,
        method: str,
        framing: str | None,
        progress: list[float],
        limit: float | None,
    ) -> tuple[upstream.Response, asyncio.Future | None]:
        """Send the request (its body, if any, in a task that may still run when the answer comes) and wait
        for the answer's head: raises Unreachable, TimeoutError (`limit` seconds without progress), or
        BrowserGone."""
        try:
            await conn.send(head)
        except OSError as exc:
            raise upstream.Unreachable(f"sending the request failed: {exc}") from exc
        if framing is None:
            async with asyncio.timeout(limit):
                return await upstream.read_head(conn, method), None
        uploading = asyncio.ensure_future(
            upstream.upload(conn, receive, chunked=framing == "chunked", progress=progress)
        )
        answer = asyncio.ensure_future(upstream.read_head(conn, method))
        try:
            while not answer.done():
                await _wait_for_answer(answer, uploading, progress, limit)
            return answer.result(), uploading
        except BaseException:
            for task in (answer, uploading):
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(answer, uploading, return_exceptions=True)
            raise

    async def _stream_back(
        self,
        conn: upstream.Connection,
        response: upstream.Response,
        receive: Receive,
        send: Send,
        uploading: asyncio.Future | None,
        sink: zerocopy.Sink | None = None,
    ) -> bool:
        """Copy the response body as it comes (a large one of known length inside the kernel, through
        `sink`: proxy/zerocopy.py); stop as soon as the browser goes away (uvicorn's send would
        silently drop the rest, and an endless event stream would be read for nobody). Returns whether the
        connection to the pod ended cleanly at the end of the answer (it can then carry another)."""
        if uploading is None and response.length is not None and len(response.rest) == response.length:
            # The whole answer is in hand (most small requests): no tasks, one send.
            await send({"type": "http.response.body", "body": response.rest, "more_body": False})
            return response.keep_alive

        spliced = sink if uploading is None and _splices(sink, response) else None
        copying = asyncio.ensure_future(_copy_body(conn, response, send, spliced))
        watching = asyncio.ensure_future(_browser_gone(receive, uploading))
        try:
            await asyncio.wait({copying, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (copying, watching):
                task.cancel()
            for task in (copying, watching):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return _ended_cleanly(copying, uploading, response)

    # --- WebSocket -----------------------------------------------------------------------------------
    async def _websocket(self, scope: Scope, receive: Receive, send: Send, door: Door) -> None:
        connect = await receive()
        if connect["type"] != "websocket.connect":
            return
        target = await self._target(door) if door.outcome == Outcome.OPEN else None
        if target is None:
            await send({"type": "websocket.close", "code": 1008})
            return
        origin = headers.origin(*target)
        offered = headers.subprotocols(_str_headers(scope))
        forwarded = headers.request_headers(
            _str_headers(scope),
            blocked_cookies=_blocked_cookies(),
            client_ip=_client_ip(scope),
            scheme="https" if scope.get("scheme") == "wss" else "http",
            prefix=f"/w/{door.uid}/",
            websocket=True,
            from_trusted_proxy=_behind_trusted_proxy(_client_ip(scope)),
        )
        try:
            backend = await self.client.ws_connect(
                origin + _full_path(scope),
                headers=forwarded,
                protocols=offered,
                autoclose=False,
                autoping=True,
                max_msg_size=settings.PROXY_WS_MAX_MESSAGE_BYTES,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=10),
            )
        except (TimeoutError, aiohttp.ClientError, ConnectionError):
            self._forget_target(door)
            await self._sync(access.forget_endpoint, door.namespace, door.service)
            await send({"type": "websocket.close", "code": 1011})  # before accept: the handshake fails
            return
        self._touch(door)
        await send({"type": "websocket.accept", "subprotocol": backend.protocol})
        await self._pump(backend, receive, send, door)

    async def _pump(self, backend: aiohttp.ClientWebSocketResponse, receive: Receive, send: Send, door: Door) -> None:
        async def from_browser() -> None:
            while True:
                message = await receive()
                if message["type"] == "websocket.receive":
                    if message.get("bytes") is not None:
                        await backend.send_bytes(message["bytes"])
                    else:
                        await backend.send_str(message.get("text") or "")
                    self._touch(door)
                elif message["type"] == "websocket.disconnect":
                    code = message.get("code", 1000)
                    await backend.close(code=1000 if code in UNSENDABLE_CLOSE else code)
                    return

        async def from_backend() -> None:
            while True:  # not `async for`: it hides the CLOSE frame and with it the backend's close code
                message = await backend.receive()
                if message.type == aiohttp.WSMsgType.TEXT:
                    await send({"type": "websocket.send", "text": message.data})
                elif message.type == aiohttp.WSMsgType.BINARY:
                    await send({"type": "websocket.send", "bytes": message.data})
                elif message.type == aiohttp.WSMsgType.CLOSE:
                    code = message.data if isinstance(message.data, int) else 1000
                    await backend.close()
                    await send(
                        {
                            "type": "websocket.close",
                            "code": 1000 if code in UNSENDABLE_CLOSE else code,
                            "reason": message.extra or "",
                        }
                    )
                    return
                elif message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.ERROR):
                    break
            await send({"type": "websocket.close", "code": 1011, "reason": "The service closed the connection."})

        tasks = {asyncio.ensure_future(from_browser()), asyncio.ensure_future(from_backend())}
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if not backend.closed:
                with contextlib.suppress(Exception):
                    await backend.close()

    # --- SSH ----------------------------------------------------------------------------------------
    async def _ssh(self, scope: Scope, receive: Receive, send: Send, uid: str) -> None:
        """`/w/_ssh/<uid>`: a WebSocket carrying an SSH connection to the pod's sshd (proxy/ssh_tunnel.py).
        Opened with an API token only; whatever is refused is a 404 before the handshake, as for Open."""
        if scope["type"] != "websocket":
            await self._page(send, "not_found", None)
            return
        token = ssh_door.bearer(scope.get("headers", []))
        door = await self._sync(ssh_door.ssh_door, token, uid)
        if door.outcome != Outcome.OPEN:
            # websocket.http.response would say 404 outright; uvicorn turns a close before accept into 403,
            # which ssh-proxy reports the same way ("not found or not yours").
            await self._refuse_websocket(scope, send, *_door_refusal(door))
            return
        target = await self._target(door)
        try:
            if target is None:
                raise ConnectionRefusedError("no ready pod")
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(target[0], self._ssh_port, limit=ssh_tunnel.READ_CHUNK),
                settings.PROXY_CONNECT_TIMEOUT,
            )
        except (OSError, TimeoutError) as exc:
            await self._refuse_websocket(scope, send, 502, f"the pod's sshd is not reachable: {exc or 'timed out'}")
            return
        if (await receive())["type"] != "websocket.connect":
            writer.close()
            return
        await send({"type": "websocket.accept"})
        self._touch(door)

        async def still_open() -> bool:
            again = await self._sync(ssh_door.ssh_door, token, uid)
            return again.outcome == Outcome.OPEN

        await ssh_tunnel.pump(
            receive, send, reader, writer,
            still_open=still_open, recheck_seconds=settings.SSH_RECHECK_SECONDS, touch=lambda: self._touch(door),
        )  # fmt: skip

    async def _terminal(self, scope: Scope, receive: Receive, send: Send, uid: str) -> None:
        """`/w/<uid>/.gpuportal-terminal`: the page's terminal, signed in as for Open (the portal's session,
        the page's origin checked); the proxy logs into the pod's sshd itself (proxy/terminal.py)."""
        credential = _credential(scope)
        door = await self._door(credential, uid, fresh=True) if _origin_allowed(scope) else Door(Outcome.NOT_FOUND)
        if door.outcome != Outcome.OPEN:
            await self._refuse_websocket(scope, send, *_door_refusal(door))
            return
        target = await self._target(door)
        try:
            if target is None:
                raise ConnectionRefusedError("no ready pod")
            conn = await terminal.connect(target[0], self._ssh_port, uid, timeout=settings.PROXY_CONNECT_TIMEOUT * 3)
        except (OSError, TimeoutError, asyncssh.Error) as exc:
            await self._refuse_websocket(scope, send, 502, f"no shell from the pod's sshd: {exc or 'timed out'}")
            return
        if (await receive())["type"] != "websocket.connect":
            conn.close()
            return
        await send({"type": "websocket.accept"})
        self._touch(door)

        async def still_open() -> bool:
            again = await self._door(credential, uid, fresh=True)
            return again.outcome == Outcome.OPEN

        await terminal.pump(
            conn, receive, send,
            still_open=still_open, recheck_seconds=settings.SSH_RECHECK_SECONDS, touch=lambda: self._touch(door),
        )  # fmt: skip

    async def _refuse_websocket(self, scope: Scope, send: Send, status: int, why: str) -> None:
        """Refuse a WebSocket handshake with a plain HTTP status (ASGI's denial-response extension, which
        uvicorn has), else with a close before accept, which the client sees as 403. The one log line of a
        refusal is this one (proxy/handshake.py keeps uvicorn's own quiet)."""
        log.info('"WebSocket %s" %d: %s', scope.get("path", ""), status, why)
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008})
            return
        body = f"{status}\n".encode()
        head = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
        await send({"type": "websocket.http.response.start", "status": status, "headers": head})
        await send({"type": "websocket.http.response.body", "body": body})

    def _touch(self, door: Door) -> None:
        """Record activity (WebSocket messages count: a notebook's kernel channel carries all its work).
        Checked here first so that a busy connection does not queue a thread job per message."""
        now = time.monotonic()
        if now - self._touched.get(door.workload_id, -1e9) < settings.PROXY_ACTIVITY_WRITE_SECONDS:
            return
        self._touched[door.workload_id] = now
        asyncio.get_running_loop().run_in_executor(self._django, access.record_activity, door.workload_id)
