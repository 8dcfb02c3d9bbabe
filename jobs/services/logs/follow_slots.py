"""Admission for followed log streams: a followed log holds one web thread for as long as it runs, so
without limits one person opening a hundred of them would leave no thread to answer anybody's page.

Three caps, each a setting:
- per web process (LOG_FOLLOW_MAX_PER_PROCESS): the threads a process may give to streams, so each keeps
  threads for pages whatever anyone does;
- per user (LOG_FOLLOW_MAX_PER_USER) and site-wide (LOG_FOLLOW_MAX_TOTAL), counted across processes and
  replicas in PostgreSQL, which every web process needs anyway: they hold whether Redis is up or not.
  Each open stream is a row (`LogFollowSlot`) with a deadline; claims are counted one at a time under a
  transaction-scoped advisory lock, so racing claims never pass a cap, and a process that dies holding
  streams frees them by their deadline at the latest.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from jobs.models import LogFollowSlot

log = logging.getLogger(__name__)

TOO_MANY_FOR_USER = "You have {n} log streams open already; close one (another tab?) and try again."
TOO_MANY_OVERALL = "The portal is serving as many log streams as it can right now; try again in a minute."
NOT_NOW = "Log streams cannot be counted right now (the database did not answer); try again in a minute."

# The first key of the advisory lock that orders claims (ASCII "ls"), so it meets no other lock.
STREAM_LOCK_SPACE = 0x6C73
# A slot outlives its stream's deadline by this much, for a stream that is just closing.
SLOT_GRACE_SECONDS = 5


class TooManyStreams(Exception):
    """No stream slot is free; the message says whose limit was reached."""


_process_lock = threading.Lock()
_process_open = 0


def _claim_process_slot() -> None:
    global _process_open
    with _process_lock:
        if _process_open >= settings.LOG_FOLLOW_MAX_PER_PROCESS:
            raise TooManyStreams(TOO_MANY_OVERALL)
        _process_open += 1


def _release_process_slot() -> None:
    global _process_open
    with _process_lock:
        _process_open = max(0, _process_open - 1)


def _claim_shared_slot(user_id: int, seconds: int) -> int:
    """Count the streams open now, per user and site-wide, and take one slot if both caps allow it;
    returns the slot's id. Refuses (fails closed) when the database cannot be asked."""
    now = timezone.now()
    try:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_xact_lock(%s, 0)", [STREAM_LOCK_SPACE])
            LogFollowSlot.objects.filter(expires_at__lte=now).delete()  # left by processes that died
            mine = LogFollowSlot.objects.filter(user_id=user_id).count()
            if mine >= settings.LOG_FOLLOW_MAX_PER_USER:
                raise TooManyStreams(TOO_MANY_FOR_USER.format(n=settings.LOG_FOLLOW_MAX_PER_USER))
            if LogFollowSlot.objects.count() >= settings.LOG_FOLLOW_MAX_TOTAL:
                raise TooManyStreams(TOO_MANY_OVERALL)
            expires = now + timedelta(seconds=seconds + SLOT_GRACE_SECONDS)
            return LogFollowSlot.objects.create(user_id=user_id, started_at=now, expires_at=expires).id
    except DatabaseError as exc:
        log.warning("log stream limits: the database did not answer (%s); refusing the stream", exc)
        raise TooManyStreams(NOT_NOW) from exc


def _release_shared_slot(slot_id: int) -> None:
    try:
        LogFollowSlot.objects.filter(id=slot_id).delete()
    except DatabaseError as exc:  # the slot expires by its deadline
        log.warning("log stream slot %s not released now (%s); it expires by its deadline", slot_id, exc)


@contextlib.contextmanager
def stream_slot(*, user_id: int, seconds: int) -> Iterator[None]:
    """Hold one log stream slot for at most `seconds`; raises TooManyStreams when none is free."""
    _claim_process_slot()
    slot_id = None
    try:
        slot_id = _claim_shared_slot(user_id, seconds)
        yield
    finally:
        if slot_id is not None:
            _release_shared_slot(slot_id)
        _release_process_slot()


class HeldStream:
    """An iterator over `lines` that holds a stream slot from its creation until it is closed (the
    client went away, the stream ended or its deadline passed). The slot is claimed up front, so a
    refusal can still become an error status; `close` is idempotent and the response always calls it."""

    def __init__(self, lines: Iterator[str], *, user_id: int, seconds: int) -> None:
        self._slot = stream_slot(user_id=user_id, seconds=seconds)
        self._slot.__enter__()
        self._lines = lines
        self._closed = False

    def __iter__(self) -> HeldStream:
        return self

    def __next__(self) -> str:
        if self._closed:
            raise StopIteration
        try:
            return next(self._lines)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            close = getattr(self._lines, "close", None)
            if close is not None:
                close()
        finally:
            self._slot.__exit__(None, None, None)
