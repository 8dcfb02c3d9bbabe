"""A cohort that submits a lot does not make its forecast grow with the rate (issue 41: flat pages, linear
passes): past ARRIVAL_STEPS arrival times in the day they come in batches (each a little later, none lost),
and a team's simulated queue takes arrivals up to ARRIVALS_QUEUED long, the rest joining as it shortens.
Below both bounds a forecast is what it always was (pure)."""

from __future__ import annotations

from jobs.services.queue.forecast import (
    ARRIVAL_STEPS,
    ARRIVALS_QUEUED,
    ARRIVALS_WITHIN,
    Demand,
    batched,
    expected_arrivals,
    forecast,
)
from jobs.services.queue.sharing_plan import Held, TeamQuota, Waiting, plan

A, B, C = 1, 2, 3
TEAMS = {t: TeamQuota(t, quota=4, borrowing_limit=2) for t in (A, B, C)}


def _arrivals(per_hour: float):
    demand = {t: Demand.single([per_hour] * 24, gpus=1, run_seconds=1800.0) for t in (B, C)}
    return expected_arrivals(demand, hour=0.0)


def _world():
    running = [(Held(100 + i, (A, B, C)[i % 3], 1), 600.0 * (i + 1)) for i in range(12)]
    queued = [Waiting(i, A if i % 2 else B, 1 + i % 2, user_id=i % 3) for i in range(1, 31)]
    durations = {w.id: 3600.0 for w in queued}
    return running, queued, durations


class _Counting:
    """The default plan, counting the steps and the longest queue a step walked."""

    def __init__(self) -> None:
        self.steps = 0
        self.longest = 0

    def __call__(self, teams, held, queued, *, now, capacity):
        self.steps += 1
        self.longest = max(self.longest, len(queued))
        return plan(teams, held, queued, capacity=capacity)


def test_many_arrivals_come_in_at_most_the_bounded_number_of_batches_each_a_little_later_none_lost():
    arrivals = _arrivals(per_hour=60.0)  # two teams, one a minute each: 2,880 in the day
    assert len({a.at for a in arrivals}) > ARRIVAL_STEPS
    kept = batched(arrivals)
    assert len({a.at for a in kept}) <= ARRIVAL_STEPS
    assert sorted(a.waiting.id for a in kept) == sorted(a.waiting.id for a in arrivals)
    at = {a.waiting.id: a.at for a in arrivals}
    width = ARRIVALS_WITHIN / ARRIVAL_STEPS
    assert all(0 <= a.at - at[a.waiting.id] < width + 1e-6 for a in kept)
    # Each team's arrivals keep their order (the sizes in turn, the queue's order).
    for team in (B, C):
        ids = [a.waiting.id for a in kept if a.waiting.team_id == team]
        assert ids == [a.waiting.id for a in arrivals if a.waiting.team_id == team]


def test_a_few_arrivals_keep_their_own_times():
    arrivals = _arrivals(per_hour=2.0)
    assert batched(arrivals) == sorted(arrivals, key=lambda a: a.at)


def test_ten_times_the_arrivals_past_the_bounds_does_not_make_the_forecast_longer():
    running, queued, durations = _world()
    head = [w.id for w in queued if w.team_id == A][:5]
    made = {}
    for per_hour in (60.0, 600.0):
        counting = _Counting()
        forecast(
            TEAMS,
            running,
            queued,
            durations,
            arrivals=_arrivals(per_hour),
            planner=counting,
            until=head,
            horizon=ARRIVALS_WITHIN,
        )
        made[per_hour] = counting
    assert made[600.0].steps <= made[60.0].steps + 5
    # The queue a step walks: the real ones and at most ARRIVALS_QUEUED arrivals a team (two teams arrive).
    assert made[600.0].longest <= len(queued) + 2 * ARRIVALS_QUEUED


def test_arrivals_held_back_by_a_long_queue_still_come_and_take_their_turn():
    # Team B's queue is longer than the bound: its arrivals wait behind it, and start once it has gone.
    running = [(Held(100, A, 1), 60.0)]
    queued = [Waiting(i, B, 1) for i in range(1, ARRIVALS_QUEUED + 11)]
    durations = {w.id: 600.0 for w in queued}
    demand = {B: Demand.single([30.0] * 24, gpus=1, run_seconds=600.0), A: Demand.single([0.0] * 24, 1, 60.0)}
    arrivals = expected_arrivals(demand, hour=0.0, within=3600.0)
    counting = _Counting()
    late = Waiting(999, A, 4)  # A's workload needs B's arrivals to have passed through the cohort's GPUs
    result = forecast(TEAMS, running, [*queued, late], durations, arrivals=arrivals, planner=counting)
    assert all(result[w.id].start_in is not None for w in queued)
    assert result[late.id].start_in is not None
    assert counting.longest <= len(queued) + 1 + ARRIVALS_QUEUED
