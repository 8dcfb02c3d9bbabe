"""Idempotent creates: a request retried with the same Idempotency-Key gets the first response again.

The record and the workload are written in one transaction. A concurrent duplicate blocks on the
record's unique index until the first request commits, then reads and replays its response, so a key
never yields two workloads, whatever the timing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from api.models import IdempotencyRecord

MAX_KEY_LENGTH = 255


class KeyReused(Exception):
    """The key was used before for a different request."""


@dataclass(frozen=True)
class Outcome:
    status_code: int
    body: Any
    replayed: bool


def request_fingerprint(payload: Any) -> str:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def retention() -> timedelta:
    return timedelta(seconds=settings.API_IDEMPOTENCY_TTL_SECONDS)


def create_once(*, user, key: str, fingerprint: str, perform: Callable[[], tuple[int, Any]]) -> Outcome:
    """Run `perform` at most once per (user, key); exceptions from it store nothing and propagate."""
    # Records outlive any sensible retry by far; the caller's expired ones go here, so the table stays small.
    IdempotencyRecord.objects.filter(user=user, created_at__lt=timezone.now() - retention()).delete()
    inserted = False
    try:
        with transaction.atomic():
            record = IdempotencyRecord.objects.create(
                user=user, key=key, request_hash=fingerprint, status_code=0, response_body={}
            )
            inserted = True
            status_code, body = perform()
            record.status_code, record.response_body = status_code, body
            record.save(update_fields=["status_code", "response_body"])
            return Outcome(status_code, body, replayed=False)
    except IntegrityError:
        if inserted:
            raise
    existing = IdempotencyRecord.objects.get(user=user, key=key)
    if existing.request_hash != fingerprint:
        raise KeyReused
    return Outcome(existing.status_code, existing.response_body, replayed=True)


def idempotency_prune(*, now=None) -> int:
    """Delete every expired record (beat, hourly): people who never create again leave theirs behind."""
    cutoff = (now or timezone.now()) - retention()
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted
