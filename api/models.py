"""API tokens (stored hashed, shown once) and idempotency records for retried creates."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    """A personal token. Only a SHA-256 of the secret is kept; the secret itself is shown once."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    # The first characters of the token, kept in clear so a person can tell their tokens apart.
    prefix = models.CharField(max_length=16, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    def is_active(self, now=None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class IdempotencyRecord(models.Model):
    """The response to a create made with an Idempotency-Key, replayed when the same request comes again."""

    # No index of its own: one_record_per_user_and_key begins with the user.
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False)
    key = models.CharField(max_length=255)
    request_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="one_record_per_user_and_key")]

    def __str__(self) -> str:
        return f"{self.user_id}:{self.key} -> {self.status_code}"
