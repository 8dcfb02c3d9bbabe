"""A bounded wait, as a pure function: when a team's workload does not fit its quota, GPUs are
reserved for it as they free up, and other work passes it only where it cannot delay it (Slurm's
conservative backfill). No database, no clock.

Every workload holding GPUs ends by its time limit (the portal enforces it), so what a team's quota holds
at any future moment has an upper bound: a timeline of blocks, each GPUs from a start to the latest end.
A reserved workload gets the first moment its GPUs fit on that timeline for as long as its own limit
(its due time), and its block goes on the timeline too; so does every workload let start now, which it
must fit for its whole time limit. So work passes a reserved one only if it ends before the reservation
is due or fits beside it, and nothing can take the reserved GPUs: the reserved workload is admitted by
its due time, a promise ("starts no later than T"), not an estimate. The first RESERVE_DEPTH waiting
workloads of a team are reserved for, in queue order (the admission pass reads that many of each team's
queue wherever the type reserves, whether or not they fit now); a reservation stays with its workload
until it starts, whatever comes ahead of it later (a higher priority, a lighter user under fair share).
Each pass brings every reservation forward to the first moment it fits (`_pull_in`): runs usually end
before their limits, and a due time computed from limits, left where it was, let backfill fill the gap
up to it while the reserved workload waited. So a promise only ever moves earlier.

Only a team's own quota is reserved: in a cohort, work within its quota reclaims what others borrow, so
the same bound holds; borrowing (beyond the quota) is never promised.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
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
RESERVE_DEPTH = 4  # workloads reserved for per team and GPU type at most (each pass checks them all)
# Beyond the head of a team's queue (the first workload in its order the plan does not admit), a workload is
# reserved for only once it has waited this long. A promise stands whatever comes later: made at once for
# every workload of the first RESERVE_DEPTH, a 1-GPU job with a 4-hour limit promised minutes before an
# 8-GPU job arrived held that one back until it ended. Tuned on the replay's seeds (benchmarks/README.md,
# against 0, 1, 2, 3 and 5 h). The default of GpuType.reserve_deeper_after_seconds, the admin's setting per type.
RESERVE_DEEPER_AFTER_SECONDS = 4 * 3600.0
# Off in the portal. Issue 38's sixth round tried it on the replay only (`queue_replay`'s large-at-once, which
# sets it around each of its passes) and left it out (benchmarks/README.md): on, a workload of at least half
# its team's quota beyond the head is reserved for at once, as the head is (the wait above for smaller ones).
LARGE_AT_ONCE = False


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
    reservations: dict[int, list[Reservation]] = field(default_factory=dict)
    refused: list[int] = field(default_factory=list)  # admitted by the plan, held back for a reservation


def ends_by(*, started: float | None, admitted: float | None, time_limit: float, now: float) -> float:
    """The latest a workload that holds GPUs can hold them: its start (or, not started yet, its admission
    plus START_SLACK, and never before now plus that) plus its time limit plus END_SLACK."""
    if started is not None:
        begin = started
    else:
        begin = max(now, admitted if admitted is not None else now) + START_SLACK_SECONDS
    return begin + time_limit + END_SLACK_SECONDS


def backfill(
    result: Plan,
    teams: Mapping[int, TeamQuota],
    queue: Sequence[Waiting],
    *,
    running: Mapping[int, Sequence[Running]],
    time_limits: Mapping[int, float],
    now: float,
    reserve_after: float | None,
    standing: Mapping[int, Sequence[tuple[Waiting, float]]] | None = None,
    held_before: Collection[int] = (),
    reserve_deeper_after: float = RESERVE_DEEPER_AFTER_SECONDS,
) -> Backfilled:
    """The plan with GPUs reserved for each team's first workloads that do not fit, and the admissions
    that could delay a reservation held back (conservative backfill, as Slurm's: every reservation is
    kept, not only the first).

    `queue` is in the plan's order (`Waiting.created` in epoch seconds: how long each has waited);
    `running`: per team, what it holds now; `time_limits`: seconds per queued workload id (reserved ones
    included); `reserve_after`: how long a workload waits before it may be reserved for (None: never,
    best effort as the plan decided; 0: at once); `standing`: per team, the workloads reservations already
    stand for with the time each is due (kept while they wait, whether or not `queue` holds them: an
    admission pass reads only the head of each team's queue); `held_before`: workloads of `queue` held back
    by backfill already (not planned again): they are reserved for in their turn like any that waits;
    `reserve_deeper_after`: how long a workload beyond the head of its team's queue waits before it is
    reserved for (or `reserve_after`, when longer)."""
    if reserve_after is None:
        return Backfilled(plan=result)
    admitted = set(result.admit)
    held_back: set[int] = set()
    reservations: dict[int, list[Reservation]] = {}
    standing = standing or {}
    by_team = _by_team(queue)
    for team_id in by_team.keys() | standing.keys():
        team = teams.get(team_id)
        if team is None:
            continue
        reserved = _backfill_team(
            team,
            by_team.get(team_id, ()),
            standing.get(team_id, ()),
            result,
            admitted,
            held_back,
            running=running.get(team_id, ()),
            time_limits=time_limits,
            now=now,
            reserve_after=reserve_after,
            reserve_deeper_after=reserve_deeper_after,
            held_before=held_before,
        )
        if reserved:
            reservations[team_id] = reserved
    if not held_back:
        return Backfilled(plan=result, reservations=reservations)
    return _held_back(result, held_back, reservations)


def _by_team(queue: Sequence[Waiting]) -> dict[int, list[Waiting]]:
    by_team: dict[int, list[Waiting]] = {}
    for w in queue:
        by_team.setdefault(w.team_id, []).append(w)
    return by_team


def _backfill_team(
    team: TeamQuota,
    queued: Sequence[Waiting],
    promises: Sequence[tuple[Waiting, float]],
    result: Plan,
    admitted: set[int],
    held_back: set[int],
    *,
    running: Sequence[Running],
    time_limits: Mapping[int, float],
    now: float,
    reserve_after: float,
    reserve_deeper_after: float = RESERVE_DEEPER_AFTER_SECONDS,
    held_before: Collection[int] = (),
) -> list[Reservation]:
    """One team's reservations, made in queue order with its promised workloads in their places (those
    the pass did not read last); the admissions that would delay one are added to `held_back`. A promised
    workload that its place would start after its promise is pinned (kept where it stood, ahead of the
    order) and the order planned again: so every promise holds, and one made before a workload that is
    now ahead of it in the order holds that one back only where it must."""
    due_of = {w.id: due for w, due in promises}
    in_queue = {w.id for w in queued}
    order = [*queued, *(w for w, _ in sorted(promises, key=lambda p: p[1]) if w.id not in in_queue)]
    head = next((w.id for w in order if w.id not in admitted), None)
    pinned: set[int] = set()
    while True:
        timeline = Timeline(team.quota, [Block(r.gpus, now, r.ends_by) for r in running])
        reserved: list[Reservation] = []
        back: set[int] = set()
        kept = [p for p in promises if p[0].id in pinned]
        _keep_promises(timeline, reserved, back, kept, admitted, result.borrowed, time_limits=time_limits, now=now)
        late = None
        for w in order:
            deeper = w.id != head and not (LARGE_AT_ONCE and 2 * w.gpus >= team.quota)
            wait = max(reserve_after, reserve_deeper_after) if deeper else reserve_after
            if w.id not in pinned and not _in_order(timeline, reserved, back, w, due_of.get(w.id), result, admitted,
                                                    time_limits=time_limits, now=now, reserve_after=wait,
                                                    held_before=held_before):  # fmt: skip
                late = w
                break
        if late is None:
            held_back |= back
            return reserved
        pinned.add(late.id)


def _in_order(
    timeline: Timeline,
    reserved: list[Reservation],
    held_back: set[int],
    w: Waiting,
    due: float | None,
    result: Plan,
    admitted: set[int],
    *,
    time_limits: Mapping[int, float],
    now: float,
    reserve_after: float,
    held_before: Collection[int],
) -> bool:
    """One workload in its place in the team's order; False: promised (`due`), it would start late."""
    if due is not None:
        return _promised_in_order(timeline, reserved, held_back, w, due, admitted, result.borrowed,
                                  time_limits=time_limits, now=now)  # fmt: skip
    _backfill_one(timeline, reserved, held_back, w, result, admitted, time_limits=time_limits, now=now,
                  reserve_after=reserve_after, held_before=held_before)  # fmt: skip
    return True


def _promised_in_order(
    timeline: Timeline,
    reserved: list[Reservation],
    held_back: set[int],
    w: Waiting,
    due: float,
    admitted: set[int],
    borrowed: Collection[int],
    *,
    time_limits: Mapping[int, float],
    now: float,
) -> bool:
    """A promised workload in its place in the order: started now where the plan admits it and it fits,
    else reserved at the first moment it fits, not after its promise. False: it would start late (pin it)."""
    if w.id in admitted and _start_now(timeline, reserved, w, borrowed, time_limits=time_limits, now=now):
        return True
    length = _length(w, time_limits)
    at = timeline.earliest(w.gpus, length, now, latest=due, after_now=True) if due > now else None
    if at is None:
        return False
    if w.id in admitted:
        held_back.add(w.id)
    timeline.take(w.gpus, at, at + length)
    reserved.append(Reservation(w.id, w.team_id, w.gpus, at))
    return True


def _keep_promises(
    timeline: Timeline,
    reserved: list[Reservation],
    held_back: set[int],
    standing: Sequence[tuple[Waiting, float]],
    admitted: set[int],
    borrowed: Collection[int],
    *,
    time_limits: Mapping[int, float],
    now: float,
) -> None:
    """Promises made before come first, each kept where it stood (the timeline only shrank since: work
    ended, or started only where it fitted around them); one the plan admits starts now if it fits around
    the others, else keeps its place."""
    promises = sorted(standing, key=lambda p: p[1])
    for w, due in promises:
        if w.id not in admitted:
            _reserve(timeline, reserved, w, _length(w, time_limits), now, at=due)
    for w, due in promises:
        if w.id in admitted and not _start_now(timeline, reserved, w, borrowed, time_limits=time_limits, now=now):
            held_back.add(w.id)
            _reserve(timeline, reserved, w, _length(w, time_limits), now, at=due)
    _pull_in(timeline, reserved, time_limits=time_limits, now=now)


def _pull_in(timeline: Timeline, reserved: list[Reservation], *, time_limits: Mapping[int, float], now: float) -> None:
    """Bring each promise (earliest due first) forward to the first moment at which it fits beside
    everything else, where that is before its due: work ended sooner than its limit said (runs usually
    do), so its GPUs come free earlier. Slurm recomputes its reservations every backfill cycle the same
    way; without it, backfill filled the gap up to a due time computed from time limits, and the
    reserved workload started no earlier than that. Every block still fits (each moved only where it
    fits beside all the others), so every promise still holds; a promise only ever moves earlier. Not to
    now: one that fits its team's GPUs now and was not admitted waits for something else (the cohort),
    which a promise cannot hurry."""
    for i in sorted(range(len(reserved)), key=lambda i: reserved[i].due_at):
        r = reserved[i]
        length = _length_of(r.workload_id, time_limits)
        timeline.blocks.remove(Block(r.gpus, r.due_at, r.due_at + length))
        due = timeline.earliest(r.gpus, length, now, latest=r.due_at, after_now=True)
        due = r.due_at if due is None else due
        timeline.blocks.append(Block(r.gpus, due, due + length))
        reserved[i] = replace(r, due_at=due)


def _backfill_one(
    timeline: Timeline,
    reserved: list[Reservation],
    held_back: set[int],
    w: Waiting,
    result: Plan,
    admitted: set[int],
    *,
    time_limits: Mapping[int, float],
    now: float,
    reserve_after: float,
    held_before: Collection[int] = (),
) -> None:
    """One queued workload without a promise: admitted only if it delays no reservation, else held back;
    not admitted, reserved for when it has waited long enough (and the team holds fewer than RESERVE_DEPTH).
    One held back (`held_before`) is reserved for too: without it, a long small workload at the head of its
    queue, held back by a promise, let those behind it be promised GPUs first, pass after pass."""
    if w.id in admitted:
        if not _start_now(timeline, reserved, w, result.borrowed, time_limits=time_limits, now=now):
            held_back.add(w.id)
    elif (
        len(reserved) < RESERVE_DEPTH
        and (result.waiting.get(w.id) in RESERVABLE or w.id in held_before)
        and now - w.created >= reserve_after
    ):
        _reserve(timeline, reserved, w, _length(w, time_limits), now)


def _start_now(
    timeline: Timeline,
    reserved: Sequence[Reservation],
    w: Waiting,
    borrowed: Collection[int],
    *,
    time_limits: Mapping[int, float],
    now: float,
) -> bool:
    """Put a workload the plan admits on its team's timeline from now, if it delays no reservation; False:
    hold it back. Work within the quota must fit the quota for its whole time limit. Borrowed work (the
    plan admitted it beyond the team's quota, on GPUs its cohort lends) takes none of the quota now: it
    need only leave every reservation of the team its room, for it counts as the team's own once the
    team's own work ends (`sharing_plan.marks`), and the plan never takes a team's work back for that
    team. Held to the quota alone, as it was, a team whose quota was full never borrowed where its type
    reserves: the case borrowing is for."""
    end = _admitted_now(w, time_limits, now).ends_by
    if w.id not in borrowed:
        return timeline.take(w.gpus, now, end)
    protected = [Block(r.gpus, r.due_at, r.due_at + _length_of(r.workload_id, time_limits)) for r in reserved]
    if not timeline.fits_beside(w.gpus, now, end, protected):
        return False
    timeline.blocks.append(Block(w.gpus, now, end))
    return True


def _held_back(result: Plan, held_back: set[int], reservations: dict[int, list[Reservation]]) -> Backfilled:
    """The plan without the admissions held back (they wait, RESERVED), nor what they would have preempted."""
    plan = replace(
        result,
        admit=[i for i in result.admit if i not in held_back],
        borrowed={i for i in result.borrowed if i not in held_back},
        preempt={v: f for v, f in result.preempt.items() if f not in held_back},
        waiting={**result.waiting, **dict.fromkeys(held_back, RESERVED)},
    )
    return Backfilled(plan=plan, reservations=reservations, refused=[i for i in result.admit if i in held_back])


@dataclass(frozen=True)
class Block:
    """`gpus` of the team's quota taken from `start` until `end` (epoch seconds)."""

    gpus: int
    start: float
    end: float


@dataclass
class Timeline:
    """What a team's quota holds from now on, at most: running work until its time limit, reservations
    over the stretch their workloads may run, and what backfill let start."""

    quota: int
    blocks: list[Block]

    def used_at(self, moment: float) -> int:
        return sum(b.gpus for b in self.blocks if b.start <= moment < b.end)

    def fits(self, gpus: int, start: float, end: float) -> bool:
        # What is held only grows where a block starts: checking there (and at `start`) is enough.
        moments = [start, *(b.start for b in self.blocks if start < b.start < end)]
        return all(self.used_at(m) + gpus <= self.quota for m in moments)

    def fits_beside(self, gpus: int, start: float, end: float, protected: Sequence[Block]) -> bool:
        """Whether `gpus` from `start` to `end` fit the quota wherever one of `protected` holds GPUs (the
        quota may be passed elsewhere: borrowed work runs on what the cohort lends)."""
        moments = [start, *(b.start for b in self.blocks if start < b.start < end)]
        return all(
            self.used_at(m) + gpus <= self.quota for m in moments if any(p.start <= m < p.end for p in protected)
        )

    def take(self, gpus: int, start: float, end: float) -> bool:
        if not self.fits(gpus, start, end):
            return False
        self.blocks.append(Block(gpus, start, end))
        return True

    def earliest(
        self, gpus: int, length: float, now: float, *, latest: float = math.inf, after_now: bool = False
    ) -> float | None:
        """The first moment from `now` (after it, where `after_now`; not after `latest`) at which `gpus`
        fit for `length` seconds (None: never)."""
        if gpus > self.quota:
            return None
        ends = (b.end for b in self.blocks if now < b.end < latest)
        for moment in sorted({*([] if after_now else [now]), *ends, *([latest] if math.isfinite(latest) else [])}):
            if math.isfinite(moment) and self.fits(gpus, moment, moment + length):
                return moment
        return None


def _reserve(
    timeline: Timeline, reserved: list[Reservation], w: Waiting, length: float, now: float, *, at: float | None = None
) -> None:
    """Reserve for `w` where it stood (`at`, a promise made before) if it still fits there, else at the
    earliest moment it fits."""
    due = max(at, now) if at is not None and timeline.fits(w.gpus, max(at, now), max(at, now) + length) else None
    due = due if due is not None else timeline.earliest(w.gpus, length, now)
    if due is not None:
        timeline.take(w.gpus, due, due + length)
        reserved.append(Reservation(w.id, w.team_id, w.gpus, due))


def _length(w: Waiting, time_limits: Mapping[int, float]) -> float:
    """How long a reserved workload may hold its GPUs once due: its limit and both allowances."""
    return _length_of(w.id, time_limits)


def _length_of(workload_id: int, time_limits: Mapping[int, float]) -> float:
    return START_SLACK_SECONDS + time_limits.get(workload_id, math.inf) + END_SLACK_SECONDS


def plan_and_backfill(
    teams: Mapping[int, TeamQuota],
    held: Sequence[Held],
    queue: Sequence[Waiting],
    *,
    running: Mapping[int, Sequence[Running]],
    time_limits: Mapping[int, float],
    now: float,
    reserve_after: float | None,
    standing: Mapping[int, Sequence[tuple[Waiting, float]]] | None = None,
    borrowed_hours: Mapping[int, float] | None = None,
    capacity: int | None = None,
    reserve_deeper_after: float = RESERVE_DEEPER_AFTER_SECONDS,
) -> Backfilled:
    """The admission plan (`sharing_plan.plan`) with backfill, planned again without what backfill held
    back until nothing more is, so that the GPUs a held-back workload would have taken go to the next
    one that may have them (a short job behind a long one). The queue is planned in its order, promised
    workloads in their places: a promise is kept by backfill (one that would start late is pinned and
    what would delay it held back), not by going first, which let a small job promised before a large
    one was ahead of it in the order take the GPUs the large one waited for. Promised workloads the pass
    did not read (it reads each team's queue head and first RESERVE_DEPTH) come after those it read,
    earliest due first. `capacity`: as `sharing_plan.plan`'s (forecasts only); `reserve_deeper_after`: as
    `backfill`'s (the GPU type's `reserve_deeper_after_seconds`)."""
    held_back: list[int] = []
    promised = sorted((p for rows in (standing or {}).values() for p in rows), key=lambda p: p[1])
    in_queue = {w.id for w in queue}
    waiting = [*queue, *(w for w, _ in promised if w.id not in in_queue)]
    everyone = list(waiting)  # in order, for the reservations: those held back keep their turn
    while True:
        done = backfill(
            plan(teams, held, waiting, borrowed_hours=borrowed_hours, capacity=capacity),
            teams,
            everyone,
            running=running,
            time_limits=time_limits,
            now=now,
            reserve_after=reserve_after,
            standing=standing,
            held_before=set(held_back),
            reserve_deeper_after=reserve_deeper_after,
        )
        if not done.refused:
            break
        held_back.extend(done.refused)
        gone = set(done.refused)
        waiting = [w for w in waiting if w.id not in gone]
    _admit_due_now(done, teams, held, waiting, everyone, held_back, now=now, borrowed_hours=borrowed_hours,
                   capacity=capacity)  # fmt: skip
    done.plan.waiting.update(dict.fromkeys(held_back, RESERVED))
    done.refused = held_back
    return done


def _admit_due_now(
    done: Backfilled,
    teams: Mapping[int, TeamQuota],
    held: Sequence[Held],
    waiting: list[Waiting],
    everyone: Sequence[Waiting],
    held_back: list[int],
    *,
    now: float,
    borrowed_hours: Mapping[int, float] | None,
    capacity: int | None,
) -> None:
    """Admit, in this pass, what an earlier round held back and the last round reserved for at now: a
    held-back workload is planned again only as a reservation, so one whose GPUs are free now (what held
    it back was moved by a later round) waited for the next pass while its promise ran (the replay's
    passes come only at arrivals and ends). Its block on the team's timeline is the same admitted now as
    reserved now (`START_SLACK` + limit + `END_SLACK` from now), so every other reservation still fits;
    each is admitted only where the plan, asked again with it in its place, admits it and changes nothing
    else it decided (a cohort's room, a per-person cap). In queue order; `done` and `held_back` are
    updated in place."""
    due_now = {r.workload_id: team_id for team_id, rows in done.reservations.items() for r in rows if r.due_at <= now}
    for w in [w for w in everyone if w.id in due_now and w.id in held_back]:
        ids = {x.id for x in waiting} | {w.id}
        trial = [x for x in everyone if x.id in ids]
        again = plan(teams, held, trial, borrowed_hours=borrowed_hours, capacity=capacity)
        others = {v: f for v, f in again.preempt.items() if f != w.id}
        if set(again.admit) != {*done.plan.admit, w.id} or others != done.plan.preempt:
            continue
        waiting[:] = trial
        held_back.remove(w.id)
        done.plan = again
        team_id = due_now[w.id]
        done.reservations[team_id] = [r for r in done.reservations[team_id] if r.workload_id != w.id]
        if not done.reservations[team_id]:
            del done.reservations[team_id]


def _admitted_now(w: Waiting, time_limits: Mapping[int, float], now: float) -> Running:
    return Running(w.gpus, ends_by(started=None, admitted=now, time_limit=time_limits.get(w.id, math.inf), now=now))
