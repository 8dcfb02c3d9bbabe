"""Estimated start (pure): a forward simulation of admission over expected ends and the queue ahead."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.services.queue.forecast import (
    MIN_REMAINING_SECONDS,
    Demand,
    Size,
    about,
    demand_from,
    expected_arrivals,
    expected_run,
    forecast,
    like_this,
    limit_slope,
    remaining,
)
from jobs.services.queue.sharing_plan import Held, Reason, TeamQuota, Waiting

A, B = 1, 2
TEAM = {A: TeamQuota(A, quota=4)}


def test_waits_for_the_running_job_to_end():
    estimates = forecast(TEAM, [(Held(9, A, 4), 2400.0)], [Waiting(1, A, 2)], {1: 600.0})
    assert estimates[1].start_in == 2400.0
    assert estimates[1].reason == Reason.TEAM_QUOTA


def test_the_queue_ahead_counts():
    queued = [Waiting(1, A, 4), Waiting(2, A, 4)]
    estimates = forecast(TEAM, [(Held(9, A, 4), 600.0)], queued, {1: 1800.0, 2: 60.0})
    assert estimates[1].start_in == 600.0
    assert estimates[2].start_in == 2400.0


def test_a_small_workload_may_pass_a_large_one():
    queued = [Waiting(1, A, 4), Waiting(2, A, 1)]
    running = [(Held(9, A, 2), 600.0), (Held(8, A, 1), 3000.0)]
    estimates = forecast(TEAM, running, queued, {1: 60.0, 2: 60.0})
    assert estimates[2].start_in == 0.0  # fits the free GPU at once
    assert estimates[1].start_in == 3000.0


def test_borrowing_from_the_cohort_makes_it_sooner():
    teams = {A: TeamQuota(A, quota=4), B: TeamQuota(B, quota=4, borrowing_limit=4)}
    alone = {B: TeamQuota(B, quota=4)}
    running = [(Held(9, B, 4), 3600.0)]
    assert forecast(teams, running, [Waiting(1, B, 2)], {1: 60.0})[1].start_in == 0.0
    assert forecast(alone, running, [Waiting(1, B, 2)], {1: 60.0})[1].start_in == 3600.0


def test_cluster_capacity_and_user_cap_are_reasons():
    estimates = forecast(TEAM, [(Held(9, B, 2), 100.0)], [Waiting(1, A, 4)], {1: 60.0}, capacity=4)
    assert estimates[1].reason == Reason.CLUSTER
    assert estimates[1].start_in == 100.0
    capped = {A: TeamQuota(A, quota=4, user_max_gpus=1)}
    estimates = forecast(capped, [(Held(9, A, 1, user_id=7), 300.0)], [Waiting(1, A, 1, user_id=7)], {1: 60.0})
    assert estimates[1].reason == Reason.USER_CAP
    assert estimates[1].start_in == 300.0


def test_never_fits_means_no_estimate():
    estimates = forecast(TEAM, [], [Waiting(1, A, 8)], {1: 60.0})
    assert estimates[1].start_in is None


def test_expected_runs_use_history_within_the_limit():
    assert expected_run(3600, []) == 3600
    assert expected_run(3600, [600, 1200, 900]) == 900
    assert expected_run(600, [6000]) == 600
    assert remaining(900, 300, 3600) == 600
    assert remaining(900, 1000, 3600) == 2600  # outlived its typical run: up to its limit


def test_about():
    assert about(40 * 60) == "about 40 min"
    assert about(7 * 60) == "about 7 min"
    assert about(30) == "within a minute"
    assert about(5 * 3600) == "about 5 h"
    assert about(None) == "not within a week"


def test_a_run_that_outlived_most_of_its_owners_runs_is_expected_to_end_soon():
    history = [600.0, 700.0, 800.0, 2000.0, 2400.0]
    assert remaining(800.0, 100.0, 7200.0, history) == 700.0  # median of all (800) - 100
    assert remaining(800.0, 1000.0, 7200.0, history) == 1200.0  # median of the longer ones (2200) - 1000
    assert remaining(800.0, 3000.0, 7200.0, history) == 30.0  # longer than any: about to end
    assert remaining(800.0, 100.0, 400.0, history) == 300.0  # never beyond its time limit


# --- run lengths and time limits --------------------------------------------------------------------
H = 3600.0
# Asks for about twice the run, rounded up to the hour: her limits say how long her runs last.
CAREFUL = [(1200.0, H), (1500.0, H), (2700.0, 2 * H), (3300.0, 2 * H), (5000.0, 3 * H), (5800.0, 3 * H)]
# Always asks for 8 h, whatever the run: her limits say nothing.
BLANKET = [(1200.0, 8 * H), (1500.0, 8 * H), (2700.0, 8 * H), (3300.0, 8 * H), (5000.0, 8 * H), (5800.0, 8 * H)]


def test_limit_slope_says_how_far_limits_followed_runs():
    assert 0.8 <= limit_slope(CAREFUL) <= 1.0
    assert limit_slope(BLANKET) == 0.0
    assert limit_slope(CAREFUL[:4]) == 0.0  # too few runs to trust their limits
    assert limit_slope([run for run, _ in CAREFUL]) == 0.0  # limits unknown
    assert limit_slope([(run, 0.0) for run, _ in CAREFUL]) == 0.0


def test_a_user_whose_limits_track_her_runs_is_expected_to_run_as_her_limit_says():
    short, long_ = expected_run(H, CAREFUL), expected_run(3 * H, CAREFUL)
    assert short < 2000.0 < 4000.0 < long_ <= 3 * H
    # Three hours asked for, 70 min run: her 3 h runs lasted 83 to 97 min, so about 20 min more.
    assert 600.0 < remaining(long_, 4200.0, 3 * H, CAREFUL) < 1800.0
    # Limits that say nothing: the median of her runs whatever the limit, as before.
    assert expected_run(H, BLANKET) == expected_run(3 * H, BLANKET) == 3000.0
    assert expected_run(3 * H, [run for run, _ in CAREFUL]) == 3000.0


@settings(max_examples=200, deadline=None)
@given(
    runs=st.lists(st.tuples(st.floats(1.0, 1e5), st.one_of(st.none(), st.floats(60.0, 1e5))), min_size=0, max_size=25),
    limit=st.floats(60.0, 1e5),
    elapsed=st.floats(0.0, 2e5),
)
def test_estimates_stay_within_the_limit(runs, limit, elapsed):
    assert 0.0 <= limit_slope(runs) <= 1.0
    assert all(0.0 < r <= limit for r in like_this(limit, runs))
    expected = expected_run(limit, runs)
    assert 0.0 < expected <= limit
    left = remaining(expected, elapsed, limit, runs)
    assert MIN_REMAINING_SECONDS <= left <= max(MIN_REMAINING_SECONDS, limit - elapsed)


@settings(max_examples=100, deadline=None)
@given(
    runs=st.lists(st.tuples(st.floats(60.0, 1e5), st.floats(60.0, 1e5)), min_size=0, max_size=25),
    limits=st.tuples(st.floats(60.0, 1e5), st.floats(60.0, 1e5)),
)
def test_a_longer_limit_never_shortens_the_expected_run(runs, limits):
    low, high = sorted(limits)
    assert expected_run(low, runs) <= expected_run(high, runs)


def test_only_the_head_of_a_long_queue_is_forecast():
    queued = [Waiting(i, A, 1) for i in range(1, 301)]
    estimates = forecast(TEAM, [], queued, dict.fromkeys(range(1, 301), 60.0))
    assert estimates[4].start_in == 0.0
    assert estimates[200].start_in == 49 * 60.0
    assert estimates[201].start_in is None
    assert estimates[201].reason == ""


# --- expected arrivals ---------------------------------------------------------------------------
def test_expected_arrivals_are_fixed_points_at_the_expected_rate():
    steady = {A: Demand.single((2.0,) * 24, 2, 1800.0)}  # two an hour, all day
    arrivals = expected_arrivals(steady, hour=9.0, within=2 * 3600.0)
    # The k-th when 2/h have made k - 1/3 expected: at 20, 50, 80 and 110 minutes.
    assert [round(a.at / 60) for a in arrivals] == [20, 50, 80, 110]
    assert {(a.waiting.team_id, a.waiting.gpus, a.run_seconds) for a in arrivals} == {(A, 2, 1800.0)}
    assert len({a.waiting.id for a in arrivals}) == 4
    assert max(a.waiting.id for a in arrivals) < 0  # no workload's
    # A team that only works from 10 o'clock submits nothing before.
    mornings = {B: Demand.single(tuple(3.0 if h == 10 else 0.0 for h in range(24)), 1, 600.0)}
    assert [round(a.at / 60) for a in expected_arrivals(mornings, hour=9.5, within=4 * 3600.0)] == [43, 63, 83]
    assert expected_arrivals({B: Demand.single((0.0,) * 24, 1, 600.0)}, hour=0.0) == []


def test_demand_from_history_per_hour_of_the_day():
    # Two weeks: team A made 28 workloads of 2 GPUs at 9 o'clock (20 of them ran 1 h), 14 at 10.
    rows = [(A, 9, 2, 28, 20, 20 * 3600.0), (A, 10, 2, 14, 0, 0.0)]
    demand = demand_from(rows, 14)[A]
    assert (demand.per_hour[9], demand.per_hour[10], demand.per_hour[11]) == (2.0, 1.0, 0.0)
    assert demand.sizes == (Size(2, 1.0, 3600.0),)


def test_demand_from_history_keeps_each_size_a_team_asks_for():
    # A asked for 1 GPU 30 times (10 min runs), for 4 GPUs 10 times (2 h runs), and for 8 once, which
    # has not ended yet.
    rows = [(A, 9, 1, 20, 20, 20 * 600.0), (A, 10, 1, 10, 10, 10 * 600.0), (A, 9, 4, 10, 10, 10 * 7200.0)]
    demand = demand_from([*rows, (A, 11, 8, 1, 0, 0.0)], 14)[A]
    assert [(s.gpus, round(s.share * 41)) for s in demand.sizes] == [(1, 30), (4, 10), (8, 1)]
    assert [s.run_seconds for s in demand.sizes[:2]] == [600.0, 7200.0]
    # The 8-GPU run is expected to last as long as A's runs do on average.
    assert demand.sizes[2].run_seconds == (30 * 600.0 + 10 * 7200.0) / 40


def test_expected_arrivals_come_in_the_sizes_a_team_asks_for():
    # Half of A's work asks for 1 GPU (10 min), a quarter 2 (1 h), a quarter 4 (2 h): never all of it
    # as their mean size.
    sizes = (Size(1, 0.5, 600.0), Size(2, 0.25, 3600.0), Size(4, 0.25, 7200.0))
    arrivals = expected_arrivals({A: Demand((4.0,) * 24, sizes)}, hour=0.0, within=2 * 3600.0)
    assert [a.waiting.gpus for a in arrivals] == [1, 2, 4, 1, 1, 2, 4, 1]
    assert {(a.waiting.gpus, a.run_seconds) for a in arrivals} == {(1, 600.0), (2, 3600.0), (4, 7200.0)}


@settings(max_examples=200, deadline=None)
@given(shares=st.lists(st.floats(0.001, 1.0), min_size=1, max_size=8), count=st.integers(1, 200))
def test_expected_arrivals_follow_the_teams_shares_of_sizes(shares, count):
    total = sum(shares)
    sizes = tuple(Size(gpus, share / total, 600.0) for gpus, share in enumerate(shares, start=1))
    # Enough arrivals an hour that `count` come within the hour.
    arrivals = expected_arrivals({A: Demand((float(count),) * 24, sizes)}, hour=0.0, within=3600.0)
    assert len(arrivals) == count
    # However many come, each size has come its share of them, give or take less than one.
    for size in sizes:
        came = sum(1 for a in arrivals if a.waiting.gpus == size.gpus)
        assert abs(came - count * size.share) < 1.0


def test_a_lenders_expected_work_comes_before_a_borrower():
    teams = {A: TeamQuota(A, quota=4), B: TeamQuota(B, quota=4, borrowing_limit=4)}
    # A lends 1 idle GPU; B's own 4 end in 2 h; A's 3 end in 1 h, and then B could borrow...
    running = [(Held(7, A, 3), 3600.0), (Held(8, B, 4), 7200.0)]
    queued = [Waiting(1, B, 2)]
    assert forecast(teams, running, queued, {1: 600.0})[1].start_in == 3600.0
    # ...but A usually submits a 4-GPU job around then: it takes its quota back, B waits for its own.
    habits = {A: Demand.single(tuple(1.0 if h == 9 else 0.0 for h in range(24)), 4, 3 * 3600.0)}
    arrivals = expected_arrivals(habits, hour=9.0, within=6 * 3600.0)
    assert forecast(teams, running, queued, {1: 600.0}, arrivals=arrivals)[1].start_in == 7200.0


def test_a_lender_that_mostly_asks_for_one_gpu_leaves_room_to_borrow():
    teams = {A: TeamQuota(A, quota=4), B: TeamQuota(B, quota=4, borrowing_limit=4)}
    # A's 4 GPUs end in 1 h, B's own 4 in 2 h; B's 3-GPU job needs 3 of A's.
    running = [(Held(7, A, 4), 3600.0), (Held(8, B, 4), 7200.0)]
    queued = [Waiting(1, B, 3)]
    nine = tuple(1.0 if h == 9 else 0.0 for h in range(24))

    def start(*sizes: Size) -> float | None:
        arrivals = expected_arrivals({A: Demand(nine, sizes)}, hour=9.0, within=6 * 3600.0)
        return forecast(teams, running, queued, {1: 600.0}, arrivals=arrivals)[1].start_in

    # A usually asks for 1 GPU and now and then for 4 (2 on average): its next one (at 40 min) takes 1
    # of its 4 and B borrows the other 3 when A's run ends.
    assert start(Size(1, 0.75, 3 * H), Size(4, 0.25, 3 * H)) == 3600.0
    # A team that asks for 2 every time leaves too little: B waits for its own GPUs.
    assert start(Size(2, 1.0, 3 * H)) == 7200.0
    assert start(Size(1, 0.25, 3 * H), Size(4, 0.75, 3 * H)) == 7200.0


def test_a_borrower_a_lender_reclaims_from_is_requeued_ahead_of_its_team():
    teams = {A: TeamQuota(A, quota=4), B: TeamQuota(B, quota=2, borrowing_limit=4)}
    borrowed = Held(8, B, 2, borrowed=True, order=2.0, restartable=True)
    running = [(Held(6, A, 2), 90000.0), (Held(7, B, 2, order=1.0), 600.0), (borrowed, 3000.0)]
    queued = [Waiting(1, B, 2)]
    durations = {1: 600.0, 8: 3000.0}
    # Without A's habits, B's queued job borrows again when B's own run ends in 10 min.
    assert forecast(teams, running, queued, durations)[1].start_in == 600.0
    # A's expected 2-GPU job (at 5 min) takes the cohort's last idle GPUs back: the borrowed run is
    # preempted and goes back to the front of B's queue, reruns on B's own GPUs, the queued job after it.
    habits = {A: Demand.single((8.0,) + (0.0,) * 23, 2, 7200.0)}
    arrivals = expected_arrivals(habits, hour=0.0, within=600.0)
    assert arrivals[0].at == 300.0
    assert forecast(teams, running, queued, durations, arrivals=arrivals)[1].start_in == 600.0 + 3000.0
