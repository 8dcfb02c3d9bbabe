"""Start estimates that agree with the promises (issue 38): where a GPU type reserves, each step of the
forecast plans as admission does, with reservations and conservative backfill
(`reservation_plan.plan_and_backfill`), instead of the best-effort plan. So the forecast does not let a
long job pass a reserved one that backfill will hold it behind, and a reserved workload is forecast to
start by its due time at the latest, as promised.

Pure: `BackfillPlanner` is handed to `forecast.forecast` as its planner; times are epoch seconds, the
forecast's own steps (seconds from its start) are moved onto them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from jobs.services.queue import reservation_plan
from jobs.services.queue.reservation_plan import Running, plan_and_backfill
from jobs.services.queue.sharing_plan import Held, Plan, TeamQuota, Waiting, plan


@dataclass
class BackfillPlanner:
    """The plan at each forecast step with the GPU type's reservations kept from step to step.

    `start`: the forecast's now (epoch seconds); `reserve_after`: the type's wait before reserving;
    `time_limits`: seconds per workload id (running, queued, and expected arrivals by their expected run);
    `ends_by`: the latest each running workload holds its GPUs (epoch); `standing`: per team, the promises
    that stand now (workload, due in epoch seconds)."""

    start: float
    reserve_after: float
    time_limits: dict[int, float]
    ends_by: dict[int, float]
    standing: dict[int, list[tuple[Waiting, float]]] = field(default_factory=dict)
    borrowed_hours: Mapping[int, float] | None = None  # a cohort with fair borrowing (`borrow_share`)
    reserve_deeper_after: float = reservation_plan.RESERVE_DEEPER_AFTER_SECONDS  # the type's wait beyond the head

    def __call__(
        self,
        teams: Mapping[int, TeamQuota],
        held: Sequence[Held],
        queued: Sequence[Waiting],
        *,
        now: float,
        capacity: int | None,
    ) -> Plan:
        at = self.start + now
        running: dict[int, list[Running]] = {}
        for h in held:
            end = self.ends_by.get(h.id)
            if end is None:  # not known to hold GPUs before: by its limit from now
                end = self.ends_by[h.id] = self._ends_by(h.id, at)
            running.setdefault(h.team_id, []).append(Running(h.gpus, end))
        done = plan_and_backfill(
            teams,
            held,
            queued,
            running=running,
            time_limits=self.time_limits,
            now=at,
            reserve_after=self.reserve_after,
            standing=self.standing,
            capacity=capacity,
            borrowed_hours=self.borrowed_hours,
            reserve_deeper_after=self.reserve_deeper_after,
        )
        admitted = set(done.plan.admit)
        for workload_id in admitted:
            self.ends_by[workload_id] = self._ends_by(workload_id, at)
        known = {w.id: w for rows in self.standing.values() for w, _ in rows} | {w.id: w for w in queued}
        self.standing = {
            team_id: [(known[r.workload_id], r.due_at) for r in rows if r.workload_id not in admitted]
            for team_id, rows in done.reservations.items()
        }
        return done.plan

    def _ends_by(self, workload_id: int, at: float) -> float:
        limit = self.time_limits.get(workload_id, math.inf)
        return reservation_plan.ends_by(started=None, admitted=at, time_limit=limit, now=at)


@dataclass(frozen=True)
class FairBorrowingPlanner:
    """The best-effort plan at each forecast step, with borrowing in a fair cohort's order (per team, its
    decayed borrowed GPU-hours, as they are now)."""

    borrowed_hours: Mapping[int, float]

    def __call__(
        self,
        teams: Mapping[int, TeamQuota],
        held: Sequence[Held],
        queued: Sequence[Waiting],
        *,
        now: float,
        capacity: int | None,
    ) -> Plan:
        return plan(teams, held, queued, capacity=capacity, borrowed_hours=self.borrowed_hours)
