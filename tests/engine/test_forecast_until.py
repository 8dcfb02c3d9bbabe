"""A page reads the start estimates of a team's first few waiting workloads only: the forecast stops once
those have started (pure), and what they read is what the full forecast says."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.services.queue.forecast import forecast
from jobs.services.queue.sharing_plan import Held, TeamQuota, Waiting

A, B = 1, 2
TEAMS = {A: TeamQuota(A, quota=4, borrowing_limit=2), B: TeamQuota(B, quota=4, borrowing_limit=2)}


def _world(sizes: list[int]):
    running = [(Held(100 + i, A if i % 2 else B, 1), 600.0 * (i + 1)) for i in range(8)]
    queued = [Waiting(i, A if i % 3 else B, gpus) for i, gpus in enumerate(sizes, start=1)]
    durations = {w.id: 900.0 + 60 * w.id for w in queued}
    return running, queued, durations


def test_the_first_waiting_get_what_the_full_forecast_says_and_those_behind_none():
    running, queued, durations = _world([1, 2, 1, 4, 1, 1, 2, 1, 1, 1, 2, 1])
    full = forecast(TEAMS, running, queued, durations)
    first_of_a = [w.id for w in queued if w.team_id == A][:2]
    head = forecast(TEAMS, running, queued, durations, until=first_of_a)
    assert all(full[i].start_in is not None for i in first_of_a)
    assert {i: head[i] for i in first_of_a} == {i: full[i] for i in first_of_a}
    last = queued[-1].id
    assert full[last].start_in is not None
    assert head[last].start_in is None  # the forecast stopped before it: nobody reads it


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=25), st.integers(1, 10))
def test_a_head_forecast_never_differs_from_the_full_one_for_the_head(sizes, head):
    running, queued, durations = _world(sizes)
    full = forecast(TEAMS, running, queued, durations)
    wanted = [w.id for w in queued if w.team_id == A][:head]
    partial = forecast(TEAMS, running, queued, durations, until=wanted)
    assert {i: partial[i] for i in wanted} == {i: full[i] for i in wanted}
