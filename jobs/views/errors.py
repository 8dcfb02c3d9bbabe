"""The portal's own page for a form Django's CSRF check refused (settings.CSRF_FAILURE_VIEW)."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.http import url_has_allowed_host_and_scheme


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """Refused: the form's page is older than the browser's CSRF cookie (signed in again elsewhere), or
    there is no cookie at all. Nothing was done; the way back is the page the form was on, when that is
    this site's, so the person can load it again and send it."""
    referer = request.headers.get("Referer", "")
    back = "/"
    if referer and url_has_allowed_host_and_scheme(referer, allowed_hosts={request.get_host()}):
        parts = urlsplit(referer)
        back = parts.path + (f"?{parts.query}" if parts.query else "")
    return render(request, "403_csrf.html", {"back": back}, status=403)
