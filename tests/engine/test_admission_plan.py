"""Admission order: priority, then FIFO, best-effort; never beyond the free GPUs; what a pass reads
and how it hands its creates over (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.services.dispatch import SUBMIT_BATCH, submit_batches
from jobs.services.queue.admission import plan_admission
from jobs.services.queue.sharing_plan import (
    NO_ROOM,
    Held,
    QueueEntry,
    TeamQuota,
    Waiting,
    admission_room,
    order_queue,
    order_ranked,
    plan,
    queue_head,
    team_queues,
)


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


# --- what an admission pass reads: own-quota holdings as sums, borrowed ones one by one -------------
teams_strategy = st.lists(
    st.tuples(st.integers(0, 8), st.integers(0, 4), st.none() | st.integers(0, 8), st.none() | st.integers(1, 6)),
    min_size=1,
    max_size=4,
)
held_strategy = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(1, 4), st.booleans(), st.integers(0, 2)),
    max_size=12,
)
queue_strategy = st.lists(
    st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(1, 6), st.integers(0, 2)), max_size=15
)


def _summed(held: list[Held]) -> list[Held]:
    """As admission._held_by_group reads them: own-quota workloads summed per team and owner."""
    sums: dict[tuple[int, int], int] = {}
    for h in held:
        if not h.borrowed:
            sums[(h.team_id, h.user_id)] = sums.get((h.team_id, h.user_id), 0) + h.gpus
    stand_ins = [Held(id=-n, team_id=t, gpus=g, user_id=u) for n, ((t, u), g) in enumerate(sums.items(), start=1)]
    return stand_ins + [h for h in held if h.borrowed]


@given(teams_strategy, held_strategy, queue_strategy)
def test_a_plan_from_summed_holdings_is_the_plan_from_every_workload(team_rows, held_rows, queue_rows):
    """The pass reads what teams hold as sums (its cost must not grow with everything they run); the
    plan it makes must be the one the workloads one by one would give: same admitted, borrowed,
    preempted and waiting reasons. Fails if a sharing rule starts looking at own-quota workloads singly."""
    teams = {
        i: TeamQuota(team_id=i, quota=q, borrowing_limit=b, lending_limit=lend, user_max_gpus=cap)
        for i, (q, b, lend, cap) in enumerate(team_rows)
    }
    held = [
        Held(id=1000 + n, team_id=t % len(teams), user_id=u, gpus=g, borrowed=b, priority=p, order=float(n))
        for n, (t, u, g, b, p) in enumerate(held_rows)
    ]
    queue = [
        Waiting(id=n, team_id=t % len(teams), user_id=u, gpus=g, priority=p)
        for n, (t, u, g, p) in enumerate(queue_rows)
    ]
    one_by_one = plan(teams, held, queue)
    summed = plan(teams, _summed(held), queue)
    assert summed.admit == one_by_one.admit
    assert summed.borrowed == one_by_one.borrowed
    assert summed.preempt == one_by_one.preempt
    assert summed.waiting == one_by_one.waiting


# --- what an admission pass reads of the queue: each team's head, not the whole queue -------------
capped_teams_strategy = st.lists(
    st.tuples(st.integers(0, 8), st.integers(0, 4), st.none() | st.integers(0, 8), st.none() | st.integers(0, 6)),
    min_size=1,
    max_size=4,
)
long_queue_strategy = st.lists(
    st.tuples(
        st.integers(0, 4),  # team (4: one without a quota when there are fewer teams)
        st.integers(1, 3),  # person
        st.sampled_from([0, 1, 1, 2, 2, 3, 4, 8]),  # GPUs
        st.integers(0, 2),  # priority
        st.booleans(),  # requeued after a preemption
    ),
    max_size=60,
)


@settings(max_examples=400, deadline=None)
@given(capped_teams_strategy, held_strategy, long_queue_strategy, st.booleans())
def test_a_plan_from_each_team_s_queue_head_is_the_plan_from_the_whole_queue(
    team_rows, held_rows, queue_rows, fair_share
):
    """The pass reads only the head of each team's queue (`queue_head`, in SQL); what it decides from
    those must be what the whole queue gives: same admitted (in order), borrowed and preempted, and it
    must still know when something waits. Fails if a plan rule lets a deeper entry start."""
    teams = {
        i: TeamQuota(team_id=i, quota=q, borrowing_limit=b, lending_limit=lend, user_max_gpus=cap)
        for i, (q, b, lend, cap) in enumerate(team_rows)
    }
    held = [
        Held(id=1000 + n, team_id=t % len(teams), user_id=u, gpus=g, borrowed=b, priority=p, order=float(n))
        for n, (t, u, g, b, p) in enumerate(held_rows)
    ]
    entries = [
        QueueEntry(id=n, team_id=t, user_id=u, gpus=g, priority=p, created=float(n), requeued=50.0 - n if r else None)
        for n, (t, u, g, p, r) in enumerate(queue_rows)
    ]
    fair = {t: {1: 5.0, 2: 0.5} for t in range(5)} if fair_share else {}
    whole = plan(teams, held, order_queue(entries, fair))

    rooms = admission_room(teams, held)
    heads = [
        pair
        for team_id, queue in team_queues(entries, fair).items()
        for pair in queue_head(queue, rooms.get(team_id, NO_ROOM))
    ]
    head = plan(teams, held, order_ranked(heads))
    assert head.admit == whole.admit
    assert head.borrowed == whole.borrowed
    assert head.preempt == whole.preempt
    assert (bool(head.waiting) or len(heads) < len(entries)) == bool(whole.waiting)
    assert {w.id for w in order_ranked(heads)} <= {e.id for e in entries}


def test_the_head_of_a_long_queue_is_short():
    queue = [QueueEntry(i, 1, user_id=i % 4, gpus=[1, 2, 4, 8][i % 4], priority=0, created=i) for i in range(1000)]
    head = queue_head(queue, admission_room({1: TeamQuota(1, quota=10)}, [Held(-1, 1, gpus=6)])[1])
    # Room for 4 more GPUs: the first five 1-GPU entries, three 2-GPU, two 4-GPU and no 8-GPU one.
    assert [place for place, _ in head] == [0, 1, 2, 4, 5, 6, 8, 9, 12, 16]


# --- handing an admission pass's creates to the worker ------------------------------------------------
def test_a_few_admitted_go_as_one_task():
    # The task creates them several at a time (object_creation.CREATES_IN_FLIGHT): one load, one record.
    assert submit_batches([1, 2, 3]) == [[1, 2, 3]]
    assert submit_batches([]) == []


def test_many_admitted_go_in_batches_of_at_most_50_in_order():
    ids = list(range(10_000))
    batches = submit_batches(ids)
    assert [i for b in batches for i in b] == ids
    assert [len(b) for b in batches] == [SUBMIT_BATCH] * 200
    assert [len(b) for b in submit_batches(list(range(120)))] == [50, 50, 20]
