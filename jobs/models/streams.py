"""Followed log streams being served right now, counted across every web process and replica."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class LogFollowSlot(models.Model):
    """One followed log stream. Deleted when the stream closes; a row whose `expires_at` has passed was
    left by a process that died while serving it and no longer counts (it is deleted at the next claim)."""

    # No database constraint: a slot is short-lived bookkeeping, and deleting a person must not wait for it.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    started_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"log stream of user {self.user_id} until {self.expires_at:%H:%M:%S}"
