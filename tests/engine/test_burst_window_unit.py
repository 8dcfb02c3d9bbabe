"""The tracker's burst window (watch_loop.next_burst_window): a quiet stream is recorded after the short
window, as before; a busy one gathers longer, up to a bound, so each burst's round trips serve more
workloads; a pause or a small burst brings the short window back at once."""

from __future__ import annotations

from jobs.services.cluster.watch_loop import (
    BURST_WINDOW_BUSY_SECONDS,
    BURST_WINDOW_SECONDS,
    BUSY_BURST_EVENTS,
    next_burst_window,
)

QUIET, BUSIEST, MANY = 0.05, 0.2, BUSY_BURST_EVENTS


def window(last: float, *, events: int, waited: float) -> float:
    return next_burst_window(last, events=events, waited=waited, quiet=QUIET, busiest=BUSIEST)


def test_a_quiet_stream_is_recorded_after_the_short_window():
    assert window(QUIET, events=MANY, waited=0.3) == QUIET
    assert window(QUIET, events=MANY, waited=QUIET) == QUIET


def test_a_few_events_at_a_time_keep_the_short_window():
    """One workload starting on an idle cluster: its events follow each other closely, a few per burst."""
    assert window(QUIET, events=MANY - 1, waited=0.0) == QUIET
    assert window(BUSIEST, events=1, waited=0.0) == QUIET


def test_a_busy_stream_gathers_longer():
    assert window(QUIET, events=MANY, waited=0.0) == 0.1
    assert window(0.1, events=40, waited=0.01) == BUSIEST


def test_the_window_never_grows_past_its_bound():
    last = QUIET
    for _ in range(20):
        last = window(last, events=500, waited=0.0)
        assert QUIET <= last <= BUSIEST
    assert last == BUSIEST


def test_a_pause_after_a_busy_spell_brings_the_short_window_back():
    assert window(BUSIEST, events=500, waited=0.06) == QUIET


def test_the_deployed_windows_keep_a_quiet_cluster_as_fast_and_bound_the_lag():
    assert BURST_WINDOW_SECONDS <= 0.05
    assert BURST_WINDOW_SECONDS < BURST_WINDOW_BUSY_SECONDS <= 0.2
