"""When will a queued workload start? A forward simulation of admission, as a pure function.

Starting from what holds GPUs now (each expected to end at its time limit, or sooner where its owner's
history says runs are usually shorter, scaled by the limit asked for where their limits tracked their runs) and the queue in order, the simulation repeats the admission
plan (`sharing_plan.plan`) at every expected end, until every queued workload has a start or the
horizon is reached. `capacity` (GPUs of the type the cohort can physically get) makes the forecast wait
for the cluster too, where admission leaves that to the Kubernetes scheduler.
"""

from __future__ import annotations

import functools
import heapq
import math
import statistics
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from jobs import queue_order
from jobs.services.queue.sharing_plan import Held, Holding, Plan, TeamQuota, Waiting, plan

HORIZON_SECONDS = 7 * 24 * 3600.0
MAX_QUEUED = 200  # workloads forecast per cohort and type; those further back get no estimate (cost bound)
MIN_REMAINING_SECONDS = 30.0  # something past its expected end still needs a moment to be seen ending


@dataclass(frozen=True)
class Estimate:
    """`start_in`: seconds from now (None: not within the horizon); `reason`: why it waits now."""

    start_in: float | None
    reason: str


Past = float | tuple[float, float | None]  # a past run's seconds, or (seconds, the time limit it ran under)
MIN_PAIRED_RUNS = 5  # past runs with known limits before their limits are trusted to say anything


def limit_slope(history: Sequence[Past]) -> float:
    """How closely an owner's run lengths followed the time limits they asked for: the least-squares
    slope of log(run) on log(limit) over their past runs, within 0..1. 1: runs grow in proportion to
    the limit (asked for as a multiple of the expected run); 0: the limit says nothing (always the
    same, or unrelated), or fewer than MIN_PAIRED_RUNS runs have a known limit. Kept per history: a
    forecast asks it of the same owner's runs for each of their workloads."""
    try:
        return _slope(tuple(history))
    except TypeError:  # a run given as a list: not hashable
        return _slope.__wrapped__(history)


@functools.lru_cache(maxsize=4096)
def _slope(history: Sequence[Past]) -> float:
    xs, ys = [], []
    for seconds, limit in _paired(history):
        if limit:
            xs.append(math.log(limit))
            ys.append(math.log(max(1.0, seconds)))
    n = len(xs)
    if n < MIN_PAIRED_RUNS:
        return 0.0
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx <= 1e-12:
        return 0.0
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    return min(1.0, max(0.0, sxy / sxx))


def _paired(history: Sequence[Past]) -> list[tuple[float, float | None]]:
    return [(h, None) if isinstance(h, int | float) else h for h in history]


def like_this(time_limit: float, history: Sequence[Past]) -> list[float]:
    """The owner's past runs as a run under `time_limit` would last: each scaled by (this limit ÷ the
    limit it ran under) ** `limit_slope`, so someone whose limits track their runs gets an estimate
    that tracks this limit, and someone whose limits say nothing gets their plain past runs. Never
    beyond `time_limit`, which ends a run for sure."""
    pairs = _paired(history)
    slope = limit_slope(history) if time_limit > 0 else 0.0
    top = float(time_limit)
    if not slope:
        return [min(top, float(seconds)) for seconds, _ in pairs]
    return [min(top, seconds * (top / limit) ** slope if limit else float(seconds)) for seconds, limit in pairs]


def expected_run(time_limit: float, history: Sequence[Past] = ()) -> float:
    """How long a run is expected to last: the median of the owner's past runs as this one would last
    them (`like_this`) where there is history, never beyond the time limit, which ends it for sure."""
    if not history:
        return float(time_limit)
    return float(statistics.median(like_this(time_limit, history)))


def remaining(expected: float, elapsed: float, time_limit: float, history: Sequence[Past] = ()) -> float:
    """Seconds a running workload should still hold its GPUs.

    With history: the median of the owner's past runs (as this one would last them, `like_this`) that
    lasted longer than this one has so far, less what it ran (a run that outlived most of its owner's
    runs is usually near its end); without: its expected run, or its time limit once it outlived that."""
    cap = max(MIN_REMAINING_SECONDS, time_limit - elapsed)
    if history:
        longer = [h for h in like_this(time_limit, history) if h > elapsed]
        left = statistics.median(longer) - elapsed if longer else MIN_REMAINING_SECONDS
        return min(cap, max(MIN_REMAINING_SECONDS, left))
    left = expected - elapsed
    if left <= 0:
        left = time_limit - elapsed
    return max(MIN_REMAINING_SECONDS, left)


@dataclass(frozen=True)
class Size:
    """One size of workload a team asks for: `gpus`, its `share` of the team's arrivals, and how long
    such a run lasts (`run_seconds`, the mean of those that ran: the GPU time it takes from the others)."""

    gpus: int
    share: float
    run_seconds: float


@dataclass(frozen=True)
class Demand:
    """What a team is expected to submit on one GPU type, from its history: arrivals per hour at each hour
    of the (local) day, and the sizes it asks for, each with its share of arrivals and run length."""

    per_hour: tuple[float, ...]  # 24 values
    sizes: tuple[Size, ...]

    @classmethod
    def single(cls, per_hour: Sequence[float], gpus: int, run_seconds: float) -> Demand:
        """A team that always asks for `gpus` GPUs for `run_seconds`."""
        return cls(tuple(per_hour), (Size(gpus, 1.0, run_seconds),))


@dataclass(frozen=True)
class Arrival:
    """An expected (not yet submitted) workload: `at` seconds from now, queued at the back of its team."""

    at: float
    waiting: Waiting
    run_seconds: float


ARRIVALS_WITHIN = 24 * 3600.0  # expected arrivals are simulated this far ahead
# Cost bounds for a cohort that submits a lot (more live work means more arrivals: Little's law). Below
# them a forecast is exact; above, its steps and the queue each step walks stop growing with the rate.
ARRIVAL_STEPS = 288  # distinct arrival times: more arrivals than this come in batches (5 minutes over a day)
ARRIVALS_QUEUED = 50  # a team's simulated queue takes arrivals up to this length; the rest join as it shortens
ARRIVAL_ID = -(10**9)  # expected arrivals get ids from here down (no workload has them)


def _sizes_in_turn(sizes: Sequence[Size]) -> Iterator[Size]:
    """The sizes of a team's 1st, 2nd, ... expected arrivals, so that after any k of them each size has
    come k x its share of times, give or take less than one (Tijdeman's chairman assignment: of the sizes
    not already ahead of their share, the one that would soonest fall behind it; with n sizes none is
    ever more than 1 - 1/(2n - 2) away). A team that asks for 1 GPU as often as for 4 is expected to
    submit 1, 4, 1, 4, ...: never the 2 or 3 of their mean, which would fit holes neither size fits and
    leave room both would take."""
    sizes = [s for s in sizes if s.gpus > 0 and s.share > 0]
    total = sum(s.share for s in sizes)
    shares = [s.share / total for s in sizes]
    n = len(sizes)
    slack = 1 - 1 / (2 * n - 2) if n > 1 else 0.0
    came = [0] * n
    k = 0
    while sizes:
        k += 1
        # Sizes whose turn it may be: taking one now leaves it at most `slack` ahead of its share (one at
        # least: their shortfalls sum to 1, so the largest is 1/n, at least the 1 - slack asked for).
        due = [i for i in range(n) if k * shares[i] - came[i] >= 1 - slack - 1e-9]
        # The one that falls `slack` behind its share soonest; ties to the smaller.
        i = min(due, key=lambda i: ((came[i] + slack) / shares[i], sizes[i].gpus))
        came[i] += 1
        yield sizes[i]


def expected_arrivals(demand: Mapping[int, Demand], *, hour: float, within: float = ARRIVALS_WITHIN) -> list[Arrival]:
    """Each team's expected arrivals over the next `within` seconds, from `hour` (local hour of the day,
    fractional), as fixed points, not samples: the k-th one when the team's expected count of arrivals
    reaches k - 1/3 (about the median time of a Poisson process's k-th arrival), of the sizes the team
    asks for in their shares (`_sizes_in_turn`)."""
    arrivals: list[Arrival] = []
    next_id = ARRIVAL_ID
    for team_id, d in sorted(demand.items()):
        if not any(s.gpus > 0 and s.share > 0 for s in d.sizes) or not any(r > 0 for r in d.per_hour):
            continue
        sizes = _sizes_in_turn(d.sizes)
        expected, target, t = 0.0, 2 / 3, 0.0
        while t < within:
            h = hour + t / 3600.0
            rate = d.per_hour[int(h) % 24] / 3600.0  # per second, constant until the next whole hour
            step = min(within - t, (math.floor(h) + 1 - h) * 3600.0) or 3600.0
            while rate > 0 and expected + rate * step >= target:
                at = t + (target - expected) / rate
                size = next(sizes)
                arrivals.append(Arrival(at, Waiting(next_id, team_id, size.gpus, next_id, 0, 0.0), size.run_seconds))
                next_id -= 1
                target += 1.0
            expected += rate * step
            t += step
    arrivals.sort(key=lambda a: (a.at, -a.waiting.id))
    return arrivals


def demand_from(rows: Iterable[tuple[int, int, int, int, int, float]], days: float) -> dict[int, Demand]:
    """Each team's `Demand` from `days` days of history, given rows per (team, local hour of creation,
    GPUs asked for): workloads created, how many ran to an end, and those runs' seconds."""
    per_hour: dict[int, list[float]] = {}
    sums: dict[int, dict[int, list[float]]] = {}  # team -> GPUs -> [created, ran, run seconds]
    for team_id, hour, gpus, created, ran, seconds in rows:
        per_hour.setdefault(team_id, [0.0] * 24)[hour % 24] += created / max(1.0, days)
        total = sums.setdefault(team_id, {}).setdefault(gpus, [0, 0, 0.0])
        for i, value in enumerate((created, ran, seconds)):
            total[i] += value
    demand = {}
    for team_id, by_size in sums.items():
        created = sum(c for c, _, _ in by_size.values())
        ran = sum(r for _, r, _ in by_size.values())
        if not created:
            continue
        # A size none of whose runs ended yet is expected to run as long as the team's runs do.
        usual = sum(s for _, _, s in by_size.values()) / ran if ran else 3600.0
        sizes = tuple(
            Size(gpus, c / created, max(60.0, s / r if r else usual))
            for gpus, (c, r, s) in sorted(by_size.items())
            if c and gpus > 0
        )
        demand[team_id] = Demand(tuple(per_hour[team_id]), sizes)
    return demand


class Planner(Protocol):
    """An admission plan for a forecast step, `now` seconds from the forecast's start."""

    def __call__(
        self,
        teams: Mapping[int, TeamQuota],
        held: Sequence[Held],
        queued: Sequence[Waiting],
        *,
        now: float,
        capacity: int | None,
    ) -> Plan: ...


def _in_order(queues: Mapping[int, list[Waiting]]) -> list[Waiting]:
    """The cohort's queue as `order_queue` ranks it: priority, place in the team's own queue, creation."""
    ranked = [((-w.priority, rank, w.created, w.id), w) for team in queues.values() for rank, w in enumerate(team)]
    ranked.sort(key=lambda pair: pair[0])
    return [w for _, w in ranked]


@dataclass(frozen=True)
class Aging:
    """Where the GPU type ages (`aging`): the forecast orders each team's queue again at every step, as
    admission will then, since GPUs x time waited keeps growing while they wait. Without it an estimate
    made now kept today's order for the whole forecast, and a large workload that will overtake smaller
    ones within the hour was forecast to start behind all of them. `start`: the forecast's now (epoch
    seconds); `usage`: per team that uses fair share, each person's decayed usage (held as it is now)."""

    start: float
    usage: Mapping[int, Mapping[int, float]]

    def order(self, team_id: int, queue: list[Waiting], at: float) -> None:
        """Sort one team's queue in place as admission would order it `at` seconds from the start:
        `queue_order.TEAM_ORDER`, requeued work kept in its order."""
        usage = self.usage.get(team_id) or {}
        moment = self.start + at
        place = {w.id: i for i, w in enumerate(queue)}

        def key(w: Waiting) -> tuple:
            return queue_order.sort_key({
                "priority": w.priority,
                "requeued": place[w.id] if w.requeued else None,  # requeued work keeps its order
                "fair_share": usage.get(w.user_id, 0.0),
                "aged": queue_order.aged_weight(w.gpus, w.created, moment),
                "created": w.created,
                "id": w.id,
            })  # fmt: skip

        queue.sort(key=key)


def _requeue(queue: list[Waiting], w: Waiting) -> None:
    """Put preempted `w` back at the front of its team's queue: after higher priorities and earlier requeues."""
    at = next((i for i, q in enumerate(queue) if (q.priority, q.requeued) < (w.priority, True)), len(queue))
    queue.insert(at, w)


def batched(
    arrivals: Sequence[Arrival], *, within: float = ARRIVALS_WITHIN, steps: int = ARRIVAL_STEPS
) -> list[Arrival]:
    """The arrivals in time order; where they come at more than `steps` distinct times, each is moved to the
    end of its slot of `within` / `steps` seconds (at most that much later), so a forecast takes at most
    `steps` arrival steps however many arrive (each arrival is still there, in its team's order)."""
    ordered = sorted(arrivals, key=lambda a: a.at)
    if len({a.at for a in ordered}) <= steps:
        return ordered
    width = within / steps
    return [replace(a, at=math.ceil(a.at / width) * width) for a in ordered]


def _arrive(
    queues: dict[int, list[Waiting]],
    backlog: dict[int, list[Waiting]],
    arrivals: Sequence[Arrival],
    next_arrival: int,
    *,
    now: float,
    latest: float,
) -> int:
    """Queue the expected arrivals due by `now`, as created after every real one; the index of the next.
    A team's queue takes them up to ARRIVALS_QUEUED long; the rest wait in `backlog`, in order (`_top_up`)."""
    while next_arrival < len(arrivals) and arrivals[next_arrival].at <= now:
        a = arrivals[next_arrival]
        next_arrival += 1
        backlog.setdefault(a.waiting.team_id, []).append(replace(a.waiting, created=latest + a.at))
    _top_up(queues, backlog)
    return next_arrival


def _top_up(queues: dict[int, list[Waiting]], backlog: dict[int, list[Waiting]]) -> bool:
    """Move arrivals from each team's backlog to the back of its queue while the queue is shorter than
    ARRIVALS_QUEUED; whether any moved. Those further back are behind every one moved, in their team's
    order, so only a plan reaching that deep into one team's queue in one step could tell."""
    moved = False
    for team_id, waiting in backlog.items():
        if not waiting:
            continue
        queue = queues.setdefault(team_id, [])
        room = ARRIVALS_QUEUED - len(queue)
        if room > 0:
            queue.extend(waiting[:room])
            del waiting[:room]
            moved = True
    return moved


class _Running:
    """What runs during a forecast, kept across its steps so that a step costs nothing per running workload:
    the workloads with their expected ends, the same as totals (`Holding`, what each plan starts from) and
    the ends as a heap (entries of workloads stopped or started again are skipped when met)."""

    def __init__(self, running: Sequence[tuple[Held, float]]) -> None:
        self.active: dict[int, tuple[Held, float]] = {h.id: (h, end) for h, end in running}
        self.holding = Holding(h for h, _ in self.active.values())
        self.ends = [(end, i) for i, (_, end) in self.active.items()]
        heapq.heapify(self.ends)

    def held(self) -> list[Held]:
        return [h for h, _ in self.active.values()]

    def start(self, held: Held, end: float) -> None:
        self.active[held.id] = (held, end)
        self.holding.add(held)
        heapq.heappush(self.ends, (end, held.id))

    def stop(self, workload_id: int) -> tuple[Held | None, float]:
        h, end = self.active.pop(workload_id, (None, 0.0))
        if h is not None:
            self.holding.remove(h)
        return h, end

    def next_end(self) -> float | None:
        while self.ends and self.active.get(self.ends[0][1], (None, None))[1] != self.ends[0][0]:
            heapq.heappop(self.ends)  # preempted, or requeued and started again with another end
        return self.ends[0][0] if self.ends else None

    def end_by(self, now: float) -> None:
        """Those whose run has ended by `now` hold nothing any more."""
        while self.ends and self.ends[0][0] <= now:
            end, i = heapq.heappop(self.ends)
            if self.active.get(i, (None, None))[1] == end:
                self.stop(i)


def _requeue_preempted(
    result: Plan,
    running: _Running,
    queues: dict[int, list[Waiting]],
    runs: dict[int, float],
    *,
    now: float,
) -> None:
    """Stop the plan's victims; a restartable one waits again at the front of its team's queue for the rest
    of its run."""
    for victim in result.preempt:
        h, end = running.stop(victim)
        if h is not None and h.restartable:
            runs.setdefault(h.id, end - now)
            again = Waiting(h.id, h.team_id, h.gpus, h.user_id, h.priority, h.order, requeued=True)
            _requeue(queues.setdefault(h.team_id, []), again)


def _start_admitted(
    result: Plan,
    queues: dict[int, list[Waiting]],
    running: _Running,
    *,
    runs: Mapping[int, float],
    waiting: set[int],
    starts: dict[int, float],
    now: float,
    newest: float,
) -> None:
    """Move the plan's admitted work from the queues to what runs, noting when the really waiting ones start."""
    admitted = set(result.admit)
    for team_queue in queues.values():
        for w in team_queue:
            if w.id not in admitted:
                continue
            if w.id in waiting:
                starts[w.id] = now
            held = Held(w.id, w.team_id, w.gpus, w.user_id, w.priority, w.id in result.borrowed, newest + now)
            running.start(held, now + max(1.0, runs.get(w.id, 3600.0)))
        team_queue[:] = [w for w in team_queue if w.id not in admitted]


def _next_event(running: _Running, arrivals: Sequence[Arrival], next_arrival: int) -> float | None:
    """When something next ends or arrives; None when nothing will."""
    events = [end] if (end := running.next_end()) is not None else []
    if next_arrival < len(arrivals):
        events.append(arrivals[next_arrival].at)
    return min(events, default=None)


def _step_plan(
    teams: Mapping[int, TeamQuota],
    running: _Running,
    queues: Mapping[int, list[Waiting]],
    *,
    planner: Planner | None,
    now: float,
    capacity: int | None,
) -> Plan:
    """The admission plan at one step: from the kept totals, or the given planner's (it reads the held list)."""
    if planner is None:
        return plan(teams, (), _in_order(queues), capacity=capacity, holding=running.holding)
    return planner(teams, running.held(), _in_order(queues), now=now, capacity=capacity)


def _simulate(
    teams: Mapping[int, TeamQuota],
    running: _Running,
    queues: dict[int, list[Waiting]],
    runs: dict[int, float],
    arrivals: Sequence[Arrival],
    *,
    waiting: set[int],
    capacity: int | None,
    horizon: float,
    latest: float,
    newest: float,
    planner: Planner | None = None,
    aged: Aging | None = None,
) -> tuple[dict[int, float], Plan | None]:
    """Play the plan forward from event to event (a run ends, work arrives) until every waiting workload has
    started, nothing more happens or the horizon is passed: when each waiting one starts, and the first plan."""
    next_arrival = 0
    backlog: dict[int, list[Waiting]] = {}  # arrivals due, waiting to join their team's queue (`_arrive`)
    starts: dict[int, float] = {}
    first: Plan | None = None
    now: float | None = 0.0
    for _ in range(10 * (len(waiting) + len(running.active) + len(arrivals)) + 10):
        next_arrival = _arrive(queues, backlog, arrivals, next_arrival, now=now, latest=latest)
        if aged is not None:
            for team_id, team_queue in queues.items():
                aged.order(team_id, team_queue, now)
        result = _step_plan(teams, running, queues, planner=planner, now=now, capacity=capacity)
        if first is None:
            first = result
        _requeue_preempted(result, running, queues, runs, now=now)
        _start_admitted(result, queues, running, runs=runs, waiting=waiting, starts=starts, now=now, newest=newest)
        if waiting <= starts.keys():
            break
        if result.admit and _top_up(queues, backlog):
            continue  # arrivals held back by the queue's length join it and may start now too
        now = _next_event(running, arrivals, next_arrival)
        if now is None or now > horizon:
            break  # nothing ends and nothing comes (the rest never fits), or beyond the horizon
        running.end_by(now)
    return starts, first


def forecast(
    teams: Mapping[int, TeamQuota],
    running: Iterable[tuple[Held, float]],
    queued: Sequence[Waiting],
    durations: Mapping[int, float],
    *,
    capacity: int | None = None,
    horizon: float = HORIZON_SECONDS,
    arrivals: Sequence[Arrival] = (),
    planner: Planner | None = None,
    until: Collection[int] | None = None,
    aged: Aging | None = None,
) -> dict[int, Estimate]:
    """Estimated start of each queued workload. `running`: (held, seconds until it ends); `durations`:
    expected run of each queued workload by id (and of running ones, should a preemption requeue them);
    `arrivals`: work expected to be submitted meanwhile (`expected_arrivals`), which can come first: a
    lender's own work takes back what a borrower waits for. `planner`: the admission plan at each step
    (seconds from now; default `sharing_plan.plan`), e.g. one that keeps reservations (`forecast_backfill`).
    `until`: the ids someone will read (a page's first waiting); the simulation stops once they have started,
    so those behind them get no estimate, and those read get the same as from a full forecast (the steps
    until then are the same). `aged`: where the GPU type ages, the queue is ordered again at every step."""
    running = list(running)
    waiting = {w.id for w in queued[:MAX_QUEUED]}
    if until is not None:
        waiting &= set(until)
    queues: dict[int, list[Waiting]] = {}
    for w in queued[:MAX_QUEUED]:
        queues.setdefault(w.team_id, []).append(w)
    starts, first = _simulate(
        teams,
        _Running(running),
        queues,
        dict(durations) | {a.waiting.id: a.run_seconds for a in arrivals},
        batched(arrivals),
        waiting=waiting,
        capacity=capacity,
        horizon=horizon,
        planner=planner,
        aged=aged,
        latest=max((w.created for w in queued), default=0.0),
        # admitted in the forecast: newer than all
        newest=max((h.order for h, _ in running), default=0.0) + 1.0,
    )
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
