"""The cohort admission plan (pure): borrowing, lending limits, reclaim, user caps, queue order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.services.queue.sharing_plan import (
    Held,
    QueueEntry,
    Reason,
    TeamQuota,
    Waiting,
    decayed_usage,
    order_queue,
    plan,
)

A, B = 1, 2


def cohort(borrow_b: int = 4, lend_a: int | None = None) -> dict[int, TeamQuota]:
    return {A: TeamQuota(A, quota=4, lending_limit=lend_a), B: TeamQuota(B, quota=4, borrowing_limit=borrow_b)}


def test_b_borrows_what_a_leaves_idle_up_to_its_borrowing_limit():
    queued = [Waiting(i, B, 2) for i in range(1, 6)]
    result = plan(cohort(borrow_b=2), [], queued)
    assert result.admit == [1, 2, 3]  # 4 own + 2 borrowed
    assert result.borrowed == {3}
    assert result.waiting[4] == Reason.BORROWING_LIMIT


def test_a_lending_limit_keeps_the_rest_of_the_quota_for_its_team():
    queued = [Waiting(i, B, 1) for i in range(1, 10)]
    result = plan(cohort(borrow_b=8, lend_a=1), [], queued)
    assert result.admit == [1, 2, 3, 4, 5]  # B's 4 + the 1 GPU A lends
    assert result.waiting[6] == Reason.COHORT


def test_a_team_alone_never_borrows():
    teams = {B: TeamQuota(B, quota=4, borrowing_limit=4)}
    result = plan(teams, [Held(9, B, 4)], [Waiting(1, B, 1)])
    # Alone, the pool is its own quota: nothing idle to borrow.
    assert result.admit == []
    assert result.waiting[1] == Reason.COHORT


def test_lender_reclaims_lowest_priority_then_newest_and_only_what_it_needs():
    held = [
        Held(10, B, 4, order=1),  # B's own quota
        Held(11, B, 1, borrowed=True, priority=5, order=2),
        Held(12, B, 1, borrowed=True, order=3),
        Held(13, B, 2, borrowed=True, order=4),
    ]
    result = plan(cohort(), held, [Waiting(1, A, 2)])
    assert result.admit == [1]
    assert result.preempt == {13: 1}  # newest of the lowest priority; 2 GPUs are enough
    result = plan(cohort(), held, [Waiting(1, A, 3)])
    assert set(result.preempt) == {12, 13}
    result = plan(cohort(), held, [Waiting(1, A, 4)])
    assert set(result.preempt) == {11, 12, 13}


def test_work_within_its_own_quota_is_never_preempted():
    held = [Held(10, B, 4, order=1), Held(11, A, 4, order=2)]
    result = plan(cohort(), held, [Waiting(1, A, 1)])
    assert result.preempt == {}
    assert result.waiting[1] == Reason.TEAM_QUOTA


def test_borrowed_work_of_a_team_back_under_its_quota_is_not_preempted():
    # B's own job ended: its borrowed job now sits within B's quota.
    held = [Held(11, B, 2, borrowed=True), Held(12, A, 4)]
    result = plan(cohort(), held, [Waiting(1, A, 1)])
    assert result.preempt == {}


def test_borrowers_do_not_preempt_each_other():
    teams = {**cohort(), 3: TeamQuota(3, quota=0, borrowing_limit=4)}
    held = [Held(10, B, 4), Held(11, B, 4, borrowed=True)]
    result = plan(teams, held, [Waiting(1, 3, 1)])
    assert result.admit == []
    assert result.preempt == {}


def test_own_quota_work_of_every_team_comes_before_borrowing():
    queued = [Waiting(1, B, 4), Waiting(2, B, 4), Waiting(3, A, 4)]
    result = plan(cohort(), [], queued)
    assert result.admit == [1, 3]
    assert result.waiting[2] == Reason.COHORT


def test_user_cap():
    teams = {A: TeamQuota(A, quota=8, user_max_gpus=2)}
    queued = [Waiting(1, A, 2, user_id=7), Waiting(2, A, 1, user_id=7), Waiting(3, A, 1, user_id=8)]
    result = plan(teams, [], queued)
    assert result.admit == [1, 3]
    assert result.waiting[2] == Reason.USER_CAP


def test_requeued_first_then_fair_share_then_fifo():
    entries = [
        QueueEntry(1, A, user_id=7, gpus=1, priority=0, created=1),
        QueueEntry(2, A, user_id=8, gpus=1, priority=0, created=2),
        QueueEntry(3, A, user_id=7, gpus=1, priority=0, created=3, requeued=10),
        QueueEntry(4, A, user_id=7, gpus=1, priority=9, created=4),
    ]
    assert [w.id for w in order_queue(entries, {})] == [4, 3, 1, 2]
    # User 7 used a lot lately: with fair share user 8 goes first among equals.
    assert [w.id for w in order_queue(entries, {A: {7: 10.0, 8: 1.0}})] == [4, 3, 2, 1]


def test_teams_interleave_by_their_own_order():
    entries = [QueueEntry(i, A, 1, 1, 0, created=i) for i in range(1, 4)] + [
        QueueEntry(10 + i, B, 2, 1, 0, created=10 + i) for i in range(1, 3)
    ]
    assert [w.id for w in order_queue(entries, {})] == [1, 11, 2, 12, 3]


def test_decayed_usage_halves_after_a_half_life():
    recent = decayed_usage([(7, 0.0, 3600.0, 1)], now=3600.0, half_life=3600.0 * 1000)
    old = decayed_usage([(7, 0.0, 3600.0, 1)], now=7200.0, half_life=3600.0)
    assert abs(recent[7] - 1.0) < 0.01
    assert abs(old[7] - decayed_usage([(7, 3600.0, 7200.0, 1)], now=7200.0, half_life=3600.0)[7] / 2) < 1e-9


# --- property: random arrivals and ends in a cohort of three --------------------------------------
TEAMS = {
    1: TeamQuota(1, quota=4, borrowing_limit=2),
    2: TeamQuota(2, quota=4, borrowing_limit=4, lending_limit=2),
    3: TeamQuota(3, quota=2, borrowing_limit=6),
}
events = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), st.sampled_from([1, 2, 3]), st.integers(1, 4), st.integers(0, 2), st.booleans()),
        st.tuples(st.just("end"), st.integers(0, 50)),
        st.tuples(st.just("cancel"), st.integers(0, 50)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(events)
def test_never_above_quota_plus_borrowing_and_lenders_wait_at_most_one_reclaim(steps):
    held: dict[int, Held] = {}
    queue: list[QueueEntry] = []
    restartable: dict[int, bool] = {}
    next_id = 0
    clock = 0.0
    for step in steps:
        clock += 1
        if step[0] == "arrive":
            _, team, gpus, priority, may_restart = step
            next_id += 1
            queue.append(QueueEntry(next_id, team, team, gpus, priority, created=clock))
            restartable[next_id] = may_restart
        elif step[0] == "end" and held:
            del held[sorted(held)[step[1] % len(held)]]
        elif step[0] == "cancel" and queue:
            queue.pop(step[1] % len(queue))
        ordered = order_queue(queue, {})
        usage_before = {t: sum(h.gpus for h in held.values() if h.team_id == t) for t in TEAMS}
        result = plan(TEAMS, list(held.values()), ordered)
        for victim_id, for_id in result.preempt.items():
            victim = held.pop(victim_id)
            # Only borrowed work of a team above its own quota, and only for a lender within its own.
            assert victim.borrowed
            assert usage_before[victim.team_id] > TEAMS[victim.team_id].quota
            assert for_id in result.admit
            assert for_id not in result.borrowed
            if restartable[victim.id]:
                queue.append(QueueEntry(victim.id, victim.team_id, victim.team_id, victim.gpus, 0, clock, clock))
        for w in ordered:
            if w.id in result.admit:
                borrowed = w.id in result.borrowed
                held[w.id] = Held(w.id, w.team_id, w.gpus, priority=w.priority, borrowed=borrowed, order=clock)
        queue = [e for e in queue if e.id not in result.admit]
        usage = {t: sum(h.gpus for h in held.values() if h.team_id == t) for t in TEAMS}
        for t, q in TEAMS.items():
            assert usage[t] <= q.quota + q.borrowing_limit
        pool = sum(max(0, usage[t] - q.guaranteed) for t, q in TEAMS.items())
        assert pool <= sum(q.lendable for q in TEAMS.values())
        # No lender is left waiting for its own quota: whatever still waits does not fit in it.
        for e in queue:
            assert usage[e.team_id] + e.gpus > TEAMS[e.team_id].quota, (e, usage)


# --- settling what runs: borrowed marks and lowered limits ------------------------------------------
from jobs.services.queue.sharing_plan import marks, settle  # noqa: E402


def test_a_borrowed_workload_stops_being_borrowed_once_its_own_quota_covers_it():
    # B (quota 4) held 4 own + 2 borrowed; 2 own GPUs were released: the oldest borrowed one is covered.
    held = [Held(1, B, 2, order=1), Held(3, B, 2, borrowed=True, order=3), Held(4, B, 1, borrowed=True, order=4)]
    assert marks(cohort(), held) == {4}
    settled = settle(cohort(), held)
    assert settled.now_own == {3}
    assert settled.now_borrowed == set()
    assert settled.preempt == {}


def test_own_work_beyond_a_lowered_quota_becomes_borrowed_newest_first():
    teams = {A: TeamQuota(A, quota=4), B: TeamQuota(B, quota=2, borrowing_limit=4)}
    held = [Held(1, B, 2, order=1), Held(2, B, 1, order=2), Held(3, B, 1, order=3)]
    settled = settle(teams, held)
    assert settled.now_borrowed == {2, 3}
    assert settled.preempt == {}  # within quota + borrowing limit, and A lends them


def test_a_lowered_borrowing_limit_preempts_the_newest_borrowed_work_that_exceeds_it():
    held = [Held(1, B, 4, order=1)] + [Held(i, B, 1, borrowed=True, order=i) for i in range(2, 6)]
    settled = settle(cohort(borrow_b=1), held)
    assert settled.preempt == {5: B, 4: B, 3: B}  # B may hold 4 + 1
    assert settle(cohort(borrow_b=4), held).preempt == {}


def test_a_lowered_lending_cap_preempts_what_the_cohort_no_longer_lends():
    held = [Held(1, B, 4, order=1), Held(2, B, 2, borrowed=True, order=2), Held(3, B, 1, borrowed=True, order=3)]
    settled = settle(cohort(borrow_b=4, lend_a=1), held)
    assert settled.preempt == {2: B}  # the fewest: dropping the 2-GPU one leaves 1 borrowed = A's cap
    low_priority = [Held(1, B, 4), Held(2, B, 2, borrowed=True, priority=5), Held(3, B, 2, borrowed=True)]
    assert settle(cohort(borrow_b=4, lend_a=2), low_priority).preempt == {3: B}


@given(
    st.lists(st.tuples(st.sampled_from([A, B]), st.integers(1, 4), st.booleans()), max_size=10),
    st.integers(0, 4),
    st.integers(0, 4),
    st.integers(1, 6),
)
@settings(max_examples=200, deadline=None)
def test_settled_work_fits_every_limit_and_nothing_within_its_quota_is_preempted(rows, borrow, lend, quota_b):
    teams = {A: TeamQuota(A, quota=4, borrowing_limit=4, lending_limit=lend), B: TeamQuota(B, 4, borrow)}
    teams[B] = TeamQuota(B, quota=quota_b, borrowing_limit=borrow)
    held = [Held(i, team, gpus, borrowed=b, order=i) for i, (team, gpus, b) in enumerate(rows, start=1)]
    settled = settle(teams, held)
    left = [h for h in held if h.id not in settled.preempt]
    now_borrowed = marks(teams, held)
    for team_id, team in teams.items():
        own = sum(h.gpus for h in left if h.team_id == team_id and h.id not in now_borrowed)
        assert own <= team.quota
        assert sum(h.gpus for h in left if h.team_id == team_id) <= team.ceiling or not any(
            h.id in now_borrowed for h in left if h.team_id == team_id
        )
    assert all(victim in now_borrowed for victim in settled.preempt)
    usage = {t: sum(h.gpus for h in left if h.team_id == t) for t in teams}
    assert sum(max(0, usage[t] - teams[t].guaranteed) for t in teams) <= sum(t.lendable for t in teams.values())
