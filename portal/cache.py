"""A Redis cache that stores JSON, never pickles, and keeps one client per connection pool.

Django's RedisCache unpickles whatever it reads, so anyone able to write to Redis (the broker's network,
a leaked URL) could run code in every web process. Here values are written as JSON (integers as Redis
integers, so `incr` keeps working) and anything that is not JSON is refused: logged and treated as a miss,
never deserialised into objects.

Django's client makes a new `redis.Redis` for every operation; redis-py 8 builds its table of some 200
response callbacks in each one (about 0.2 ms of CPU, twice per REST submission: throttle and admission).
A `redis.Redis` over a connection pool is safe to share between threads, so each pool's is made once.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient

log = logging.getLogger(__name__)


class RefusedPayload(ValueError):
    """A cache value that is not JSON (a pickle, say): never deserialised."""


class JsonSerializer:
    def dumps(self, obj: Any) -> bytes | int:
        if type(obj) is int:  # stored as a Redis integer, as Django's own serializer does, for incr/decr
            return obj
        return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()

    def loads(self, data: bytes) -> Any:
        try:
            return int(data)
        except ValueError:
            pass
        try:
            return json.loads(data)
        except ValueError as exc:  # UnicodeDecodeError is one too
            raise RefusedPayload(f"not JSON ({len(data)} bytes, starting {bytes(data[:2])!r})") from exc


class JsonRedisCacheClient(RedisCacheClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: str | None = None, *, write: bool = False) -> Any:
        index = self._get_connection_pool_index(write)
        client = self._clients.get(index)
        if client is None:
            # Two threads may both make one at first; either is fine, they share the pool.
            if index not in self._pools:
                self._pools[index] = self._pool_class.from_url(self._servers[index], **self._pool_options)
            client = self._clients[index] = self._client(connection_pool=self._pools[index])
        return client

    def get(self, key: str, default: Any) -> Any:
        try:
            return super().get(key, default)
        except RefusedPayload as exc:
            log.warning("cache value under %r refused: %s", key, exc)
            return default

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        client = self.get_client(None)
        found: dict[str, Any] = {}
        for key, raw in zip(keys, client.mget(keys), strict=True):
            if raw is None:
                continue
            try:
                found[key] = self._serializer.loads(raw)
            except RefusedPayload as exc:
                log.warning("cache value under %r refused: %s", key, exc)
        return found


class JsonRedisCache(RedisCache):
    """settings.CACHES BACKEND "portal.cache.JsonRedisCache"; `rediss://` URLs work as for RedisCache."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = JsonRedisCacheClient
        self._options = {**self._options, "serializer": JsonSerializer}
