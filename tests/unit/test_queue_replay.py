"""bench_queue's replay (benchmarks/queue_replay.py) and its variants switch, issue 38's fifth round: the
default is the portal's plan, a variant that keeps the plan's position apart from the bound shown
changes nothing where the bound is the position, and a promise made under a firm horizon is never shown
further ahead than the horizon, nor broken. One seed of the calibrated day each (about a second)."""

from __future__ import annotations

import pytest

from benchmarks import queue_replay
from benchmarks.bench_queue import LOAD, loaded_day

SEED = 4029  # a tuning seed of the fifth round where firm-1h and today differ (ratio 0.70 -> 0.62)


def day_with(monkeypatch, name: str) -> queue_replay.Day:
    monkeypatch.setattr(queue_replay, "VARIANT", queue_replay.VARIANTS[name])
    return queue_replay.replay(loaded_day(SEED, LOAD), reserve=True, aging=True)


def test_keeping_the_plans_position_apart_from_a_bound_equal_to_it_changes_no_admission(monkeypatch):
    today = day_with(monkeypatch, "today")
    kept = day_with(monkeypatch, "today-kept")
    assert today.admitted == kept.admitted
    assert today.first_promise == kept.first_promise
    assert not today.broken


@pytest.mark.parametrize("name", ["firm-1h", "firm-2h"])
def test_under_a_firm_horizon_a_promise_is_shown_only_within_it_and_kept(monkeypatch, name):
    horizon = queue_replay.VARIANTS[name].horizon
    day = day_with(monkeypatch, name)
    assert day.first_promise  # it still promises
    for job, by in day.first_promise.items():
        assert by - day.promised_at[job] <= horizon + queue_replay.SLACK
        assert day.admitted[job] <= by
    assert not day.broken
    assert day.admitted != day_with(monkeypatch, "today").admitted  # the variant is not a no-op here


def test_reserving_large_workloads_beyond_the_head_at_once_promises_them_sooner_and_leaves_the_plan_as_it_was(
    monkeypatch,
):
    today = day_with(monkeypatch, "today")
    day = day_with(monkeypatch, "large-at-once")
    jobs = loaded_day(SEED, LOAD)
    large = [i for i, j in enumerate(jobs) if j.gpus >= 4 and i in day.promised_at and i in today.promised_at]
    waited = [day.promised_at[i] - jobs[i].at for i in large]
    waited_today = [today.promised_at[i] - jobs[i].at for i in large]
    assert sum(waited) < sum(waited_today)  # large jobs are promised GPUs sooner after they arrive
    assert not day.broken
    assert queue_replay.reservation_plan.LARGE_AT_ONCE is False  # the portal's plan is untouched afterwards


def _job(at: float, gpus: int, limit: float, run: float) -> queue_replay.Job:
    return queue_replay.Job(team=0, at=at, gpus=gpus, limit=int(limit), run=run)


def test_large_first_holds_a_small_job_that_would_delay_the_large_one_by_its_limit_not_by_its_run():
    hour = queue_replay.HOUR
    jobs = [_job(0.0, 4, 2 * hour, 2 * hour), _job(1.0, 8, hour, hour), _job(2.0, 1, 4 * hour, hour)]
    by_limits = queue_replay.large_first(jobs, known_runs=False)
    assert by_limits == {0: 0.0, 1: 2 * hour, 2: 3 * hour}  # its 4 h limit would pass the 8-GPU job's start
    known = queue_replay.large_first(jobs, known_runs=True)
    assert known == {0: 0.0, 1: 2 * hour, 2: 2.0}  # its 1 h run ends before the 8-GPU job's GPUs are free


def test_the_large_jobs_alone_wait_only_for_each_other():
    hour = queue_replay.HOUR
    jobs = [_job(0.0, 8, 2 * hour, hour), _job(0.0, 2, 4 * hour, 4 * hour), _job(10.0, 8, 2 * hour, 2 * hour)]
    assert queue_replay.large_alone(jobs, strict=True) == [0.0, hour - 10.0]  # the 2-GPU job is not there


# Issue 38's seventh round: a due reservation may stop checkpointed work (`stop-*` variants, the replay only).
def _stop_day(monkeypatch, second_started: float):
    """Team 0 (8 GPUs): three 2-GPU jobs run, the first two checkpointing (every 25 and 20 min), the third
    without the contract; a 4-GPU job comes at 3700 s with 2 GPUs free; team 1's job at 3800 s is the next
    event, when the 4-GPU job's reservation may stop work."""
    hour = queue_replay.HOUR
    jobs = [_job(0.0, 2, 4 * hour, 4 * hour), _job(second_started, 2, 4 * hour, 4 * hour),
            _job(second_started, 2, 4 * hour, 4 * hour), _job(3700.0, 4, hour, hour)]  # fmt: skip
    jobs.append(queue_replay.Job(team=1, at=3800.0, gpus=1, limit=1800, run=1800.0))
    jobs.sort(key=lambda j: j.at)
    ids = {(j.at, j.gpus): i for i, j in enumerate(jobs)}
    monkeypatch.setattr(queue_replay, "VARIANT", queue_replay.VARIANTS["stop-at-once"])
    first, second = ids[(0.0, 2)], [i for i, j in enumerate(jobs) if j.at == second_started and j.gpus == 2]
    every = {first: 25 * 60.0, second[0]: 20 * 60.0}  # second[1]: no checkpoint contract
    day = queue_replay.replay(jobs, reserve=True, aging=True, checkpoint_every=every)
    return jobs, day, first, second, ids[(3700.0, 4)]


def test_a_due_reservation_stops_the_checkpointed_job_that_loses_least(monkeypatch):
    _jobs, day, first, second, large = _stop_day(monkeypatch, 0.0)
    assert day.admitted[large] == 3800.0  # at once, not when a 2-GPU job ends hours later
    assert day.stops == 1
    assert day.lost == 2 * 200.0  # the 20-min one: 200 s since its checkpoint at 3600 s (the other: 800 s)
    assert day.waited[second[0]] > 200.0  # requeued, and its re-run counts in its wait
    assert day.waited[second[1]] == 0.0
    assert day.waited[first] == 0.0
    assert not day.broken


def test_a_due_reservation_never_stops_work_inside_its_minimum_runtime_or_without_the_contract(monkeypatch):
    _jobs, day, first, second, large = _stop_day(monkeypatch, 3000.0)  # the 20-min one started 800 s before
    assert queue_replay.MIN_RUNTIME > 800.0
    assert day.stops == 1
    assert day.lost == 2 * (3800.0 % (25 * 60))  # so the 25-min one is stopped instead
    assert day.waited[first] > 0.0
    assert day.waited[second[0]] == 0.0
    assert day.waited[second[1]] == 0.0
    assert day.admitted[large] == 3800.0


def test_the_checkpoint_facts_change_nothing_in_a_plan_that_stops_nothing(monkeypatch):
    jobs = loaded_day(SEED, LOAD)
    plain = day_with(monkeypatch, "today")
    with_facts = queue_replay.replay(
        jobs, reserve=True, aging=True, checkpoint_every=queue_replay.checkpoints(SEED, jobs)
    )
    assert with_facts.admitted == plain.admitted
    assert with_facts.stops == 0
    share = len(queue_replay.checkpoints(SEED, jobs)) / len(jobs)
    assert 0.45 < share < 0.65  # about 55 % declare the checkpoint contract


def test_a_safe_stop_keeps_every_promise_on_a_tuning_day(monkeypatch):
    monkeypatch.setattr(queue_replay, "VARIANT", queue_replay.VARIANTS["stop-1h-safe"])
    jobs = loaded_day(SEED, LOAD)
    day = queue_replay.replay(jobs, reserve=True, aging=True, checkpoint_every=queue_replay.checkpoints(SEED, jobs))
    assert day.stops > 0
    assert not day.broken
