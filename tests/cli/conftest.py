from __future__ import annotations

from tests.api.conftest import _fast_passwords, _fresh_throttle_counters, _static_without_manifest, world  # noqa: F401 (shared fixtures)
