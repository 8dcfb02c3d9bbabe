"""Estimated start (pure): a forward simulation of admission over expected ends and the queue ahead."""

from __future__ import annotations

from jobs.services.forecast import about, expected_run, forecast, remaining
from jobs.services.sharing_plan import Held, Reason, TeamQuota, Waiting

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


def test_only_the_head_of_a_long_queue_is_forecast():
    queued = [Waiting(i, A, 1) for i in range(1, 301)]
    estimates = forecast(TEAM, [], queued, dict.fromkeys(range(1, 301), 60.0))
    assert estimates[4].start_in == 0.0
    assert estimates[200].start_in == 49 * 60.0
    assert estimates[201].start_in is None
    assert estimates[201].reason == ""
