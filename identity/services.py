"""Who a person is in the portal after the provider vouched for them, and the provider's client."""

from __future__ import annotations

import hashlib
import re
from functools import cache
from typing import Any

from authlib.integrations.django_client import OAuth
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from identity.models import ProviderAccount
from identity.teams import claim_values, memberships_sync


class SignInRefused(Exception):
    """The provider vouched for someone the portal will not let in (a disabled account, no subject)."""


def sso_enabled() -> bool:
    return bool(settings.OIDC_ISSUER and settings.OIDC_CLIENT_ID)


@cache
def provider() -> Any:
    """Authlib's client for the provider: discovery from the issuer, authorization code with PKCE (S256)."""
    oauth = OAuth()
    return oauth.register(
        "idp",
        client_id=settings.OIDC_CLIENT_ID,
        client_secret=settings.OIDC_CLIENT_SECRET,
        server_metadata_url=settings.OIDC_ISSUER.rstrip("/") + "/.well-known/openid-configuration",
        client_kwargs={"scope": " ".join(settings.OIDC_SCOPES), "code_challenge_method": "S256", "timeout": 10},
    )


def _username_for(claims: dict[str, Any], subject: str) -> str:
    wanted = next(iter(sorted(claim_values(claims, settings.OIDC_USERNAME_CLAIM))), "") or subject
    base = re.sub(r"[^\w.@+-]", "-", wanted)[:130] or "user"
    users = get_user_model().objects
    if not users.filter(username=base).exists():
        return base
    # The name belongs to someone else (a local account): never merge by name, keep them apart.
    return f"{base}-{hashlib.sha256(subject.encode()).hexdigest()[:8]}"


def without_unverified_email(claims: dict[str, Any]) -> dict[str, Any]:
    """The claims without `email` unless the provider says it verified it (`email_verified` true): an
    address anyone can type at some providers must neither become the person's portal e-mail (where
    notifications go) nor match a team rule on `email`."""
    if claims.get("email_verified") in (True, "true"):
        return claims
    return {key: value for key, value in claims.items() if key != "email"}


@transaction.atomic
def signin_complete(*, claims: dict[str, Any]) -> Any:
    """The portal user for verified claims: created on first sign-in, e-mail and teams kept in step."""
    claims = without_unverified_email(claims)
    issuer, subject = str(claims.get("iss") or settings.OIDC_ISSUER), str(claims.get("sub") or "")
    if not subject:
        raise SignInRefused("The identity provider did not say who you are (no subject).")
    email = next(iter(claim_values(claims, settings.OIDC_EMAIL_CLAIM)), "")
    account = ProviderAccount.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
    if account is None:
        user = get_user_model().objects.create_user(username=_username_for(claims, subject), email=email)
        user.set_unusable_password()
        user.save(update_fields=["password"])
        try:
            with transaction.atomic():
                account = ProviderAccount.objects.create(user=user, issuer=issuer, subject=subject)
        except IntegrityError as exc:  # a second tab signing in at the same moment made it first
            raise SignInRefused("Your account was being created by another sign-in; please try again.") from exc
    user = account.user
    if not user.is_active:
        raise SignInRefused("Your portal account is disabled. Ask an administrator.")
    if email and user.email != email:
        user.email = email
        user.save(update_fields=["email"])
    ProviderAccount.objects.filter(id=account.id).update(last_sign_in_at=timezone.now())
    memberships_sync(user=user, claims=claims)
    return user
