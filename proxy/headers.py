"""What crosses the proxy in headers, both ways: pure functions over (name, value) lists.

- Hop-by-hop headers (RFC 9110 7.6.1): `Connection`, every header `Connection` names, and the fixed set
  below, belong to one connection and are never forwarded. `TE: trailers` is the one exception a proxy may
  pass on; we do not forward trailers, so TE goes too.
- The portal's own cookies (session, CSRF, and anything named in settings) never reach the proxied app,
  and the app can never set, overwrite or delete them: a notebook must not be able to read the researcher's
  portal session or plant a CSRF token.
- The backend sees where the request came from (`X-Forwarded-*`) and the prefix it is served under. The
  proxy writes these itself: a client's own `X-Forwarded-*` are dropped unless it is a trusted proxy
  (PROXY_TRUSTED_PROXIES; the chart gives it the same list as the portal's TRUSTED_PROXIES), whose chain is kept and extended.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from http.cookies import CookieError, SimpleCookie
from urllib.parse import SplitResult, urlsplit

Header = tuple[str, str]

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",  # not standard, still sent by some clients
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Set by the proxy itself: a client must not forge them, and the backend's would be about its own hop.
FORWARDED = frozenset({"forwarded", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "x-forwarded-prefix"})


def connection_tokens(headers: Iterable[Header]) -> set[str]:
    """Header names listed in `Connection` (lower case): hop-by-hop for this message only."""
    named: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            named.update(token.strip().lower() for token in value.split(",") if token.strip())
    return named


def _end_to_end(headers: list[Header]) -> list[Header]:
    drop = HOP_BY_HOP | connection_tokens(headers)
    return [(name, value) for name, value in headers if name.lower() not in drop]


def strip_cookies(cookie_header: str, blocked: frozenset[str]) -> str:
    """The `Cookie` header without the named cookies (order and the rest kept byte for byte)."""
    kept = []
    for part in cookie_header.split(";"):
        name = part.split("=", 1)[0].strip()
        if part.strip() and name not in blocked:
            kept.append(part.strip())
    return "; ".join(kept)


def sets_blocked_cookie(set_cookie: str, blocked: frozenset[str]) -> bool:
    """Whether a `Set-Cookie` value would set (or delete) one of the portal's cookies. Unparseable ones
    count as blocked: a browser may read them more leniently than we do."""
    name = set_cookie.split("=", 1)[0].strip()
    if not name or name in blocked:
        return True
    try:
        SimpleCookie().load(set_cookie.split(";", 1)[0])
    except CookieError:
        return True
    return False


def _forwarded_value(lower: str, value: str, *, blocked_cookies: frozenset[str], websocket: bool) -> str | None:
    """A browser's header value as it goes to the backend; None leaves the header out (the proxy writes the
    forwarding headers itself, a cookie can be all portal cookies)."""
    if lower in FORWARDED:
        return None
    if websocket and lower.startswith("sec-websocket-"):
        # The handshake's headers are the client library's to write; Sec-WebSocket-Protocol is passed to it
        # as its protocol list.
        return None
    if lower == "cookie":
        return strip_cookies(value, blocked_cookies) or None
    return value


def request_headers(
    headers: list[Header],
    *,
    blocked_cookies: frozenset[str],
    client_ip: str,
    scheme: str,
    prefix: str,
    websocket: bool = False,
    from_trusted_proxy: bool = False,
) -> list[Header]:
    """Headers to send to the backend for a browser's request.

    `Host` is kept as the browser sent it (apps such as Jupyter compare it with `Origin` for WebSockets);
    for a WebSocket the handshake headers are the client library's to write.
    """
    out: list[Header] = []
    host = ""
    prior_for = ""
    for name, value in _end_to_end(headers):
        lower = name.lower()
        if lower == "host":
            host = value
        if lower == "x-forwarded-for" and from_trusted_proxy:
            prior_for = value  # a trusted proxy in front: its chain goes on
        kept = _forwarded_value(lower, value, blocked_cookies=blocked_cookies, websocket=websocket)
        if kept is not None:
            out.append((name, kept))
    out.append(("X-Forwarded-For", f"{prior_for}, {client_ip}" if prior_for else client_ip))
    out.append(("X-Forwarded-Proto", scheme))
    if host:
        out.append(("X-Forwarded-Host", host))
    out.append(("X-Forwarded-Prefix", prefix.rstrip("/")))
    return out


def portal_request_headers(
    headers: list[Header], *, client_ip: str, scheme: str, from_trusted_proxy: bool
) -> list[Header]:
    """Headers to send to the portal's own web for a request passed through (one origin, no ingress):
    end to end headers as they came, and the forwarding headers written by the proxy. A client's own
    `X-Forwarded-For`/`-Proto`/`-Host`/`Forwarded` are dropped, so the portal (which believes this proxy)
    counts sign-in failures by the address that really connected; from a trusted proxy in front they are
    kept and the chain extended."""
    kept = _end_to_end(headers)
    out = [(name, value) for name, value in kept if name.lower() not in FORWARDED]
    if from_trusted_proxy:
        prior = [v for n, v in kept if n.lower() == "x-forwarded-for"]
        proto = [v for n, v in kept if n.lower() == "x-forwarded-proto"]
        chain = ", ".join([*prior, client_ip])
        out += [("X-Forwarded-For", chain), ("X-Forwarded-Proto", proto[-1] if proto else scheme)]
    else:
        out += [("X-Forwarded-For", client_ip), ("X-Forwarded-Proto", scheme)]
    return out


def response_headers(headers: list[Header], *, blocked_cookies: frozenset[str], backend_origin: str) -> list[Header]:
    """Headers to send to the browser for the backend's response.

    A `Location` pointing at the backend's own address (an app that does not know it is proxied) becomes
    a path on the portal; `Set-Cookie` for the portal's cookies is dropped, and so is
    `Service-Worker-Allowed` (a worker registered with scope `/` would control the portal's pages).
    """
    out: list[Header] = []
    for name, value in _end_to_end(headers):
        lower = name.lower()
        if lower == "set-cookie" and sets_blocked_cookie(value, blocked_cookies):
            continue
        if lower == "service-worker-allowed":
            continue  # a service worker's scope stays under the service's path (/w/<uid>/), never the origin

        if lower == "location":
            value = relative_location(value, backend_origin)
        out.append((name, value))
    return out


def authority(host: str, port: int) -> str:
    """`host:port` as a URL and a Host header write it: an IPv6 address in brackets (`[fd00::7]:8888`), as
    a dual-stack cluster's EndpointSlices give them bare."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def origin(host: str, port: int) -> str:
    """The pod's origin as a URL begins (`http://[fd00::7]:8888`)."""
    return f"http://{authority(host, port)}"


def relative_location(location: str, backend_origin: str) -> str:
    """`http://10.0.0.7:8888/w/x/tree` -> `/w/x/tree` when it names the backend; anything else unchanged."""
    parts = urlsplit(location)
    if parts.scheme and f"{parts.scheme}://{parts.netloc}".lower() == backend_origin.lower():
        return (
            parts.path + (f"?{parts.query}" if parts.query else "") + (f"#{parts.fragment}" if parts.fragment else "")
        )
    return location


def subprotocols(headers: list[Header]) -> list[str]:
    """The WebSocket subprotocols a browser offered, in its order."""
    offered: list[str] = []
    for name, value in headers:
        if name.lower() == "sec-websocket-protocol":
            offered.extend(p.strip() for p in value.split(",") if p.strip())
    return offered


def _page_origin(origin: str, *, https_only: bool) -> SplitResult | None:
    """The Origin's parts when it names a web page that may be trusted at all (None: refuse)."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or origin.strip().lower() == "null":
        return None
    if https_only and parts.scheme != "https" and not _loopback(parts.hostname or ""):
        return None  # an http page could be anyone's on the way; loopback pages are secure contexts
    return parts


def websocket_origin_allowed(origin: str | None, host: str, *, portal_origin: str, https_only: bool) -> bool:
    """Whether a WebSocket handshake's `Origin` may open a service with the person's cookie.

    Browsers always send Origin on a WebSocket handshake and cookies go with it whatever page opened it,
    so a page on another port, a sibling subdomain or another service's origin could act as the person.
    Allowed: the origin the request came to (Origin's host and port equal the `Host` header: the
    portal's pages in one-origin mode, the service's own pages on an apps' origin), and the portal's own
    origin (`portal_origin`, SITE_URL) where services share it; with secure cookies only https pages.
    A client that sends no Origin is no browser and carries no ambient cookie of someone else's: allowed.
    `https_only` (Secure cookies): only https pages, and http ones on loopback, which browsers also treat
    as secure (a development portal on http://localhost)."""
    if origin is None:
        return True
    parts = _page_origin(origin, https_only=https_only)
    if parts is None:
        return False
    given = f"{parts.scheme}://{parts.netloc}".lower()
    if portal_origin and given == portal_origin.lower().rstrip("/"):
        return True
    return parts.netloc.lower() == host.strip().lower()


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
