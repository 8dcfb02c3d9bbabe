"""A box a page refreshes by itself (htmx) after the session ended.

Sign-in-required views answer a signed-out request with a redirect to the sign-in page; htmx follows it and
swaps the whole sign-in page, top bar and all, into the box (the launch outlook, a workload's state, logs,
events). Instead the answer is one line saying so, with a link that signs in again in a new tab (back to the
same page there), so that this page and what was typed in it stay; its forms then go through (portal.js
sends the new CSRF secret). The answer carries SIGNED_OUT_HEADER, and portal.js puts the line just before
the box instead of in its place: the box keeps what it last showed (a workload's state and times, the
dashboard), and the first answer after signing in again replaces the box and takes the line away. Without
portal.js, htmx swaps the line into the box as before.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import quote, urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme

SIGNED_OUT_HEADER = "GPUPortal-Signed-Out"  # read by static/js/portal.js


class SignedOutPartialMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code == 302
            and request.headers.get("HX-Request") == "true"
            and urlsplit(response.get("Location", "")).path == resolve_url(settings.LOGIN_URL)
        ):
            return self._signed_out(request)
        return response

    @staticmethod
    def _signed_out(request: HttpRequest) -> HttpResponse:
        page = request.headers.get("HX-Current-URL", "")
        if page and url_has_allowed_host_and_scheme(page, allowed_hosts={request.get_host()}):
            parts = urlsplit(page)
            back = parts.path + (f"?{parts.query}" if parts.query else "")
        else:
            back = "/"
        sign_in = f"{resolve_url(settings.LOGIN_URL)}?next={quote(back, safe='/')}"
        response = HttpResponse(
            format_html(
                '<p class="notice waiting" role="alert">You are signed out, so this is not up to date. '
                '<a href="{}" target="_blank" rel="noopener">Sign in again in a new tab</a>, then come back: '
                "this page keeps what you typed, and its buttons work again.</p>",
                sign_in,
            )
        )
        response[SIGNED_OUT_HEADER] = "1"
        return response
