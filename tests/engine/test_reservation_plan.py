"""A bounded wait (pure): the head of a team's queue that does not fit is reserved for; smaller work
passes it only if it ends before the reservation is due or fits beside it; the promise holds."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.services.queue.reservation_plan import (
    END_SLACK_SECONDS,
    RESERVE_DEEPER_AFTER_SECONDS,
    RESERVED,
    START_SLACK_SECONDS,
    Block,
    Running,
    Timeline,
    backfill,
    ends_by,
    plan_and_backfill,
)
from jobs.services.queue.sharing_plan import Held, QueueEntry, Reason, TeamQuota, Waiting, plan, team_queues

TEAM = 1
HOUR = 3600.0
QUOTA = {TEAM: TeamQuota(team_id=TEAM, quota=4)}


def test_due_when_enough_running_work_has_ended_by_its_limit():
    timeline = Timeline(4, [Block(1, 0.0, 100.0), Block(1, 0.0, 300.0), Block(1, 0.0, 200.0)])
    assert timeline.earliest(3, 50.0, now=0.0) == 200.0  # two must end: the second end is at 200
    assert timeline.earliest(1, 50.0, now=0.0) == 0.0
    assert timeline.earliest(5, 50.0, now=0.0) is None


def test_a_second_reservation_fits_around_the_first():
    timeline = Timeline(4, [Block(3, 0.0, 100.0)])
    assert timeline.take(4, 100.0, 400.0)  # the first reserved: all 4 GPUs from 100 to 400
    assert timeline.earliest(2, 50.0, now=0.0) == 400.0  # 1 free before 100 only; 50 s do not fit in it
    assert timeline.earliest(1, 50.0, now=0.0) == 0.0  # a short one fits before the first is due


def test_not_started_work_ends_by_its_limit_after_a_start_allowance():
    assert ends_by(started=None, admitted=50.0, time_limit=600.0, now=100.0) == (
        100.0 + START_SLACK_SECONDS + 600.0 + END_SLACK_SECONDS
    )
    assert ends_by(started=10.0, admitted=0.0, time_limit=600.0, now=100.0) == 10.0 + 600.0 + END_SLACK_SECONDS


def _queue_behind_a_large_head():
    head = Waiting(10, TEAM, 4, created=0.0)
    short = Waiting(11, TEAM, 1, created=1.0)
    long = Waiting(12, TEAM, 1, created=2.0)
    return head, short, long


def test_backfill_admits_a_short_job_that_ends_before_the_reservation_and_refuses_a_long_one():
    head, short, long = _queue_behind_a_large_head()
    held = [Held(1, TEAM, 3, order=1.0)]  # 3 of 4 GPUs held, until 2 h from now by its limit
    running = {TEAM: [Running(3, 2 * HOUR)]}
    result = plan(QUOTA, held, [head, short, long])
    assert result.admit == [11]  # best effort alone: the first 1-GPU job takes the last GPU
    done = backfill(
        result,
        QUOTA,
        [head, short, long],
        running=running,
        time_limits={11: 600.0, 12: 5 * HOUR},
        now=0.0,
        reserve_after=0.0,
    )
    assert done.reservations[TEAM][0].workload_id == head.id
    assert done.reservations[TEAM][0].due_at == 2 * HOUR
    assert done.plan.admit == [11]  # 10 min + allowances: ends long before 2 h

    # The same with the long one first in line: it would hold a GPU past the reservation, so it waits.
    result = plan(QUOTA, held, [head, long, short])
    assert result.admit == [12]
    done = backfill(
        result,
        QUOTA,
        [head, long, short],
        running=running,
        time_limits={11: 600.0, 12: 5 * HOUR},
        now=0.0,
        reserve_after=0.0,
    )
    assert done.plan.admit == []
    assert done.plan.waiting[12] == RESERVED
    assert done.refused == [12]


def test_work_that_fits_beside_the_reservation_passes_whatever_its_length():
    head = Waiting(10, TEAM, 2, created=0.0)
    long = Waiting(12, TEAM, 1, created=2.0)
    teams = {TEAM: TeamQuota(team_id=TEAM, quota=4)}
    held = [Held(1, TEAM, 3, order=1.0)]  # head needs 2, 1 free: head waits; 1 + 2 <= 4 beside it at due
    result = plan(teams, held, [head, long])
    done = backfill(
        result,
        teams,
        [head, long],
        running={TEAM: [Running(2, HOUR), Running(1, 9 * HOUR)]},
        time_limits={12: 5 * HOUR},
        now=0.0,
        reserve_after=0.0,
    )
    # At the due time (1 h) one GPU is still held, the head takes 2, the long one the fourth.
    assert done.plan.admit == [12]
    assert done.reservations[TEAM][0].due_at == HOUR


def test_without_reservations_the_plan_is_left_as_it_is():
    head, short, long = _queue_behind_a_large_head()
    result = plan(QUOTA, [Held(1, TEAM, 3)], [head, long, short])
    done = backfill(result, QUOTA, [head, long, short], running={}, time_limits={}, now=0.0, reserve_after=None)
    assert done.plan is result
    assert not done.reservations


def test_a_workload_is_reserved_for_only_after_it_waited_the_gpu_types_cap():
    head, short, long = _queue_behind_a_large_head()
    result = plan(QUOTA, [Held(1, TEAM, 3)], [head, long, short])
    args = {"running": {TEAM: [Running(3, HOUR)]}, "time_limits": {12: 5 * HOUR}, "reserve_after": 600.0}
    assert not backfill(result, QUOTA, [head, long, short], now=599.0, **args).reservations
    assert backfill(result, QUOTA, [head, long, short], now=600.0, **args).reservations[TEAM][0].workload_id == 10


def test_a_standing_reservation_keeps_its_workload_when_others_come_ahead():
    head, _short, long = _queue_behind_a_large_head()
    newcomer = Waiting(13, TEAM, 1, priority=5, created=3.0)  # a higher priority, come later
    queue = [newcomer, head, long]
    result = plan(QUOTA, [Held(1, TEAM, 3)], queue)
    assert result.admit == [13]
    done = backfill(
        result,
        QUOTA,
        queue,
        running={TEAM: [Running(3, HOUR)]},
        time_limits={13: 5 * HOUR},
        now=0.0,
        reserve_after=0.0,
        standing={TEAM: [(head, HOUR)]},
    )
    assert done.plan.admit == []  # it would hold a GPU past the promise made to the head
    assert done.reservations[TEAM][0].workload_id == head.id


def test_a_per_person_cap_is_no_reason_to_reserve():
    teams = {TEAM: TeamQuota(team_id=TEAM, quota=4, user_max_gpus=1)}
    capped = Waiting(10, TEAM, 1, user_id=7, created=0.0)
    result = plan(teams, [Held(1, TEAM, 1, user_id=7)], [capped])
    assert result.waiting[10] == Reason.USER_CAP
    done = backfill(result, teams, [capped], running={}, time_limits={}, now=0.0, reserve_after=0.0)
    assert not done.reservations


# --- the promise, over whole traces ------------------------------------------------------------------
def simulate(quota: int, trace: list[tuple[float, int, float, float]], *, reserve: bool, aging: bool = False) -> dict:
    """One team, one GPU type: (arrival, GPUs, time limit, actual run) per workload, admitted at every
    arrival and end as an admission pass admits (the plan with backfill, `plan_and_backfill`), run at once;
    `aging`: the queue in the team order of a type that ages (`team_order_key` at each pass). Returns each
    workload's admission time and the reservations made (workload -> the due time first promised; `last`:
    the latest due, which passes bring forward as work ends early, as the stored promise is)."""
    teams = {TEAM: TeamQuota(team_id=TEAM, quota=quota)}
    events = sorted({a for a, *_ in trace})
    heapq.heapify(events)
    queue: list[Waiting] = []
    running: dict[int, tuple[int, float, float]] = {}  # id -> gpus, admitted, limit
    ends: dict[int, float] = {}
    admitted_at: dict[int, float] = {}
    promised: dict[int, float] = {}
    last: dict[int, float] = {}
    standing: list[tuple[Waiting, float]] = []
    arrived = 0
    while events:
        now = heapq.heappop(events)
        for i in [i for i, end in ends.items() if end <= now]:
            del ends[i], running[i]
        while arrived < len(trace) and trace[arrived][0] <= now:
            queue.append(Waiting(arrived, TEAM, trace[arrived][1], created=trace[arrived][0]))
            arrived += 1
        if aging:
            entries = [QueueEntry(w.id, TEAM, 0, w.gpus, 0, w.created) for w in queue]
            order = {e.id: n for n, e in enumerate(team_queues(entries, {}, aging_now=now)[TEAM])} if entries else {}
            queue.sort(key=lambda w: order[w.id])
        held = [Held(i, TEAM, g, order=a) for i, (g, a, _) in running.items()]
        done = plan_and_backfill(
            teams,
            held,
            queue,
            running={TEAM: [Running(g, a + limit + END_SLACK_SECONDS) for g, a, limit in running.values()]},
            time_limits={w.id: trace[w.id][2] for w in queue},
            now=now,
            reserve_after=0.0 if reserve else None,
            standing={TEAM: standing},
        )
        standing = []
        for r in done.reservations.get(TEAM, []):
            promised.setdefault(r.workload_id, r.due_at)
            assert r.due_at <= last.get(r.workload_id, r.due_at)  # a promise only moves earlier
            last[r.workload_id] = r.due_at
            standing.append((next(w for w in queue if w.id == r.workload_id), r.due_at))
        for i in done.plan.admit:
            admitted_at[i] = now
            gpus, limit, run = trace[i][1], trace[i][2], trace[i][3]
            running[i] = (gpus, now, limit)
            ends[i] = now + run
            heapq.heappush(events, now + run)
        queue = [w for w in queue if w.id not in admitted_at]
    return {"admitted": admitted_at, "promised": promised, "last": last}


traces = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=20 * HOUR),
        st.integers(min_value=1, max_value=4),
        st.sampled_from([600.0, HOUR, 4 * HOUR]),
        st.floats(min_value=0.1, max_value=1.0),
    ),
    min_size=1,
    max_size=40,
).map(lambda rows: sorted((a, g, limit, limit * share) for a, g, limit, share in rows))


@settings(max_examples=150, deadline=None)
@given(traces)
def test_every_promise_is_kept_whatever_the_trace(trace):
    result = simulate(4, trace, reserve=True)
    for workload_id, due in result["promised"].items():
        assert workload_id in result["admitted"]
        assert result["admitted"][workload_id] <= result["last"][workload_id] <= due


@settings(max_examples=150, deadline=None)
@given(traces)
def test_every_promise_is_kept_whatever_the_trace_where_the_queue_ages(trace):
    result = simulate(4, trace, reserve=True, aging=True)
    for workload_id, due in result["promised"].items():
        assert workload_id in result["admitted"]
        assert result["admitted"][workload_id] <= result["last"][workload_id] <= due


def test_a_large_job_behind_a_stream_of_small_ones_starves_without_a_reservation_and_not_with_one():
    # A 4-GPU job, then a 1-GPU job every 15 minutes, each running its whole hour-long limit.
    trace = [(0.0, 1, HOUR, HOUR), (1.0, 4, HOUR, HOUR)]
    trace += [(60.0 + 900.0 * k, 1, HOUR, HOUR) for k in range(96)]
    without = simulate(4, trace, reserve=False)
    with_reservation = simulate(4, trace, reserve=True)
    last_small = max(a for i, a in without["admitted"].items() if i != 1)
    assert without["admitted"][1] > last_small  # it started only once the stream had dried up
    assert with_reservation["admitted"][1] <= with_reservation["promised"][1] <= 2 * HOUR + 2 * END_SLACK_SECONDS


def test_the_gpu_a_held_back_long_job_would_take_goes_to_a_short_one_behind_it():
    head, short, long = _queue_behind_a_large_head()
    done = plan_and_backfill(
        QUOTA,
        [Held(1, TEAM, 3, order=1.0)],
        [head, long, short],
        running={TEAM: [Running(3, 2 * HOUR)]},
        time_limits={10: HOUR, 11: 600.0, 12: 5 * HOUR},
        now=0.0,
        reserve_after=0.0,
    )
    assert done.plan.admit == [short.id]
    assert done.plan.waiting[long.id] == RESERVED
    assert done.refused == [long.id]


def test_a_promise_is_brought_forward_when_the_work_ahead_ends_before_its_limit():
    # 4 of 4 GPUs held until 4 h by their limit; the 4-GPU head is promised 4 h. The work ends at 1 h.
    head = Waiting(10, TEAM, 4, created=0.0)
    later = Waiting(11, TEAM, 1, created=1.0)  # 1 GPU for 2 h
    limits = {10: HOUR, 11: 2 * HOUR}
    first = plan_and_backfill(QUOTA, [Held(1, TEAM, 4)], [head], running={TEAM: [Running(4, 4 * HOUR)]},
                              time_limits=limits, now=0.0, reserve_after=0.0)  # fmt: skip
    assert first.reservations[TEAM][0].due_at == 4 * HOUR
    # At 1 h three of the four GPUs came free (their work ended early); the fourth is held until 2 h.
    now = HOUR
    done = plan_and_backfill(
        QUOTA, [Held(2, TEAM, 1)], [head, later], running={TEAM: [Running(1, 2 * HOUR)]},
        time_limits=limits, now=now, reserve_after=0.0, standing={TEAM: [(head, 4 * HOUR)]},
    )  # fmt: skip
    # The promise moves to 2 h, when the last GPU is free by its limit (no longer 4 h); the 2-hour job
    # that would have fitted before 4 h now runs past it, so it waits.
    assert done.reservations[TEAM][0].workload_id == head.id
    assert done.reservations[TEAM][0].due_at == 2 * HOUR
    assert done.plan.admit == []
    assert done.plan.waiting[later.id] == RESERVED


def test_a_held_back_head_is_reserved_for_before_those_behind_it():
    # The head (1 GPU, 5 h) is held back by a promise due at 1 h; the 2-GPU job behind it does not fit now.
    # All have waited long enough to be reserved for beyond the head.
    now = RESERVE_DEEPER_AFTER_SECONDS + 10.0
    promised = Waiting(9, TEAM, 4, created=0.0)
    head = Waiting(10, TEAM, 1, created=1.0)
    behind = Waiting(11, TEAM, 2, created=2.0)
    done = plan_and_backfill(
        QUOTA, [Held(1, TEAM, 3)], [head, behind], running={TEAM: [Running(3, now + HOUR)]},
        time_limits={9: HOUR, 10: 5 * HOUR, 11: HOUR}, now=now, reserve_after=0.0,
        standing={TEAM: [(promised, now + HOUR)]},
    )  # fmt: skip
    assert done.refused == [head.id]
    reserved = [r.workload_id for r in done.reservations[TEAM]]
    # The held-back head keeps its turn: reserved for before the one behind it, not passed by it.
    assert reserved == [promised.id, head.id, behind.id]
    due = {r.workload_id: r.due_at for r in done.reservations[TEAM]}
    assert due[head.id] <= due[behind.id]


def test_a_large_job_ahead_in_the_order_starts_before_a_small_one_promised_earlier_when_the_promise_allows():
    # A 1-GPU, 4-hour job was promised 3 h; a 4-GPU, 1-hour job is now ahead of it in the queue's order
    # (aging). All 4 GPUs are free: the large one starts now, the small one is still due by its promise.
    small = Waiting(10, TEAM, 1, created=0.0)
    large = Waiting(11, TEAM, 4, created=60.0)
    done = plan_and_backfill(
        QUOTA, [], [large, small], running={}, time_limits={10: 4 * HOUR, 11: HOUR}, now=HOUR,
        reserve_after=0.0, standing={TEAM: [(small, 3 * HOUR)]},
    )  # fmt: skip
    assert done.plan.admit == [large.id]
    due = {r.workload_id: r.due_at for r in done.reservations[TEAM]}
    assert HOUR < due[small.id] <= 3 * HOUR  # after the large one ends by its limit, not after its promise


def test_a_promise_still_holds_back_a_large_job_ahead_of_it_that_would_make_it_late():
    # The same, but the large job's limit (5 h) would run past the small one's promise: the promise holds,
    # the small one starts now and the large one is reserved for after it.
    small = Waiting(10, TEAM, 1, created=0.0)
    large = Waiting(11, TEAM, 4, created=60.0)
    done = plan_and_backfill(
        QUOTA, [], [large, small], running={}, time_limits={10: 4 * HOUR, 11: 5 * HOUR}, now=HOUR,
        reserve_after=0.0, standing={TEAM: [(small, 3 * HOUR)]},
    )  # fmt: skip
    assert done.plan.admit == [small.id]
    assert done.plan.waiting[large.id] == RESERVED
    due = {r.workload_id: r.due_at for r in done.reservations[TEAM]}
    assert due[large.id] >= HOUR + 4 * HOUR  # once the small one has ended by its limit


def test_beyond_the_head_a_workload_is_reserved_for_only_once_it_has_waited_long_enough():
    # 4 of 4 GPUs held for an hour; the head and the one behind it wait. Only the head is promised GPUs
    # until the one behind it has waited RESERVE_DEEPER_AFTER_SECONDS: a small job promised at once held
    # its GPU against a large one that came ahead of it in the order minutes later.
    now = 10 * HOUR
    head = Waiting(10, TEAM, 2, created=now - 600.0)
    for waited, promised in ((600.0, [head.id]), (RESERVE_DEEPER_AFTER_SECONDS, [head.id, 11])):
        behind = Waiting(11, TEAM, 1, created=now - waited)
        done = plan_and_backfill(
            QUOTA, [Held(1, TEAM, 4)], [head, behind], running={TEAM: [Running(4, now + HOUR)]},
            time_limits={10: HOUR, 11: HOUR}, now=now, reserve_after=0.0,
        )  # fmt: skip
        assert [r.workload_id for r in done.reservations[TEAM]] == promised


def test_a_workload_held_back_in_an_earlier_round_and_due_now_starts_in_the_same_pass():
    # All 4 GPUs are free (the work ahead ended early). Three 2-GPU jobs in order: one not promised (4 h),
    # one promised by 2 h (2 h), one promised by 1 h (1 h). The plan's first round admits the first two,
    # which would make the 1 h promise late: it is pinned and the first job held back. The later rounds
    # reserve the first job at now, beside both promises: it starts in this pass, not at the next one
    # (the replay and the bench pass only at arrivals and ends, so a promise there was kept late).
    first = Waiting(10, TEAM, 2, created=0.0)
    by_two = Waiting(11, TEAM, 2, created=1.0)
    by_one = Waiting(12, TEAM, 2, created=2.0)
    done = plan_and_backfill(
        QUOTA, [], [first, by_two, by_one], running={}, time_limits={10: 4 * HOUR, 11: 2 * HOUR, 12: HOUR},
        now=0.0, reserve_after=0.0, standing={TEAM: [(by_one, HOUR), (by_two, 2 * HOUR)]},
    )  # fmt: skip
    assert sorted(done.plan.admit) == [first.id, by_one.id]
    assert done.refused == [by_two.id]
    assert done.plan.waiting[by_two.id] == RESERVED
    due = {r.workload_id: r.due_at for r in done.reservations[TEAM]}
    assert due == {by_two.id: due[by_two.id]}  # no reservation left at now for what started
    assert 0.0 < due[by_two.id] <= 2 * HOUR  # the promise still holds beside the two started
    # Every block fits the quota: the two started until their limits, the promised one from its due.
    timeline = Timeline(4, [Block(2, 0.0, ends_by(started=None, admitted=0.0, time_limit=t, now=0.0))
                            for t in (4 * HOUR, HOUR)])  # fmt: skip
    assert timeline.fits(2, due[by_two.id], due[by_two.id] + START_SLACK_SECONDS + 2 * HOUR + END_SLACK_SECONDS)


LENDER = 2
COHORT = {
    TEAM: TeamQuota(team_id=TEAM, quota=4, borrowing_limit=4),
    LENDER: TeamQuota(team_id=LENDER, quota=4),  # its 4 GPUs idle: the cohort may lend them
}


def test_a_team_whose_quota_is_full_borrows_the_cohorts_idle_gpus_where_its_type_reserves():
    # The team holds its 4 GPUs (for 1 h by their limit) and queues a 1-GPU job; the lender's 4 are idle.
    # Held to the team's quota, the plan's borrowed admission was always held back ("reservation ahead").
    waiting = Waiting(10, TEAM, 1, created=0.0)
    done = plan_and_backfill(
        COHORT, [Held(1, TEAM, 4, order=1.0)], [waiting], running={TEAM: [Running(4, HOUR)]},
        time_limits={10: 2 * HOUR}, now=60.0, reserve_after=0.0,
    )  # fmt: skip
    assert done.plan.admit == [waiting.id]
    assert waiting.id in done.plan.borrowed
    assert done.refused == []


def test_borrowed_work_that_would_outlast_a_reservations_start_waits_and_short_borrowed_work_passes():
    # The team holds its 4 GPUs until 1 h and may borrow 2 more; its 4-GPU head (beyond what it may borrow)
    # is reserved for at 1 h. Once the team's own work ends, what it borrowed counts as its own: a
    # 2-hour borrowed job would hold one of the four GPUs the head is promised, so it waits; a 30-minute one
    # ends before and passes, on the lender's idle GPUs.
    teams = {**COHORT, TEAM: TeamQuota(team_id=TEAM, quota=4, borrowing_limit=2)}
    head = Waiting(10, TEAM, 4, created=0.0)
    long = Waiting(11, TEAM, 1, created=1.0)
    short = Waiting(12, TEAM, 1, created=2.0)
    done = plan_and_backfill(
        teams, [Held(1, TEAM, 4, order=1.0)], [head, long, short], running={TEAM: [Running(4, HOUR)]},
        time_limits={10: HOUR, 11: 2 * HOUR, 12: 1800.0}, now=0.0, reserve_after=0.0,
    )  # fmt: skip
    assert [(r.workload_id, r.due_at) for r in done.reservations[TEAM]] == [(head.id, HOUR)]
    assert done.plan.admit == [short.id]
    assert short.id in done.plan.borrowed
    assert done.plan.waiting[long.id] == RESERVED
