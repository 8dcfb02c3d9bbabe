"""Admission for followed log streams: a followed log holds one web thread for as long as it runs, so
without limits one person opening a hundred of them would leave no thread to answer anybody's page.

Three caps, each a setting:
- per web process (LOG_FOLLOW_MAX_PER_PROCESS): the threads a process may give to streams, so each keeps
  threads for pages whatever anyone does;
- per user (LOG_FOLLOW_MAX_PER_USER) and site-wide (LOG_FOLLOW_MAX_TOTAL), counted in Redis across
  processes and replicas. Each open stream is a member of a sorted set scored by its deadline, so a
  process that dies holding streams frees them by the deadline at the latest.
If Redis cannot be reached the per-process cap still holds (streams are not refused for that alone).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator

import redis
from django.conf import settings

log = logging.getLogger(__name__)

TOO_MANY_FOR_USER = "You have {n} log streams open already; close one (another tab?) and try again."
TOO_MANY_OVERALL = "The portal is serving as many log streams as it can right now; try again in a minute."


class TooManyStreams(Exception):
    """No stream slot is free; the message says whose limit was reached."""


_process_lock = threading.Lock()
_process_open = 0
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=0.5, socket_timeout=0.5)
    return _client


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


def _keys(user_id: int) -> tuple[str, str]:
    return f"gpuportal:logstreams:user:{user_id}", "gpuportal:logstreams:all"


def _claim_shared_slot(user_id: int, stream: str, deadline: float) -> bool:
    """Add the stream, then count: two racing claims may both be refused, never both admitted over a cap.
    Returns whether the slot is held in Redis (False: Redis unreachable, not counted)."""
    user_key, all_key = _keys(user_id)
    now = time.time()
    try:
        pipe = _redis().pipeline()
        for key in (user_key, all_key):
            pipe.zremrangebyscore(key, "-inf", now)
            pipe.zadd(key, {stream: deadline})
            pipe.expireat(key, int(deadline) + 60)
            pipe.zcard(key)
        _, _, _, mine, _, _, _, everyone = pipe.execute()
    except redis.RedisError as exc:
        log.warning("log stream limits: Redis unreachable (%s); only the per-process cap applies", exc)
        return False
    if mine > settings.LOG_FOLLOW_MAX_PER_USER or everyone > settings.LOG_FOLLOW_MAX_TOTAL:
        _release_shared_slot(user_id, stream)
        if mine > settings.LOG_FOLLOW_MAX_PER_USER:
            raise TooManyStreams(TOO_MANY_FOR_USER.format(n=settings.LOG_FOLLOW_MAX_PER_USER))
        raise TooManyStreams(TOO_MANY_OVERALL)
    return True


def _release_shared_slot(user_id: int, stream: str) -> None:
    with contextlib.suppress(redis.RedisError):
        pipe = _redis().pipeline()
        for key in _keys(user_id):
            pipe.zrem(key, stream)
        pipe.execute()


@contextlib.contextmanager
def stream_slot(*, user_id: int, seconds: int) -> Iterator[None]:
    """Hold one log stream slot for at most `seconds`; raises TooManyStreams when none is free."""
    _claim_process_slot()
    stream = uuid.uuid4().hex
    shared = False
    try:
        shared = _claim_shared_slot(user_id, stream, time.time() + seconds + 5)
        yield
    finally:
        if shared:
            _release_shared_slot(user_id, stream)
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
