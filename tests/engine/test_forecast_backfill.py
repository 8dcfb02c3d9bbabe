"""Start estimates that agree with the promise (pure): where the GPU type reserves, the forecast plans
each step with reservations and backfill, as admission will, instead of best effort."""

from __future__ import annotations

from jobs.services.queue.forecast import forecast
from jobs.services.queue.forecast_backfill import BackfillPlanner
from jobs.services.queue.reservation_plan import END_SLACK_SECONDS
from jobs.services.queue.sharing_plan import Held, TeamQuota, Waiting

TEAM = 1
HOUR = 3600.0
NOW = 1_000_000.0
TEAMS = {TEAM: TeamQuota(TEAM, 4)}


def world():
    """3 of 4 GPUs held by a run expected to end in 30 min (its limit: 2 h); a 4-GPU job waits, and
    behind it a 1-GPU job that runs 5 hours."""
    running = [(Held(1, TEAM, 3, order=1.0), 0.5 * HOUR)]
    big = Waiting(10, TEAM, 4, created=NOW - 60)
    long = Waiting(12, TEAM, 1, created=NOW - 30)
    durations = {10: HOUR, 12: 5 * HOUR}
    return running, [big, long], durations


def planner(standing=None):
    return BackfillPlanner(
        start=NOW,
        reserve_after=0.0,
        time_limits={1: 2 * HOUR, 10: HOUR, 12: 5 * HOUR},
        ends_by={1: NOW + 2 * HOUR + END_SLACK_SECONDS},
        standing=standing or {},
    )


def test_best_effort_forecast_lets_the_long_job_pass_and_the_large_one_wait_for_it():
    running, queued, durations = world()
    estimates = forecast(TEAMS, running, queued, durations)
    assert estimates[12].start_in == 0.0
    assert estimates[10].start_in >= 5 * HOUR


def test_with_reservations_the_large_job_starts_when_the_run_ends_and_the_long_one_after_it():
    running, queued, durations = world()
    estimates = forecast(TEAMS, running, queued, durations, planner=planner())
    assert estimates[10].start_in == 0.5 * HOUR  # reserved: nothing passes that would hold a GPU past it
    assert estimates[12].start_in >= estimates[10].start_in + HOUR  # held back, then after the large one
    assert estimates[12].reason == "reservation ahead"


def test_a_standing_promise_is_kept_in_the_forecast():
    running, queued, durations = world()
    due = NOW + 2 * HOUR + END_SLACK_SECONDS
    estimates = forecast(
        TEAMS,
        [(h, 2 * HOUR) for h, _ in running],  # the run is expected to use its whole limit
        queued,
        durations,
        planner=planner({TEAM: [(queued[0], due)]}),
    )
    assert estimates[10].start_in <= due - NOW
