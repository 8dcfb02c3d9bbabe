"""Sign in with the provider, its callback, and sign-out (of the provider too, where it offers it)."""

from __future__ import annotations

import logging
from urllib.parse import urlencode

import requests
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.base_client.errors import MismatchingStateError
from django.conf import settings
from django.contrib.auth import login, logout
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from identity.services import SignInRefused, provider, signin_complete, sso_enabled

log = logging.getLogger(__name__)
SESSION_NEXT = "identity.next"
SESSION_ID_TOKEN = "identity.id_token"  # noqa: S105 - a session key, not a secret


def _problem(request: HttpRequest, message: str, *, status: int = 400) -> HttpResponse:
    return render(request, "identity/problem.html", {"message": message}, status=status)


def sso_login(request: HttpRequest) -> HttpResponse:
    if not sso_enabled():
        raise Http404("Sign-in with an identity provider is not configured.")
    target = request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        request.session[SESSION_NEXT] = target
    callback = request.build_absolute_uri(reverse("sso_callback"))
    try:
        return provider().authorize_redirect(request, callback)
    except (requests.RequestException, AuthlibBaseError, ValueError, KeyError) as exc:
        log.warning("identity provider unreachable at sign-in: %s", exc)
        return _problem(
            request,
            f"{settings.OIDC_PROVIDER_NAME} cannot be reached right now, so sign-in through it is not possible. "
            "Please try again in a few minutes; administrators can still sign in with their password.",
            status=503,
        )


def _claims(token: dict) -> dict:
    """The ID token's claims, with the userinfo answer's added where the provider has one (groups and other
    claims are often only there)."""
    claims = dict(token.get("userinfo") or {})
    if settings.OIDC_USERINFO and provider().load_server_metadata().get("userinfo_endpoint"):
        extra = provider().userinfo(token=token)
        if extra.get("sub") == claims.get("sub"):
            claims = {**extra, **claims}
    return claims


def sso_callback(request: HttpRequest) -> HttpResponse:
    if not sso_enabled():
        raise Http404("Sign-in with an identity provider is not configured.")
    if request.GET.get("error"):
        return _problem(request, f"{settings.OIDC_PROVIDER_NAME} did not sign you in ({request.GET['error'][:100]}).")
    try:
        token = provider().authorize_access_token(request)
        claims = _claims(token)
    except MismatchingStateError:
        return _problem(request, "This sign-in link has expired or was opened in another browser. Please start again.")
    except (requests.RequestException, OSError) as exc:
        log.warning("identity provider unreachable at callback: %s", exc)
        return _problem(
            request, f"{settings.OIDC_PROVIDER_NAME} cannot be reached right now. Please try again.", status=503
        )
    except Exception as exc:  # Authlib and joserfc raise many types for a token that fails its checks
        log.warning("identity provider sign-in refused: %s: %s", type(exc).__name__, exc)
        return _problem(
            request,
            f"The answer from {settings.OIDC_PROVIDER_NAME} did not pass the portal's checks ({_why(exc)}). Please start again.",
        )
    if not claims.get("sub"):
        return _problem(request, f"{settings.OIDC_PROVIDER_NAME} sent no verified identity. Please start again.")
    try:
        user = signin_complete(claims=claims)
    except SignInRefused as exc:
        return _problem(request, str(exc), status=403)
    target = request.session.pop(SESSION_NEXT, "") or settings.LOGIN_REDIRECT_URL
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    request.session[SESSION_ID_TOKEN] = token.get("id_token", "")
    return redirect(target)


def _why(exc: Exception) -> str:
    """Which check failed, in words (Authlib and joserfc name the claim in their messages)."""
    text = f"{type(exc).__name__} {exc}".lower()
    for marker, reason in (
        ("signature", "wrong signature"),
        ("expired", "expired"),
        ("'exp'", "expired"),
        ("'nonce'", "wrong nonce"),
        ("'aud'", "wrong audience"),
        ("'azp'", "wrong audience"),
        ("'iss'", "wrong issuer"),
    ):
        if marker in text:
            return reason
    return "invalid token"


@require_POST
def sso_logout(request: HttpRequest) -> HttpResponse:
    """End the portal session; then the provider's, when the person came through it and it offers that."""
    id_token = request.session.get(SESSION_ID_TOKEN, "")
    logout(request)
    if id_token and sso_enabled() and settings.OIDC_END_PROVIDER_SESSION:
        try:
            end = provider().load_server_metadata().get("end_session_endpoint")
        except Exception:  # a provider that is down must not keep anyone signed in to the portal
            end = None
        if end:
            back = request.build_absolute_uri(reverse(settings.LOGOUT_REDIRECT_URL))
            query = urlencode(
                {"id_token_hint": id_token, "post_logout_redirect_uri": back, "client_id": settings.OIDC_CLIENT_ID}
            )
            return redirect(f"{end}?{query}")
    return redirect(settings.LOGOUT_REDIRECT_URL)
