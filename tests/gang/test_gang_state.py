"""A gang's one state from its ranks' states (pure): running only when all run, failed naming the rank."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from jobs.models import State
from jobs.services.cluster.gang_tracking import gang_interval, observe_gang
from jobs.services.cluster.status_mapping import Observation

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def running(node: str, after: int = 0) -> Observation:
    return Observation(State.RUNNING, "Running", f"Running on {node}.", T0 + timedelta(seconds=after), node_name=node)


def pending(message: str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.") -> Observation:
    return Observation(State.PENDING, "Unschedulable", message)


def test_pending_until_every_rank_runs_and_says_which_waits():
    obs = observe_gang(3, {0: running("gpu-a"), 1: running("gpu-b"), 2: pending()})
    assert obs.state == State.PENDING
    assert obs.message.startswith("2 of 3 ranks running. Rank 2: 0/3 nodes are available")
    assert observe_gang(3, {0: running("gpu-a"), 1: running("gpu-b")}).message.startswith("2 of 3 ranks running")


def test_running_when_all_run():
    obs = observe_gang(2, {0: running("gpu-a"), 1: running("gpu-b", after=4)})
    assert obs.state == State.RUNNING
    assert obs.message == "All 2 ranks running on gpu-a, gpu-b."
    assert obs.started_at == T0 + timedelta(seconds=2)  # the mean start (see gang_interval)


def test_one_rank_failing_fails_the_gang_naming_rank_and_exit_code():
    failed = Observation(State.FAILED, "ExitCode", "Exited with code 1.", T0, T0 + timedelta(seconds=10), 1,
                         node_name="gpu-b")  # fmt: skip
    obs = observe_gang(2, {0: running("gpu-a"), 1: failed})
    assert obs.state == State.FAILED
    assert obs.exit_code == 1
    assert obs.message == "Rank 1 of 2 failed: Exited with code 1. The other ranks were stopped."


def test_succeeded_only_when_every_rank_succeeded():
    done = Observation(State.SUCCEEDED, "Completed", "Exited with code 0.", T0, T0 + timedelta(seconds=60), 0)
    assert observe_gang(2, {0: done, 1: running("gpu-b")}).state == State.RUNNING
    assert observe_gang(2, {0: done, 1: done}).state == State.SUCCEEDED


@given(
    st.lists(st.tuples(st.integers(0, 3600), st.one_of(st.none(), st.integers(1, 7200))), min_size=1, max_size=8),
    st.integers(1, 8),
)
def test_gpu_time_of_the_gang_is_the_sum_over_its_ranks(runs, per_node):
    """nodes x GPUs per node x (end - start) of the workload = the sum of GPUs per node x each rank's own run
    (ranks that never started count nothing)."""
    nodes = len(runs)
    ranks = [
        Observation(State.SUCCEEDED, "", "", T0 + timedelta(seconds=s), T0 + timedelta(seconds=s + d))
        if d is not None
        else Observation(State.PENDING, "", "")
        for s, d in runs
    ]
    start, end = gang_interval(nodes, ranks, fallback_end=T0)
    expected = sum(per_node * d for s, d in runs if d is not None)
    if start is None:
        assert expected == 0
        return
    got = nodes * per_node * (end - start).total_seconds() if end else 0
    assert abs(got - expected) < 1e-3
