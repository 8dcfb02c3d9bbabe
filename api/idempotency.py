"""Idempotent creates: a request retried with the same Idempotency-Key gets the first response again.

The record and the workload are written in one transaction, the record last, in one statement with the
response; the REST create sends that INSERT inside the statement that takes the queue caps' locks, its last
but one (jobs.services.submission.queue_caps.Alongside), so the record costs no round trip of its own. A
concurrent duplicate blocks on the record's unique index until the first request commits,
then is rolled back and replays the first response, so a key never yields two workloads, whatever the
timing. Expired records are pruned hourly by beat (`idempotency_prune`); one still there when its key
comes again is overwritten as if it were gone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from api.models import IdempotencyRecord
from jobs.services.submission.queue_caps import Alongside

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


class _Taken(Exception):
    """The key's record was stored by an earlier request: this one is undone and answered from it."""


# One statement stores the record: a live record under the key is left alone (nothing returned), an
# expired one is overwritten as if it were not there.
_RECORD_SQL = """
INSERT INTO {table} AS r (user_id, key, request_hash, status_code, response_body, created_at)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (user_id, key) DO UPDATE
    SET request_hash = excluded.request_hash, status_code = excluded.status_code,
        response_body = excluded.response_body, created_at = excluded.created_at
    WHERE r.created_at < %s
RETURNING id
"""


def create_once(
    *,
    user,
    key: str,
    fingerprint: str,
    perform: Callable[[], tuple[int, Any]],
    before_commit: Callable[[Alongside], None] | None = None,
) -> Outcome:
    """Run `perform` at most once per (user, key); exceptions from it store nothing and propagate, unless
    the key's first request succeeded (then its response is replayed, whatever this attempt met).

    `perform` runs first and the record is written after it, in the same transaction, with its response:
    one statement. A duplicate running at the same time waits on the record's unique index (or on the
    intake's locks) until the first commits, then finds the record, is rolled back and replays it.
    `before_commit` runs last in the transaction and is handed the record's write (an Alongside) to send
    with its own first statement, which must call its `then` (it stops the attempt when a live record
    holds the key, before anything else is checked); an exception from it undoes all of it. Without it the
    record is a statement of its own."""
    for _ in range(2):  # a second time only if a live record expired between the two statements below
        now = timezone.now()
        try:
            with transaction.atomic():
                status_code, body = perform()
                told: list[bool] = []
                record = _record_write(user, key, fingerprint, status_code, body, now=now, told=told)
                if before_commit is None:
                    _record_store(record)
                else:
                    before_commit(record)
                if not told:
                    raise RuntimeError("before_commit did not send the idempotency record")
                return Outcome(status_code, body, replayed=False)
        except _Taken:
            pass
        except Exception:
            existing = _live_record(user, key, now=timezone.now())
            if existing is None:
                raise
            return _replay(existing, fingerprint)
        existing = _live_record(user, key, now=now)
        if existing is not None:
            return _replay(existing, fingerprint)
    raise RuntimeError("idempotency record neither stored nor found")


def _record_write(user, key: str, fingerprint: str, status_code: int, body: Any, *, now, told: list[bool]) -> Alongside:
    """The statement that stores the response under the key; its `then` raises _Taken when it stored
    nothing (a live record holds the key already), and notes in `told` that it was sent."""
    field = IdempotencyRecord._meta.get_field("response_body")
    sql = _RECORD_SQL.format(table=connection.ops.quote_name(IdempotencyRecord._meta.db_table))
    params = [user.pk, key, fingerprint, status_code, field.get_db_prep_save(body, connection), now, now - retention()]

    def then(stored: bool) -> None:
        told.append(stored)
        if not stored:
            raise _Taken

    return Alongside(sql=sql, params=params, then=then)


def _record_store(record: Alongside) -> None:
    """The record's write as a statement of its own."""
    with connection.cursor() as cursor:
        cursor.execute(record.sql, list(record.params))
        stored = cursor.fetchone() is not None
    record.then(stored)


def _live_record(user, key: str, *, now) -> IdempotencyRecord | None:
    return IdempotencyRecord.objects.filter(user=user, key=key, created_at__gte=now - retention()).first()


def _replay(record: IdempotencyRecord, fingerprint: str) -> Outcome:
    if record.request_hash != fingerprint:
        raise KeyReused
    return Outcome(record.status_code, record.response_body, replayed=True)


def idempotency_prune(*, now=None) -> int:
    """Delete every expired record (beat, hourly): people who never create again leave theirs behind."""
    cutoff = (now or timezone.now()) - retention()
    deleted, _ = IdempotencyRecord.objects.filter(created_at__lt=cutoff).delete()
    return deleted
