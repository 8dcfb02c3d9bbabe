"""The Celery broker's Redis transport (kombu's), with one redis client per connection pool.

kombu makes a new `redis.Redis` for every message it publishes, every message a worker takes (acks are
late: the message is kept in the unacknowledged set meanwhile) and every acknowledgement; redis-py 8
builds a table of some 200 response callbacks in each one, about 0.2 ms of CPU, several times per task. A
`redis.Redis` over a connection pool is safe to share between threads, so the channel keeps one for its
pool and makes a new one only when the pool is replaced (after a fork or a lost connection).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _shared_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        shared = self._shared_client
        if shared is None or shared.connection_pool is not self.pool:
            shared = self._shared_client = self._create_client()
        yield shared


class Transport(kombu_redis.Transport):
    """settings.CELERY_BROKER_TRANSPORT for redis:// and rediss:// broker URLs."""

    Channel = Channel
