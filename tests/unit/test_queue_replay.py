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
