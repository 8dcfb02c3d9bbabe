"""Agent tokens: issued once, stored as a SHA-256 digest, looked up by digest.

A token is 32 random bytes, so a fast digest is enough (nothing to brute-force); a slow password hash
would cost every report a few hundred milliseconds for no gain.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from telemetry.models import AgentToken

log = logging.getLogger(__name__)

TOKEN_PREFIX = "gpa_"  # noqa: S105 - a marker, not a secret
# last_used_at is informative; writing it on every report would be one UPDATE per node every 5 s.
_TOUCH_EVERY = timedelta(minutes=1)


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def agent_token_issue(*, name: str, node: str, by=None) -> tuple[AgentToken, str]:
    """Create a token for one node; returns the row and the token itself, which is never stored or shown
    again. A node's earlier token is revoked: one node, one live token. For agents outside the cluster
    (and the local cluster's simulator); agents in pods use their own service-account token instead."""
    if not node:
        raise ValueError("node: an agent token speaks for one node; name it")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        AgentToken.objects.filter(node_name=node, revoked_at__isnull=True).update(revoked_at=timezone.now())
        row = AgentToken.objects.create(
            name=name,
            node_name=node,
            prefix=token[:12],
            token_hash=token_digest(token),
            created_by=by if by and by.pk else None,
        )
    return row, token


def agent_token_may_report(row: AgentToken, node: str) -> bool:
    """Whether the token may speak for `node`: only the node it was issued for. A token issued without one
    (before every token had to name its node) speaks for none; issue a node's own token to replace it."""
    return bool(row.node_name) and row.node_name == node


def agent_token_revoke(*, token: AgentToken) -> None:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])


def agent_token_check(token: str) -> AgentToken | None:
    """The active token row for `token`, or None."""
    if not token or len(token) > 200:
        return None
    row = AgentToken.objects.filter(token_hash=token_digest(token), revoked_at__isnull=True).first()
    if row is not None:
        now = timezone.now()
        if row.last_used_at is None or now - row.last_used_at > _TOUCH_EVERY:
            AgentToken.objects.filter(id=row.id).update(last_used_at=now)
    return row
