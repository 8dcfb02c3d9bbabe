"""The tracker's burst window (watch_loop.next_burst_window): a quiet stream is recorded after the short
window, as before; a busy one gathers longer, up to a bound, so each burst's round trips serve more
workloads; a pause brings it back at once."""

from __future__ import annotations

from jobs.services.cluster.watch_loop import BURST_WINDOW_BUSY_SECONDS, BURST_WINDOW_SECONDS, next_burst_window

QUIET, BUSIEST = 0.05, 0.2


def test_a_quiet_stream_is_recorded_after_the_short_window():
    assert next_burst_window(QUIET, waited=0.3, quiet=QUIET, busiest=BUSIEST) == QUIET
    assert next_burst_window(QUIET, waited=QUIET, quiet=QUIET, busiest=BUSIEST) == QUIET


def test_a_busy_stream_gathers_longer():
    assert next_burst_window(QUIET, waited=0.0, quiet=QUIET, busiest=BUSIEST) == 0.1
    assert next_burst_window(0.1, waited=0.01, quiet=QUIET, busiest=BUSIEST) == BUSIEST


def test_the_window_never_grows_past_its_bound():
    window = QUIET
    for _ in range(20):
        window = next_burst_window(window, waited=0.0, quiet=QUIET, busiest=BUSIEST)
        assert QUIET <= window <= BUSIEST
    assert window == BUSIEST


def test_a_pause_after_a_busy_spell_brings_the_short_window_back():
    assert next_burst_window(BUSIEST, waited=0.06, quiet=QUIET, busiest=BUSIEST) == QUIET


def test_the_deployed_windows_keep_an_idle_cluster_as_fast_and_bound_the_lag():
    assert BURST_WINDOW_SECONDS <= 0.05
    assert BURST_WINDOW_SECONDS < BURST_WINDOW_BUSY_SECONDS <= 0.2
