"""The estimates' own record (pure): which estimates are kept as revisions, how their accuracy is told,
and the story a workload's page tells."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobs.services.queue.estimate_history import accuracy, revisions_to_store, story

T = datetime(2026, 3, 10, 13, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def test_the_first_estimate_and_each_that_moves_more_than_a_minute_are_kept():
    changes = [
        (1, None, T + 10 * MIN),  # first ever
        (2, T + 10 * MIN, T + 10 * MIN + timedelta(seconds=30)),  # a wobble
        (3, T + 10 * MIN, T + 25 * MIN),  # moved
        (4, T + 10 * MIN, None),  # out of the horizon
        (5, None, None),  # still nothing
    ]
    assert revisions_to_store(changes, first={1}) == [(1, T + 10 * MIN), (3, T + 25 * MIN), (4, None)]


def test_accuracy_tells_median_and_p90_error_and_how_many_were_late():
    submitted = T - 60 * MIN
    samples = [(submitted, T, T + k * MIN) for k in range(10)]  # 0..9 minutes late
    samples.append((submitted, T + 5 * MIN, T))  # 5 minutes early
    a = accuracy(samples)
    assert a.started == 11
    assert a.p50_error_s == 5 * 60
    assert a.p90_error_s == 8 * 60  # errors 0,1,2,3,4,5,5,6,7,8,9 min: the 10th of 11
    assert a.late == 8  # 2..9 minutes late; a minute late is on time
    assert a.p50_error_pct is not None


def test_accuracy_of_nothing_says_nothing():
    a = accuracy([])
    assert (a.started, a.p50_error_s, a.late) == (0, None, 0)


def test_a_workload_with_no_estimate_in_the_horizon_counts_as_late():
    assert accuracy([(T, None, T + MIN)]).late == 1


def test_the_story_lists_each_estimate_then_the_start():
    lines = story([(T, T + 10 * MIN), (T + 50 * MIN, T + 85 * MIN)], started=T + 82 * MIN)
    assert [(line.kind, line.first) for line in lines] == [("estimate", True), ("estimate", False), ("started", False)]
    assert lines[-1].at == T + 82 * MIN
    assert story([], started=T) == []
