"""When will a queued workload start? A forward simulation of admission, as a pure function.

Starting from what holds GPUs now (each expected to end at its time limit, or sooner where its owner's
history says runs are usually shorter) and the queue in order, the simulation repeats the admission
plan (`sharing_plan.plan`) at every expected end, until every queued workload has a start or the
horizon is reached. `capacity` (GPUs of the type the cohort can physically get) makes the forecast wait
for the cluster too, where admission leaves that to the Kubernetes scheduler.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from jobs.services.sharing_plan import Held, Plan, TeamQuota, Waiting, plan

HORIZON_SECONDS = 7 * 24 * 3600.0
MAX_QUEUED = 200  # workloads forecast per cohort and type; those further back get no estimate (cost bound)
MIN_REMAINING_SECONDS = 30.0  # something past its expected end still needs a moment to be seen ending


@dataclass(frozen=True)
class Estimate:
    """`start_in`: seconds from now (None: not within the horizon); `reason`: why it waits now."""

    start_in: float | None
    reason: str


def expected_run(time_limit: float, history: Sequence[float] = ()) -> float:
    """How long a run is expected to last: the owner's typical (median) run where there is history, never
    beyond the time limit, which ends it for sure."""
    if not history:
        return float(time_limit)
    return min(float(time_limit), float(statistics.median(history)))


def remaining(expected: float, elapsed: float, time_limit: float, history: Sequence[float] = ()) -> float:
    """Seconds a running workload should still hold its GPUs.

    With history: the typical (median) length of the owner's past runs that lasted longer than this one
    has so far, less what it ran (a run that outlived most of its owner's runs is usually near its end);
    without: its expected run, or its time limit once it outlived that."""
    cap = max(MIN_REMAINING_SECONDS, time_limit - elapsed)
    if history:
        longer = [h for h in history if h > elapsed]
        left = statistics.median(longer) - elapsed if longer else MIN_REMAINING_SECONDS
        return min(cap, max(MIN_REMAINING_SECONDS, left))
    left = expected - elapsed
    if left <= 0:
        left = time_limit - elapsed
    return max(MIN_REMAINING_SECONDS, left)


def forecast(
    teams: Mapping[int, TeamQuota],
    running: Iterable[tuple[Held, float]],
    queued: Sequence[Waiting],
    durations: Mapping[int, float],
    *,
    capacity: int | None = None,
    horizon: float = HORIZON_SECONDS,
) -> dict[int, Estimate]:
    """Estimated start of each queued workload. `running`: (held, seconds until it ends); `durations`:
    expected run of each queued workload, by id."""
    active: dict[int, tuple[Held, float]] = {h.id: (h, end) for h, end in running}
    queue = list(queued[:MAX_QUEUED])
    starts: dict[int, float] = {}
    first: Plan | None = None
    now = 0.0
    for _ in range(10 * (len(queue) + len(active)) + 10):
        result = plan(teams, [h for h, _ in active.values()], queue, capacity=capacity)
        if first is None:
            first = result
        for victim in result.preempt:
            active.pop(victim, None)
        admitted = set(result.admit)
        for w in queue:
            if w.id in admitted:
                starts[w.id] = now
                held = Held(w.id, w.team_id, w.gpus, w.user_id, w.priority, w.id in result.borrowed, now)
                active[w.id] = (held, now + max(1.0, durations.get(w.id, 3600.0)))
        queue = [w for w in queue if w.id not in admitted]
        if not queue or not active:
            break
        now = min(end for _, end in active.values())
        if now > horizon:
            break
        active = {i: (h, end) for i, (h, end) in active.items() if end > now}
    reasons = first.waiting if first is not None else {}
    return {w.id: Estimate(starts.get(w.id), reasons.get(w.id, "")) for w in queued}


def about(seconds: float | None) -> str:
    """A start estimate for people: "about 40 min", "about 3 h"."""
    if seconds is None:
        return "not within a week"
    if seconds < 60:
        return "within a minute"
    minutes = seconds / 60
    if minutes < 10:
        return f"about {round(minutes)} min"
    if minutes < 90:
        return f"about {int(5 * round(minutes / 5))} min"
    hours = minutes / 60
    if hours < 36:
        return f"about {round(hours)} h"
    return f"about {round(hours / 24)} days"
