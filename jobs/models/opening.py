"""Handoff tickets to a service's own origin, redeemed once (PROXY_ORIGIN; jobs.services.opening)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class RedeemedTicket(models.Model):
    """The nonce of a handoff ticket the proxy has exchanged for its cookie. The ticket itself is signed
    and expires by itself; this row is what makes it single-use (a second insert of the nonce fails), and
    it may be deleted once the ticket would have expired anyway."""

    nonce = models.CharField(max_length=32, primary_key=True)
    redeemed_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"ticket {self.nonce[:8]}… redeemed {self.redeemed_at:%Y-%m-%d %H:%M:%S}"
