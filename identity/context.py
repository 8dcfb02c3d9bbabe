"""What the sign-in page needs to know about the provider (a template context processor)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from identity.services import sso_enabled


def sign_in(request: HttpRequest) -> dict[str, object]:
    enabled = sso_enabled()
    return {
        "sso_enabled": enabled,
        "sso_name": settings.OIDC_PROVIDER_NAME,
        # ?password=1 keeps the password form reachable for break-glass administrators.
        "password_login": not enabled or settings.OIDC_PASSWORD_LOGIN or request.GET.get("password") == "1",
    }
