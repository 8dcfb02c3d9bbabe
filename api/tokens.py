"""Personal API tokens: issued once in clear, kept only as a SHA-256 digest, revocable."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from api.models import ApiToken
from jobs import sql as jobs_sql

TOKEN_PREFIX = "gpp_"  # noqa: S105 (a public marker, not a secret)
SHOWN_PREFIX_CHARS = 12
# Writing last_used_at on every request would turn each read into a write; once a minute is enough.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def digest(raw: str) -> str:
    # The secret has 256 bits of entropy, so a plain hash is as strong as a slow one and far cheaper.
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    token: ApiToken
    raw: str  # the only time the secret exists in clear


class TooManyTokens(ValueError):
    """The person holds the most active tokens allowed; the message says so."""


def token_create(*, user, name: str, expires_at=None) -> IssuedToken:
    """Issue a token; it expires after API_TOKEN_DEFAULT_DAYS unless `expires_at` says otherwise (a
    forgotten token on an old laptop should not work forever)."""
    name = name.strip()
    if not name:
        raise ValueError("A token needs a name.")
    now = timezone.now()
    with transaction.atomic():
        # Locking the person's row serializes their concurrent creates, so the cap holds exactly.
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        active = ApiToken.objects.filter(user=user, revoked_at=None).exclude(expires_at__lte=now).count()
        if active >= settings.API_MAX_TOKENS_PER_USER:
            raise TooManyTokens(
                f"You have {active} active tokens, the most allowed; revoke one you no longer use first."
            )
        raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = ApiToken.objects.create(
            user=user,
            name=name[:100],
            prefix=raw[:SHOWN_PREFIX_CHARS],
            digest=digest(raw),
            expires_at=expires_at or now + timedelta(days=settings.API_TOKEN_DEFAULT_DAYS),
        )
    return IssuedToken(token=token, raw=raw)


def token_revoke(*, token: ApiToken, by) -> bool:
    """Revoke once; returns False when it was already revoked."""
    changed = ApiToken.objects.filter(id=token.id, revoked_at=None).update(revoked_at=timezone.now(), revoked_by=by)
    token.refresh_from_db(fields=["revoked_at", "revoked_by"])
    return bool(changed)


_LOOKUP_SQL = """
SELECT {token_columns}, {user_columns}
FROM {token} t JOIN {user} u ON u.{user_pk} = t.user_id
WHERE t.digest = %s
"""


def _token_with_user(token_digest: str) -> ApiToken | None:
    """The token with this digest and its user, as `select_related("user")` gives it, in fixed SQL
    (`jobs.sql`): every API request asks, and the ORM spent more CPU building the query than answering."""
    user_model = get_user_model()
    quote = connection.ops.quote_name
    sql = _LOOKUP_SQL.format(
        token_columns=jobs_sql.select_list(ApiToken, "t"),
        user_columns=jobs_sql.select_list(user_model, "u"),
        token=quote(ApiToken._meta.db_table),
        user=quote(user_model._meta.db_table),
        user_pk=quote(user_model._meta.pk.column),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [token_digest])
        row = cursor.fetchone()
    if row is None:
        return None
    n = jobs_sql.width(ApiToken)
    token = jobs_sql.instance(ApiToken, row[:n])
    token.user = jobs_sql.instance(user_model, row[n:])
    return token


def token_authenticate(raw: str) -> ApiToken | None:
    """The active token with this secret, with its user loaded; None for anything else."""
    if not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return None
    token = _token_with_user(digest(raw))
    now = timezone.now()
    if token is None or not token.is_active(now) or not token.user.is_active:
        return None
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        with transaction.atomic():
            ApiToken.objects.filter(id=token.id).update(last_used_at=now)
        token.last_used_at = now
    return token
