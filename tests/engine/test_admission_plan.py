"""Admission order: priority, then FIFO, best-effort; never beyond the free GPUs (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobs.services.admission import plan_admission


def test_fifo_until_full():
    assert plan_admission([(1, 2), (2, 2), (3, 2)], free=4) == [1, 2]


def test_a_small_workload_passes_a_large_one_that_does_not_fit():
    assert plan_admission([(1, 4), (2, 1), (3, 2)], free=3) == [2, 3]


def test_nothing_fits_nothing_admitted():
    assert plan_admission([(1, 8)], free=4) == []


@given(st.lists(st.integers(min_value=1, max_value=8), max_size=60), st.integers(min_value=0, max_value=32))
def test_never_over_admits_and_respects_order(sizes, free):
    queued = list(enumerate(sizes))
    admitted = plan_admission(queued, free)
    assert sum(sizes[i] for i in admitted) <= free
    assert admitted == sorted(admitted)  # queue order is kept
    # best-effort: anything left out would not have fitted in what remained when its turn came
    remaining = free
    for i, size in queued:
        if i in admitted:
            remaining -= size
        else:
            assert size > remaining
