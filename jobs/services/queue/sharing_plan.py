"""The admission plan for one cohort and GPU type, as a pure function: who starts, who borrows, who is
preempted to give a lender its quota back, and why the rest wait. No database, no clock.

The model (Kueue's, with lending limits):
- each team has a quota Q; of it, `lendable` = min(lending limit, Q) goes into the cohort's pool and the
  rest, `guaranteed` = Q - lendable, is never lent;
- a team may hold at most Q + borrowing limit;
- what teams hold beyond their guaranteed part comes out of the pool:
  sum over teams of max(0, held - guaranteed) <= sum of lendable.
A team alone (no cohort) is a cohort of one with no borrowing limit: the plan is its plain quota.

Order: the caller gives the queue in order (priority, requeued-first, then FIFO or fair share). The plan
first admits what fits each team's own quota (reclaiming borrowed GPUs if the pool is short), then what
may borrow; best-effort within a team (a smaller workload passes a larger one that does not fit).
Victims are borrowed workloads of teams above their quota, lowest priority then newest first, and only
as many as free enough; nothing within its own team's quota is ever preempted.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from jobs.queue_order import team_order_key


class Reason:
    """Why a queued workload is not admitted yet (shown to people as is)."""

    TEAM_QUOTA = "team quota"
    BORROWING_LIMIT = "borrowing limit"
    COHORT = "cohort"
    USER_CAP = "user cap"
    CLUSTER = "cluster capacity"
    NO_QUOTA = "no quota"
    MIN_RUNTIME = "borrowers' minimum runtime"  # borrowed work it could reclaim has not run long enough yet


@dataclass(frozen=True)
class TeamQuota:
    team_id: int
    quota: int
    borrowing_limit: int = 0
    lending_limit: int | None = None
    user_max_gpus: int | None = None

    @property
    def lendable(self) -> int:
        return self.quota if self.lending_limit is None else min(self.lending_limit, self.quota)

    @property
    def guaranteed(self) -> int:
        return self.quota - self.lendable

    @property
    def ceiling(self) -> int:
        return self.quota + self.borrowing_limit


@dataclass(frozen=True)
class Held:
    """A workload holding GPUs. `order` grows with admission time (newest has the largest);
    `restartable`: preempted, it goes back to the front of its team's queue (only forecasts use it)."""

    id: int
    team_id: int
    gpus: int
    user_id: int = 0
    priority: int = 0
    borrowed: bool = False
    order: float = 0.0
    restartable: bool = False
    # Checkpoint-aware preemption (jobs/services/checkpoints/cost.py): the GPU-seconds a stop now would
    # lose, and whether it has run its minimum runtime (a borrowed job inside it is not taken yet).
    lost: float = 0.0
    preemptible: bool = True


@dataclass(frozen=True)
class Waiting:
    """A queued workload. `created` (epoch seconds) and `requeued` only matter to forecasts, which re-rank
    the queue as it moves (`order_queue`'s order) and put preempted work back at the front."""

    id: int
    team_id: int
    gpus: int
    user_id: int = 0
    priority: int = 0
    created: float = 0.0
    requeued: bool = False


@dataclass
class Plan:
    admit: list[int] = field(default_factory=list)
    borrowed: set[int] = field(default_factory=set)
    # victim id -> the waiting workload it makes room for
    preempt: dict[int, int] = field(default_factory=dict)
    waiting: dict[int, str] = field(default_factory=dict)


class Holding:
    """What a cohort holds, as the totals a plan starts from: GPUs per team and per (team, person), and
    the borrowed workloads (the only ones a plan may take back). A forecast keeps one across its steps,
    adding what starts and removing what ends, instead of a plan summing every held workload each step."""

    def __init__(self, held: Iterable[Held] = ()) -> None:
        self.usage: dict[int, int] = {}
        self.user_usage: dict[tuple[int, int], int] = {}
        self.borrowed: dict[int, Held] = {}
        for h in held:
            self.add(h)

    def add(self, h: Held) -> None:
        self.usage[h.team_id] = self.usage.get(h.team_id, 0) + h.gpus
        key = (h.team_id, h.user_id)
        self.user_usage[key] = self.user_usage.get(key, 0) + h.gpus
        if h.borrowed:
            self.borrowed[h.id] = h

    def remove(self, h: Held) -> None:
        self.usage[h.team_id] -= h.gpus
        self.user_usage[(h.team_id, h.user_id)] -= h.gpus
        self.borrowed.pop(h.id, None)


class _Ledger:
    """Running totals while a plan is made (a copy of the `Holding` it starts from). `held`: the
    borrowed workloads only, which are all a plan looks at (victims, protected work)."""

    def __init__(self, teams: Mapping[int, TeamQuota], holding: Holding, capacity: int | None) -> None:
        self.teams = teams
        self.held = dict(holding.borrowed)
        self.usage = dict.fromkeys(teams, 0)
        self.usage.update(holding.usage)
        self.user_usage = dict(holding.user_usage)
        self.pool_cap = sum(t.lendable for t in teams.values())
        self.capacity = capacity

    def pool_use(self) -> int:
        return sum(max(0, used - self.teams[t].guaranteed) for t, used in self.usage.items() if t in self.teams)

    def pool_after(self, team_id: int, gpus: int) -> int:
        g = self.teams[team_id].guaranteed
        used = self.usage[team_id]
        return self.pool_use() - max(0, used - g) + max(0, used + gpus - g)

    def cluster_short(self, gpus: int) -> bool:
        return self.capacity is not None and sum(self.usage.values()) + gpus > self.capacity

    def take(self, team_id: int, user_id: int, gpus: int) -> None:
        self.usage[team_id] += gpus
        self.user_usage[(team_id, user_id)] = self.user_usage.get((team_id, user_id), 0) + gpus

    def release(self, h: Held) -> None:
        self.usage[h.team_id] -= h.gpus
        self.user_usage[(h.team_id, h.user_id)] -= h.gpus
        del self.held[h.id]


def _victims(ledger: _Ledger, team_id: int, gpus: int) -> list[Held]:
    """The fewest borrowed workloads (lowest priority, then the least work lost, then newest first) whose
    release lets `team_id` take `gpus` within the pool; [] if even all of them would not. Work inside its
    minimum runtime is not taken."""
    candidates = sorted(
        (h for h in ledger.held.values() if h.borrowed and h.team_id != team_id and h.preemptible),
        key=victim_order,
    )
    usage = dict(ledger.usage)
    chosen: list[Held] = []

    def short(usage: Mapping[int, int]) -> bool:
        pool = sum(max(0, u - ledger.teams[t].guaranteed) for t, u in usage.items() if t in ledger.teams)
        g = ledger.teams[team_id].guaranteed
        u = usage[team_id]
        return pool - max(0, u - g) + max(0, u + gpus - g) > ledger.pool_cap

    for h in candidates:
        if not short(usage):
            break
        # Only GPUs beyond the victim team's own quota are reclaimed.
        if usage[h.team_id] <= ledger.teams[h.team_id].quota:
            continue
        usage[h.team_id] -= h.gpus
        chosen.append(h)
    if short(usage):
        return []
    # The fewest: drop any victim (latest chosen first) that is not needed after all.
    for h in reversed(list(chosen)):
        usage[h.team_id] += h.gpus
        if short(usage):
            usage[h.team_id] -= h.gpus
        else:
            chosen.remove(h)
    return chosen


def victim_order(h: Held) -> tuple:
    """Who goes first: the lowest priority; among equals the one whose stop loses the least work (GPUs x
    time since its last checkpoint, or its start); then the newest."""
    return (h.priority, h.lost, -h.order, -h.id)


def plan(
    teams: Mapping[int, TeamQuota],
    held: Sequence[Held],
    queued: Sequence[Waiting],
    *,
    reclaim: bool = True,
    capacity: int | None = None,
    borrowed_hours: Mapping[int, float] | None = None,
    holding: Holding | None = None,
) -> Plan:
    """Decide admissions for one cohort and GPU type. `queued` is in queue order.

    `capacity` (GPUs of the type the cohort can physically get) is only given by forecasts; admission
    proper leaves the physical fit to the Kubernetes scheduler. `borrowed_hours` (per team, its decayed
    borrowed GPU-hours; a cohort with fair borrowing): borrowing goes first to the team with the least,
    not to the first in the queue (`borrowing_order`). `holding`: what is held as kept totals (`Holding`),
    used instead of `held` (a forecast's steps: the plan then costs nothing per held workload).
    """
    ledger = _Ledger(teams, holding if holding is not None else Holding(held), capacity)
    result = Plan()
    decided: set[int] = set()
    for borrowing in (False, True):
        smallest_refused: dict[int, int] = {}
        for w in borrowing_order(queued, borrowed_hours) if borrowing else queued:
            if w.id in decided:
                continue
            team = teams.get(w.team_id)
            if team is None:
                result.waiting[w.id] = Reason.NO_QUOTA
                continue
            refused = smallest_refused.get(w.team_id)
            if refused is not None and w.gpus >= refused:
                result.waiting.setdefault(w.id, Reason.TEAM_QUOTA)
                continue
            if team.user_max_gpus is not None and (
                ledger.user_usage.get((w.team_id, w.user_id), 0) + w.gpus > team.user_max_gpus
            ):
                result.waiting[w.id] = Reason.USER_CAP
                continue
            own = ledger.usage[w.team_id] + w.gpus <= team.quota
            reason = _try(ledger, team, w, own=own, borrowing=borrowing, reclaim=reclaim, result=result)
            if reason is None:
                decided.add(w.id)
                result.waiting.pop(w.id, None)
                result.admit.append(w.id)
                if not own:
                    result.borrowed.add(w.id)
            else:
                result.waiting[w.id] = reason
                smallest_refused[w.team_id] = min(w.gpus, refused if refused is not None else w.gpus)
    return result


def borrowing_order(queued: Sequence[Waiting], borrowed_hours: Mapping[int, float] | None) -> list[Waiting]:
    """The order in which queued work may borrow: by priority, then (fair borrowing) the team that has
    borrowed least recently first; otherwise, and among equals, the queue's own order."""
    if not borrowed_hours:
        return list(queued)
    return sorted(queued, key=lambda w: (-w.priority, borrowed_hours.get(w.team_id, 0.0)))  # stable


def _try(ledger: _Ledger, team: TeamQuota, w: Waiting, *, own: bool, borrowing: bool, reclaim: bool, result: Plan):
    """Admit `w` into the ledger if it may start now; else the reason it waits."""
    if not borrowing and not own:
        return Reason.TEAM_QUOTA  # its turn to borrow comes after every team's own-quota work
    if borrowing and not own and ledger.usage[w.team_id] + w.gpus > team.ceiling:
        return Reason.BORROWING_LIMIT if team.borrowing_limit else Reason.TEAM_QUOTA
    if ledger.cluster_short(w.gpus):
        return Reason.CLUSTER
    if ledger.pool_after(w.team_id, w.gpus) > ledger.pool_cap:
        if not own or not reclaim:
            return Reason.COHORT
        victims = _victims(ledger, w.team_id, w.gpus)
        if not victims:
            protected = any(h.borrowed and not h.preemptible and h.team_id != w.team_id for h in ledger.held.values())
            return Reason.MIN_RUNTIME if protected else Reason.COHORT
        for h in victims:
            ledger.release(h)
            result.preempt[h.id] = w.id
    ledger.take(w.team_id, w.user_id, w.gpus)
    return None


# --- queue order ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueEntry:
    """A queued workload as ordering needs it; `created` and `requeued` are epoch seconds."""

    id: int
    team_id: int
    user_id: int
    gpus: int
    priority: int
    created: float
    requeued: float | None = None


def team_queues(
    entries: Iterable[QueueEntry],
    fair_usage: Mapping[int, Mapping[int, float]],
    *,
    aging_now: float | None = None,
) -> dict[int, list[QueueEntry]]:
    """Each team's queue in its own order (fair share where the team uses it, keyed by team id in
    `fair_usage`; aged to `aging_now` where the entries' GPU type ages)."""
    by_team: dict[int, list[QueueEntry]] = {}
    for e in entries:
        by_team.setdefault(e.team_id, []).append(e)
    for team_id, team_entries in by_team.items():
        usage = fair_usage.get(team_id)
        team_entries.sort(key=lambda e: team_order_key(e, usage, aging_now=aging_now))
    return by_team


def order_queue(
    entries: Iterable[QueueEntry],
    fair_usage: Mapping[int, Mapping[int, float]],
    *,
    aging_now: float | None = None,
) -> list[Waiting]:
    """The cohort's queue in admission order: each team's own order (`team_queues`), teams interleaved by
    priority, then by place in their own queue."""
    return order_ranked(
        (rank, e)
        for team_entries in team_queues(entries, fair_usage, aging_now=aging_now).values()
        for rank, e in enumerate(team_entries)
    )


def order_ranked(ranked: Iterable[tuple[int, QueueEntry]]) -> list[Waiting]:
    """The cohort's queue in admission order from (place in its team's own queue, entry) pairs: by
    priority, then by that place, then by age. Some of a team's entries may be missing (`queue_head`):
    the others keep their places, so teams interleave as they would with every entry present."""
    ordered = sorted(ranked, key=lambda pair: (-pair[1].priority, pair[0], pair[1].created, pair[1].id))
    return [
        Waiting(e.id, e.team_id, e.gpus, e.user_id, e.priority, e.created, e.requeued is not None) for _, e in ordered
    ]


# --- how deep into a team's queue a plan can reach ---------------------------------------------------
# A plan walks the whole queue, but only a few entries per team can change anything: the rest are
# skipped (a smaller one was refused) or refused by the per-person cap, and neither changes the ledger or
# what later entries see. `queue_head` keeps, per team, entries that a plan could admit or refuse, so an
# admission pass reads those instead of its whole queue (the pass reads them in SQL, as written here).
#
# Why it is enough. A plan never lets a team hold more than quota + borrowing limit, and only borrowed
# work is ever preempted, so it admits at most `room` = ceiling - what the team holds on its own quota.
# Within one round of the plan (own quota, then borrowing) the entries of one size that it considers are
# admitted one after another until one is refused; after that every later entry of that size or larger
# is skipped. So over both rounds at most room // size + 1 entries of each size are admitted or refused,
# the first ones of that size in the team's order; an entry larger than `room` is never admitted, and its
# refusal only makes later ones as large skip. With a per-person cap, entries refused by the cap are
# passed over without a mark, so entries are counted per person and size instead, and the cap bounds the
# room; that holds while a person's use only grows during the plan, i.e. unless the team has borrowed
# work a lender could reclaim (then the whole queue is read). Proven against the full plan by a property
# test (tests/engine/test_admission_plan.py).
@dataclass(frozen=True)
class Room:
    """How deep into a team's queue a plan can reach: `gpus`, the most it could admit for the team (None:
    no bound, the whole queue is needed); `per_person`: count entries per person and size."""

    gpus: int | None
    per_person: bool = False


NO_ROOM = Room(0)  # a team without a quota for the type: nothing of its queue is ever admitted


def admission_room(teams: Mapping[int, TeamQuota], held: Iterable[Held]) -> dict[int, Room]:
    """Per team of the cohort (and GPU type), how deep a plan over `held` could reach into its queue."""
    own: dict[int, int] = {}
    borrowing: set[int] = set()
    for h in held:
        if h.borrowed:
            borrowing.add(h.team_id)
        else:
            own[h.team_id] = own.get(h.team_id, 0) + h.gpus
    rooms: dict[int, Room] = {}
    for team_id, team in teams.items():
        gpus = team.ceiling - own.get(team_id, 0)
        if team.user_max_gpus is None:
            rooms[team_id] = Room(gpus)
        elif team_id in borrowing:
            rooms[team_id] = Room(None)  # a reclaim could lower a person's use, and let the cap pass again
        else:
            rooms[team_id] = Room(min(gpus, team.user_max_gpus), per_person=True)
    return rooms


def queue_head(team_queue: Sequence[QueueEntry], room: Room) -> list[tuple[int, QueueEntry]]:
    """(place, entry) for the entries of one team's queue (in its own order) that a plan with this room
    could admit or refuse; the first entry always, so a pass knows that the team waits."""
    if room.gpus is None:
        return list(enumerate(team_queue))
    seen: dict[tuple[int, int], int] = {}
    head: list[tuple[int, QueueEntry]] = []
    for place, e in enumerate(team_queue):
        key = (e.gpus, e.user_id if room.per_person else 0)
        nth = seen[key] = seen.get(key, 0) + 1
        if place == 0 or e.gpus == 0 or (e.gpus <= room.gpus and (nth - 1) * e.gpus <= room.gpus):
            head.append((place, e))
    return head


def decayed_usage(intervals: Iterable[tuple[int, float, float, int]], now: float, half_life: float) -> dict[int, float]:
    """GPU-hours per user with exponential decay: (user, start, end, gpus) intervals in epoch seconds;
    usage `half_life` seconds ago counts half (Slurm's fair-share decay), integrated exactly."""

    rate = math.log(2) / half_life
    totals: dict[int, float] = {}
    for user, start, end, gpus in intervals:
        end = min(end, now)
        if end <= start:
            continue
        weight = (math.exp(-rate * (now - end)) - math.exp(-rate * (now - start))) / rate
        totals[user] = totals.get(user, 0.0) + gpus * weight / 3600.0
    return totals


# --- what runs, settled after a change ------------------------------------------------------------
@dataclass
class Settled:
    """What to change about running work once the facts moved (work ended, an admin lowered a limit):
    workloads whose borrowed mark flips, and borrowed workloads to preempt because their team or the
    cohort now holds more than the limits allow (victim id -> the team whose limit it exceeds)."""

    now_borrowed: set[int] = field(default_factory=set)
    now_own: set[int] = field(default_factory=set)
    preempt: dict[int, int] = field(default_factory=dict)


def marks(teams: Mapping[int, TeamQuota], held: Sequence[Held]) -> set[int]:
    """Which held workloads are borrowed: those beyond their team's quota. Work marked own stays own while
    it fits (oldest first); borrowed work, oldest first, becomes own once the quota covers it again; own
    work beyond a lowered quota (newest first) becomes borrowed."""
    borrowed: set[int] = set()
    by_team: dict[int, list[Held]] = {}
    for h in held:
        by_team.setdefault(h.team_id, []).append(h)
    for team_id, team_held in by_team.items():
        team = teams.get(team_id)
        if team is None:
            continue
        oldest_first = sorted(team_held, key=lambda h: (h.order, h.id))
        own = 0
        for h in oldest_first:
            if not h.borrowed and own + h.gpus <= team.quota:
                own += h.gpus
            elif not h.borrowed:
                borrowed.add(h.id)
        for h in oldest_first:
            if h.borrowed and own + h.gpus <= team.quota:
                own += h.gpus
            elif h.borrowed:
                borrowed.add(h.id)
    return borrowed


@dataclass
class _Usage:
    """GPUs each team of a cohort holds, against its ceiling and the pool's lending caps."""

    teams: Mapping[int, TeamQuota]
    held: dict[int, int]
    pool_cap: int

    @classmethod
    def of(cls, teams: Mapping[int, TeamQuota], held: Sequence[Held]) -> _Usage:
        usage: dict[int, int] = dict.fromkeys(teams, 0)
        for h in held:
            if h.team_id in usage:
                usage[h.team_id] += h.gpus
        return cls(teams, usage, sum(t.lendable for t in teams.values()))

    def team_over(self, team_id: int) -> bool:
        return self.held[team_id] > self.teams[team_id].ceiling

    def pool_over(self) -> bool:
        return sum(max(0, self.held[t] - self.teams[t].guaranteed) for t in self.teams) > self.pool_cap

    def give_back(self, h: Held, preempt: dict[int, int]) -> None:
        self.held[h.team_id] -= h.gpus
        preempt[h.id] = h.team_id


def _victim_order(teams: Mapping[int, TeamQuota], held: Sequence[Held], borrowed: set[int]) -> list[Held]:
    """The borrowed workloads that may be preempted, lowest priority and newest first."""
    return sorted(
        (h for h in held if h.id in borrowed and h.team_id in teams),
        key=lambda h: (h.priority, -h.order, -h.id),
    )


def _choose_victims(candidates: list[Held], usage: _Usage, preempt: dict[int, int]) -> None:
    """First each team above its ceiling gives back its own borrowed work, then the pool is made to fit."""
    for h in candidates:
        if usage.team_over(h.team_id):
            usage.give_back(h, preempt)
    for h in candidates:
        if not usage.pool_over():
            break
        if h.id not in preempt:
            usage.give_back(h, preempt)


def _spare_unneeded(preempt: dict[int, int], held: Sequence[Held], usage: _Usage) -> None:
    """The fewest: give back any victim (latest chosen first) that is not needed after all."""
    by_id = {h.id: h for h in held}
    for victim_id in reversed(list(preempt)):
        h = by_id[victim_id]
        usage.held[h.team_id] += h.gpus
        if usage.team_over(h.team_id) or usage.pool_over():
            usage.held[h.team_id] -= h.gpus
        else:
            del preempt[victim_id]


def settle(teams: Mapping[int, TeamQuota], held: Sequence[Held]) -> Settled:
    """Re-mark what runs (`marks`) and pick the fewest borrowed workloads to preempt (lowest priority,
    newest first) so that no team holds more than its quota + borrowing limit and the cohort lends no
    more than its teams' lending caps allow. Work within its team's quota is never a victim, and never
    needs to be: teams within their quotas always fit the pool."""
    now_borrowed = marks(teams, held)
    result = Settled(
        now_borrowed={h.id for h in held if h.id in now_borrowed and not h.borrowed},
        now_own={h.id for h in held if h.id not in now_borrowed and h.borrowed and h.team_id in teams},
    )
    usage = _Usage.of(teams, held)
    _choose_victims(_victim_order(teams, held, now_borrowed), usage, result.preempt)
    _spare_unneeded(result.preempt, held, usage)
    return result
