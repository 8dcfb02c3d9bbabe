from __future__ import annotations

from tests.api.conftest import _fresh_throttle_counters, world  # noqa: F401 (shared fixtures)
