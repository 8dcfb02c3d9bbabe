"""A bounded wait, as a pure function: when the head of a team's queue does not fit its quota, GPUs are
reserved for it as they free up, and smaller work passes it only where it cannot delay it (Slurm's
backfill). No database, no clock.

Every workload holding GPUs ends by its time limit (the portal enforces it), so the team's use of its
quota at any future moment has an upper bound: what holds GPUs now and ends after that moment. The
reservation is due at the first moment that bound leaves room for the reserved workload (`due_at`).
Another of the team's workloads may start now only if
- it ends, by its own time limit, before the reservation is due, or
- it fits beside it: what still holds GPUs when it is due, the reserved workload and everything let
  through beside it stay within the quota.
Nothing else of the team's can then take the reserved GPUs, so the reserved workload is admitted by the
due time: a promise ("starts no later than T"), not an estimate. A reservation stays with its workload
until it starts, whatever comes ahead of it later (a higher priority, a lighter user under fair share):
everything else of the team's is backfill while it stands, so the promise holds.

Only a team's own quota is reserved: in a cohort, work within its quota reclaims what others borrow, so
the same bound holds; borrowing (beyond the quota) is never promised.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from jobs.services.queue.sharing_plan import Held, Plan, Reason, TeamQuota, Waiting, plan

RESERVED = "reservation ahead"  # the reason backfill refused a workload (a queued row's wait_reason)
# Why a workload that waits may be reserved for: it does not fit what its team holds. A per-person cap or
# a missing quota is not something freed GPUs fix for it.
RESERVABLE = frozenset({Reason.TEAM_QUOTA, Reason.BORROWING_LIMIT, Reason.COHORT})
# A workload admitted now is not running at once (the pod is created, scheduled, its image pulled), and
# its time limit counts from its start: a backfilled one is trusted to end by now + START_SLACK + limit.
START_SLACK_SECONDS = 120.0
# After its time limit a workload is stopped by the limits sweep and its GPUs released a little later.
END_SLACK_SECONDS = 60.0
# The promise shown is the due time plus the time an admission pass may take to come (the sweep runs every
# 15 s; a workload's end triggers one at once).
PROMISE_SLACK_SECONDS = 60.0


@dataclass(frozen=True)
class Running:
    """Something of the team's that holds GPUs until at most `ends_by` (epoch seconds)."""

    gpus: int
    ends_by: float


@dataclass(frozen=True)
class Reservation:
    """GPUs of the team's quota promised to `workload_id` from `due_at` (epoch seconds)."""

    workload_id: int
    team_id: int
    gpus: int
    due_at: float


@dataclass
class Backfilled:
    """The plan after backfill, and the reservations that stand (per team)."""

    plan: Plan
    reservations: dict[int, Reservation] = field(default_factory=dict)
    refused: list[int] = field(default_factory=list)  # admitted by the plan, held back for a reservation


def ends_by(*, started: float | None, admitted: float | None, time_limit: float, now: float) -> float:
    """The latest a workload that holds GPUs can hold them: its start (or, not started yet, its admission
    plus START_SLACK, and never before now plus that) plus its time limit plus END_SLACK."""
    if started is not None:
        begin = started
    else:
        begin = max(now, admitted if admitted is not None else now) + START_SLACK_SECONDS
    return begin + time_limit + END_SLACK_SECONDS


def held_at(running: Iterable[Running], moment: float) -> int:
    """GPUs still held at `moment` at most."""
    return sum(r.gpus for r in running if r.ends_by > moment)


def due_at(quota: int, running: Sequence[Running], gpus: int, now: float) -> float | None:
    """The first moment from `now` at which what may still hold GPUs leaves `gpus` of `quota` free
    (None: never, the workload is larger than the quota)."""
    if gpus > quota:
        return None
    for moment in [now, *sorted(r.ends_by for r in running if r.ends_by > now)]:
        if held_at(running, moment) + gpus <= quota:
            return moment
    return None  # unreachable: after the last end nothing is held


def backfill(
    result: Plan,
    teams: Mapping[int, TeamQuota],
    queue: Sequence[Waiting],
    *,
    running: Mapping[int, Sequence[Running]],
    time_limits: Mapping[int, float],
    now: float,
    reserve_after: float | None,
    standing: Mapping[int, Waiting] | None = None,
) -> Backfilled:
    """The plan with each team's head reserved for where it does not fit, and the admissions that could
    delay a reservation held back.

    `queue` is in the plan's order (`Waiting.created` in epoch seconds: how long each has waited);
    `running`: per team, what it holds now; `time_limits`: seconds per queued workload id (those the plan
    admitted at least); `reserve_after`: how long a workload waits before it may be reserved for (None:
    never, best effort as the plan decided; 0: the head that does not fit at once); `standing`: per team,
    the workload a reservation already stands for (kept while it waits, whether or not `queue` holds it:
    an admission pass reads only the head of each team's queue)."""
    if reserve_after is None:
        return Backfilled(plan=result)
    standing = standing or {}
    admitted = set(result.admit)
    held_back: set[int] = set()
    reservations: dict[int, Reservation] = {}
    by_team: dict[int, list[Waiting]] = {}
    for w in queue:
        by_team.setdefault(w.team_id, []).append(w)
    for team_id, team_queue in by_team.items():
        team = teams.get(team_id)
        if team is None:
            continue
        picked = _reserved_for(team, team_queue, result, admitted, standing.get(team_id), now, reserve_after)
        if picked is None:
            continue
        reserved, sticky = picked
        # Admitted ahead of a fresh reservation: theirs by order, they count as held until their limit.
        ahead = [] if sticky else [w for w in team_queue[: team_queue.index(reserved)] if w.id in admitted]
        team_running = [*running.get(team_id, ()), *(_admitted_now(w, time_limits, now) for w in ahead)]
        due = due_at(team.quota, team_running, reserved.gpus, now)
        if due is None:
            continue
        reservations[team_id] = Reservation(reserved.id, team_id, reserved.gpus, due)
        beside = held_at(team_running, due) + reserved.gpus
        for w in team_queue:
            if w.id not in admitted or w.id == reserved.id or any(w is a for a in ahead):
                continue
            if _admitted_now(w, time_limits, now).ends_by <= due:
                continue  # ends before the reservation is due
            if beside + w.gpus <= team.quota:
                beside += w.gpus  # fits beside it
                continue
            held_back.add(w.id)
    if not held_back:
        return Backfilled(plan=result, reservations=reservations)
    plan = replace(
        result,
        admit=[i for i in result.admit if i not in held_back],
        borrowed={i for i in result.borrowed if i not in held_back},
        preempt={v: f for v, f in result.preempt.items() if f not in held_back},
        waiting={**result.waiting, **dict.fromkeys(held_back, RESERVED)},
    )
    return Backfilled(plan=plan, reservations=reservations, refused=[i for i in result.admit if i in held_back])


def plan_and_backfill(
    teams: Mapping[int, TeamQuota],
    held: Sequence[Held],
    queue: Sequence[Waiting],
    *,
    running: Mapping[int, Sequence[Running]],
    time_limits: Mapping[int, float],
    now: float,
    reserve_after: float | None,
    standing: Mapping[int, Waiting] | None = None,
) -> Backfilled:
    """The admission plan (`sharing_plan.plan`) with backfill, planned again without what backfill held
    back until nothing more is, so that the GPUs a held-back workload would have taken go to the next
    one that may have them (a short job behind a long one)."""
    held_back: list[int] = []
    waiting = list(queue)
    while True:
        done = backfill(
            plan(teams, held, waiting),
            teams,
            waiting,
            running=running,
            time_limits=time_limits,
            now=now,
            reserve_after=reserve_after,
            standing=standing,
        )
        if not done.refused:
            break
        held_back.extend(done.refused)
        gone = set(done.refused)
        waiting = [w for w in waiting if w.id not in gone]
    done.plan.waiting.update(dict.fromkeys(held_back, RESERVED))
    done.refused = held_back
    return done


def _reserved_for(
    team: TeamQuota,
    team_queue: list[Waiting],
    result: Plan,
    admitted: set[int],
    standing: Waiting | None,
    now: float,
    reserve_after: float,
) -> tuple[Waiting, bool] | None:
    """The team's workload to reserve for, and whether its reservation already stood: the standing one
    while it waits, else the first in order that waited `reserve_after` and does not fit what the team
    holds (None: the plan admitted it, or nothing waits that long)."""
    if standing is not None:
        return None if standing.id in admitted else (standing, True)
    for w in team_queue:
        if (
            w.id not in admitted
            and result.waiting.get(w.id) in RESERVABLE
            and now - w.created >= reserve_after
            and w.gpus <= team.quota
        ):
            return w, False
    return None


def _admitted_now(w: Waiting, time_limits: Mapping[int, float], now: float) -> Running:
    return Running(w.gpus, ends_by(started=None, admitted=now, time_limit=time_limits.get(w.id, math.inf), now=now))
