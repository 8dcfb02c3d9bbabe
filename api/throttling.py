"""Requests per token and per person, counted in Redis so every web process counts the same requests.

Each throttle is a sliding window (DRF's rule: at most N requests in the last period), kept as a Redis
sorted set of request times. One Lua script checks and counts every throttle of a request at once, in
one round trip (`count_together`), and is atomic, so concurrent requests are all counted. DRF turns a
refusal into 429 with Retry-After. If Redis is unreachable the request is let through: throttling
protects the portal, it must never take the API down with it.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence

from django.core.cache import caches
from rest_framework.settings import api_settings
from rest_framework.throttling import BaseThrottle, SimpleRateThrottle

log = logging.getLogger(__name__)

# KEYS: one window per throttle. ARGV: the time now, then per key: limit, period (seconds), the time at
# or before which requests leave the window, and a name for this request. Answers per key: whether it
# was counted (allowed), the requests in the window before it, and the oldest one's time.
# A key holding anything but a window (an older format, or a value planted there) is no count: dropped.
_WINDOWS_LUA = """
local now = ARGV[1]
local answers = {}
for i, key in ipairs(KEYS) do
    local limit = tonumber(ARGV[4 * i - 2])
    local period = tonumber(ARGV[4 * i - 1])
    local kind = redis.call('TYPE', key)['ok']
    if kind ~= 'zset' and kind ~= 'none' then
        redis.call('DEL', key)
    end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[4 * i])
    local count = redis.call('ZCARD', key)
    local allowed = 0
    if count < limit then
        redis.call('ZADD', key, now, ARGV[4 * i + 1])
        redis.call('EXPIRE', key, period)
        allowed = 1
    end
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2] or ''
    answers[i] = {allowed, count, oldest}
end
return answers
"""
_script = None  # the registered script (redis-py's Script: EVALSHA, loading the script where missing)


class TokenRateThrottle(SimpleRateThrottle):
    """Requests per token (a browser session counts per user, anonymous callers per address)."""

    scope = "token"

    def __init__(self) -> None:
        self.cache = caches["api"]
        super().__init__()
        self.answer: tuple[bool, int, float] | None = None  # (allowed, requests in the window, oldest)

    def get_rate(self):
        # Read at request time, not import time, so the rate can be changed by settings (and tests).
        return api_settings.DEFAULT_THROTTLE_RATES.get(self.scope)

    def get_cache_key(self, request, view):
        auth = getattr(request, "auth", None)
        if auth is not None and getattr(auth, "pk", None) is not None:
            ident = f"t{auth.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"u{request.user.pk}"
        else:
            ident = f"a{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}

    def allow_request(self, request, view):
        if self.answer is None:
            count_together([self], request, view)
        return self.answer is None or self.answer[0]

    def wait(self):
        if self.answer is None:
            return None
        _, count, oldest = self.answer
        remaining = self.duration - (self.now - oldest) if count else self.duration
        available = self.num_requests - count + 1
        return remaining / available if available > 0 else None


class UserRateThrottle(TokenRateThrottle):
    """Requests per person, whichever of their tokens (or their browser session) they come with: making
    more tokens does not buy more requests. Anonymous callers are left to the per-address throttle."""

    scope = "user"

    def get_cache_key(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return None
        return self.cache_format % {"scope": self.scope, "ident": f"u{request.user.pk}"}


def _windows(throttles: Sequence[BaseThrottle], request, view) -> list[tuple[TokenRateThrottle, str]]:
    """The window throttles that apply to the request, each with its cache key."""
    windows: list[tuple[TokenRateThrottle, str]] = []
    for throttle in throttles:
        if not isinstance(throttle, TokenRateThrottle) or throttle.rate is None:
            continue
        key = throttle.get_cache_key(request, view)
        if key is not None:
            windows.append((throttle, throttle.cache.make_and_validate_key(key)))
    return windows


def count_together(throttles: Sequence[BaseThrottle], request, view) -> None:
    """Check and count the request in every window throttle of `throttles` in one Redis round trip; each
    keeps its answer for `allow_request` and `wait`. Throttles without a rate or a key allow (answer None)."""
    windows = _windows(throttles, request, view)
    if not windows:
        return
    global _script
    now = windows[0][0].timer()
    args: list[object] = [repr(now)]
    for throttle, _ in windows:
        throttle.now = now
        member = f"{now!r}:{secrets.token_hex(4)}"
        args += [throttle.num_requests, throttle.duration, repr(now - throttle.duration), member]
    try:
        client = windows[0][0].cache._cache.get_client(windows[0][1], write=True)
        if _script is None:
            _script = client.register_script(_WINDOWS_LUA)
        answers = _script(keys=[key for _, key in windows], args=args, client=client)
    except Exception as exc:  # redis-py raises several types: the request is let through
        log.warning("API throttle cache unavailable (%s); request allowed", exc)
        return
    for (throttle, _), (allowed, count, oldest) in zip(windows, answers, strict=True):
        throttle.answer = (bool(allowed), int(count), float(oldest) if oldest else now)
