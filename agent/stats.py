"""The agent's own counters, shared by the sampling loop, the pusher thread and the metrics collector."""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields, replace


@dataclass
class StatsSnapshot:
    samples_total: int = 0
    sample_failures_total: int = 0
    nvml_errors_total: int = 0
    reports_sent_total: int = 0
    # Dropped because the bounded buffer was full (the oldest go first) ...
    reports_dropped_total: int = 0
    # ... or because the portal refused them for good (4xx other than auth/rate limit).
    reports_rejected_total: int = 0
    push_failures_total: int = 0
    buffer_length: int = 0
    last_sample_seconds: float = 0.0
    last_sample_timestamp: float = 0.0


class AgentStats:
    """Thread-safe counters; read them as one consistent snapshot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values = StatsSnapshot()

    def add(self, **increments: int) -> None:
        with self._lock:
            for name, amount in increments.items():
                setattr(self._values, name, getattr(self._values, name) + amount)

    def set(self, **values: float) -> None:
        with self._lock:
            for name, value in values.items():
                setattr(self._values, name, value)

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return replace(self._values)

    @staticmethod
    def names() -> list[str]:
        return [f.name for f in fields(StatsSnapshot)]
