"""What a stop would throw away: GPUs x the time since the last checkpoint (or since the start). Pure."""

from __future__ import annotations

from datetime import datetime


def lost_gpu_seconds(
    *, gpus: int, started_at: datetime | None, last_checkpoint_at: datetime | None, at: datetime
) -> float:
    """GPU-seconds of work a stop at `at` loses. A checkpoint from before this run started (an earlier
    attempt's) saves nothing of this run's work, so the run's start counts then."""
    if started_at is None:
        return 0.0
    since = started_at
    if last_checkpoint_at is not None and last_checkpoint_at > started_at:
        since = last_checkpoint_at
    return max(0.0, (at - since).total_seconds()) * gpus


def gpu_hours_words(gpu_seconds: float) -> str:
    """'0.42 GPU-hours' as people read it (two decimals; 'under 0.01' rather than a misleading 0.00)."""
    hours = gpu_seconds / 3600
    if 0 < hours < 0.005:
        return "under 0.01 GPU-hours"
    return f"{hours:.2f} GPU-hour{'' if round(hours, 2) == 1 else 's'}"


def age_words(seconds: float) -> str:
    """A checkpoint's age, short: '42 s', '7 min', '3 h 05 min', '2 d 4 h'."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"
