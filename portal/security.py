"""Request-level security: which proxies' forwarding headers are believed, the client address sign-in
throttling counts by, and the Content-Security-Policy every response carries.

X-Forwarded-Proto and X-Forwarded-For are only as true as whoever set them: from a client connecting
directly they are whatever it wants (claiming https to get secure-only behaviour, or another address to
dodge a lockout). They are believed only from the addresses in TRUSTED_PROXIES and dropped otherwise.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
from collections.abc import Callable
from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse

FORWARDED_HEADERS = ("HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_HOST", "HTTP_FORWARDED")


@lru_cache(maxsize=16)
def _networks(entries: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def is_trusted_proxy(address: str, trusted: list[str] | None = None) -> bool:
    """Whether `address` is one of the proxies in `trusted` (by default TRUSTED_PROXIES: in front of the web)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    entries = settings.TRUSTED_PROXIES if trusted is None else trusted
    return any(ip in network for network in _networks(tuple(entries)))


def client_address(request: HttpRequest) -> str:
    """The client's address: the peer, or, behind trusted proxies, the nearest hop they did not add."""
    peer = request.META.get("REMOTE_ADDR", "")
    if not is_trusted_proxy(peer):
        return peer
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
    for hop in reversed(hops):
        if not is_trusted_proxy(hop):
            return hop
    return hops[0] if hops else peer


def axes_client_ip(request: HttpRequest) -> str:
    """AXES_CLIENT_IP_CALLABLE: failed sign-ins are counted per this address."""
    return client_address(request)


class TrustedProxyMiddleware:
    """First in the chain: forwarding headers from anyone but a trusted proxy are removed, so that
    SECURE_PROXY_SSL_HEADER and everything after it see only what a trusted proxy said."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not is_trusted_proxy(request.META.get("REMOTE_ADDR", "")):
            for header in FORWARDED_HEADERS:
                request.META.pop(header, None)
        return self.get_response(request)


class StyleNonce:
    """A per-response nonce for <style> elements a page's own script must create (xterm.js writes its
    theme and cell sizes into <style> elements it makes at run time; no static sheet can hold them). It is
    added to style-src only if the page used it (`{{ request.csp_nonce }}`), so other pages keep the plain
    policy; scripts get no nonce: script-src stays 'self'."""

    def __init__(self) -> None:
        self.value = secrets.token_urlsafe(18)
        self.used = False

    def __str__(self) -> str:
        self.used = True
        return self.value


class ContentSecurityPolicyMiddleware:
    """Every page's scripts are static files of this site, so no inline or foreign script may run: an
    injected <script> or event handler is refused by the browser even if an escaping bug let it in."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        nonce = request.csp_nonce = StyleNonce()
        response = self.get_response(request)
        if settings.CONTENT_SECURITY_POLICY and "Content-Security-Policy" not in response:
            policy = with_sign_in_provider(settings.CONTENT_SECURITY_POLICY)
            response["Content-Security-Policy"] = with_style_nonce(policy, nonce.value) if nonce.used else policy
        return response


def with_style_nonce(policy: str, nonce: str) -> str:
    """style-src with this response's nonce beside its sources (a policy without style-src is left as is)."""
    directives = [part.strip() for part in policy.split(";")]
    for i, directive in enumerate(directives):
        if directive.split(" ", 1)[0].lower() == "style-src":
            directives[i] = f"{directive} 'nonce-{nonce}'"
    return "; ".join(d for d in directives if d)


def axes_username(request: HttpRequest, credentials: dict | None) -> str:
    """AXES_USERNAME_CALLABLE: the username the failure is counted for, as a database can store it (a
    10,000-character or NUL-bearing "username" is a failed sign-in, not a server error)."""
    raw = (credentials or {}).get("username") or request.POST.get("username") or ""
    return str(raw).replace("\x00", "")[:150]


def with_sign_in_provider(policy: str) -> str:
    """Signing out is a form whose answer redirects to the identity provider's end-session page, and
    browsers apply form-action to that redirect: allow the provider's origin there, nothing more."""
    issuer = urlsplit(settings.OIDC_ISSUER) if settings.OIDC_ISSUER else None
    if not issuer or not issuer.netloc or "form-action " not in policy:
        return policy
    origin = f"{issuer.scheme}://{issuer.netloc}"
    return policy.replace("form-action ", f"form-action {origin} ", 1)


class NulQueryMiddleware:
    """A query parameter holding a NUL character is refused (400 naming it): no page or endpoint has a use
    for one, and PostgreSQL cannot compare text holding one, so a filter given one (an admin list's
    `?state__exact=%00`, its autocomplete's `term`, an API filter) was a 500 where it reached a query."""

    MESSAGE = "May not contain NUL characters."

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "%00" in request.META.get("QUERY_STRING", ""):
            bad = sorted({name for name, values in request.GET.lists() for v in [name, *values] if "\x00" in v})
            if bad:
                return _nul_refused(request, bad, self.MESSAGE)
        return self.get_response(request)


def _nul_refused(request: HttpRequest, names: list[str], message: str) -> HttpResponse:
    shown = [name.replace("\x00", "\\0") for name in names]
    if request.path.startswith("/api/"):  # the API's error format (api/README.md, Errors)
        body = {"error": {"status": 400, "code": "invalid", "message": "The request is not valid.",
                          "fields": {name: [message] for name in shown}}}  # fmt: skip
        return HttpResponse(json.dumps(body), status=400, content_type="application/json")
    return HttpResponse(f"Bad request: {', '.join(shown)}: {message}\n", status=400, content_type="text/plain")
