from __future__ import annotations

import logging

from django.core.cache import caches
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

log = logging.getLogger(__name__)


class TokenRateThrottle(SimpleRateThrottle):
    """Requests per token (a browser session counts per user, anonymous callers per address).

    DRF turns a refusal into 429 with Retry-After. If the shared cache is unreachable the request is let
    through: throttling protects the portal, it must never take the API down with it.
    """

    scope = "token"

    def __init__(self) -> None:
        self.cache = caches["api"]
        super().__init__()

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
        try:
            return super().allow_request(request, view)
        except Exception as exc:  # redis-py and the cache backends raise several types
            log.warning("API throttle cache unavailable (%s); request allowed", exc)
            return True


class UserRateThrottle(TokenRateThrottle):
    """Requests per person, whichever of their tokens (or their browser session) they come with: making
    more tokens does not buy more requests. Anonymous callers are left to the per-address throttle."""

    scope = "user"

    def get_cache_key(self, request, view):
        if not (request.user and request.user.is_authenticated):
            return None
        return self.cache_format % {"scope": self.scope, "ident": f"u{request.user.pk}"}
