"""Aging (pure): where a GPU type ages, a team's queue goes, after priority and fair share, by GPUs x
time waited, so a large workload overtakes smaller ones submitted before it once it has waited a while;
off, the order is first come, first served; the queue page's sentence says what aging did."""

from __future__ import annotations

from jobs.services.queue.aging import overtaken
from jobs.services.queue.sharing_plan import QueueEntry, team_queues
from tests.engine.test_reservation_plan import simulate

HOUR = 3600.0
TEAM = 1


def order(entries, *, usage=None, aging_now=None) -> list[int]:
    return [e.id for e in team_queues(entries, {TEAM: usage} if usage else {}, aging_now=aging_now)[TEAM]]


SMALL = QueueEntry(id=1, team_id=TEAM, user_id=10, gpus=1, priority=0, created=0.0)
LARGE = QueueEntry(id=2, team_id=TEAM, user_id=10, gpus=8, priority=0, created=3000.0)


def test_off_the_queue_is_first_come_first_served():
    assert order([LARGE, SMALL]) == [1, 2]


def test_a_large_workload_overtakes_an_earlier_small_one_only_after_it_has_waited_a_while():
    # At 3100 s: the 8-GPU job waited 100 s (800 GPU-s), the 1-GPU one 3100 s: the small one stays first.
    assert order([LARGE, SMALL], aging_now=3100.0) == [1, 2]
    # At 1 h: 8 x 600 s = 4800 GPU-s against 3600: the large one goes first.
    assert order([LARGE, SMALL], aging_now=HOUR) == [2, 1]


def test_priority_and_fair_share_stay_ahead_of_aging():
    urgent = QueueEntry(id=3, team_id=TEAM, user_id=10, gpus=1, priority=5, created=3500.0)
    assert order([LARGE, SMALL, urgent], aging_now=10 * HOUR) == [3, 2, 1]
    light = QueueEntry(id=4, team_id=TEAM, user_id=20, gpus=1, priority=0, created=3500.0)
    # user 20 used less than user 10: their workload goes first, whatever the others waited
    assert order([LARGE, SMALL, light], usage={10: 50.0, 20: 1.0}, aging_now=10 * HOUR) == [4, 2, 1]


def test_the_sentence_says_how_long_it_waited_and_how_many_it_passed():
    others = [(1, 1, 0.0, 0), (5, 1, 600.0, 0), (6, 8, 100.0, 0), (7, 1, 0.0, 3)]
    said = overtaken((2, 8, 3000.0, 0), others, now=3 * HOUR)
    # passes the two earlier 1-GPU jobs of its priority, not the earlier 8-GPU one nor the priority-3 one
    assert said.passed == 2
    assert said.sentence().startswith("Waiting 2.2 h: moved ahead of 2 smaller workloads submitted before it")
    fresh = overtaken((2, 8, 3000.0, 0), others, now=3010.0)
    assert fresh.passed == 0
    assert "has not moved it ahead" in fresh.sentence()


def test_with_aging_a_large_job_behind_a_backlog_of_small_ones_starts_hours_sooner():
    # Twenty 1-GPU jobs of an hour each queue on a 4-GPU quota; a 4-GPU job arrives just after them.
    trace = [(float(i), 1, HOUR, HOUR) for i in range(20)] + [(100.0, 4, HOUR, HOUR)]
    fifo = simulate(4, trace, reserve=True)
    aged = simulate(4, trace, reserve=True, aging=True)
    assert fifo["admitted"][20] >= 4 * HOUR  # behind sixteen small jobs, four at a time
    # It overtakes the twelve not yet promised anything; the four reserved for before it arrived keep
    # their promise (the first hour's ends), and it has the GPUs after them.
    assert aged["admitted"][20] <= 2 * HOUR + 60
    for result in (fifo, aged):
        for workload_id, due in result["promised"].items():
            assert result["admitted"][workload_id] <= due


def test_a_start_estimate_made_now_counts_the_aging_that_happens_while_it_waits():
    # 4 GPUs held for another hour; six 1-GPU jobs of an hour waited 2 h; a 4-GPU job of an hour just came.
    from jobs.services.queue.forecast import Aging, forecast
    from jobs.services.queue.sharing_plan import Held, TeamQuota, Waiting

    now = 10 * HOUR
    small = [Waiting(i, TEAM, 1, created=now - 2 * HOUR) for i in range(1, 7)]
    large = Waiting(9, TEAM, 4, created=now - 60.0)
    queue = [*small, large]  # the order now: 4 GPUs x 1 min is far less than 1 GPU x 2 h
    args = {
        "teams": {TEAM: TeamQuota(team_id=TEAM, quota=4)},
        "running": [(Held(100, TEAM, 4), HOUR)],
        "queued": queue,
        "durations": {w.id: HOUR for w in queue},
    }
    # Kept in today's order: four small ones at 1 h, the last two at 2 h, the large one once all 4 are free.
    assert forecast(**args)[9].start_in == 3 * HOUR
    # Aged at each step: at 1 h it has waited 61 min (4 x 61 min > 1 x 3 h), so it goes first.
    aged = forecast(**args, aged=Aging(start=now, usage={}))
    assert aged[9].start_in == HOUR
    assert sorted(aged[i].start_in for i in range(1, 7)) == [2 * HOUR] * 4 + [3 * HOUR] * 2


def test_aging_in_a_forecast_keeps_fair_share_ahead_of_it():
    # The person with the least usage stays first however long the others' large job has waited.
    from jobs.services.queue.forecast import Aging, forecast
    from jobs.services.queue.sharing_plan import Held, TeamQuota, Waiting

    light = Waiting(1, TEAM, 4, user_id=20, created=5 * HOUR)
    heavy = Waiting(2, TEAM, 4, user_id=10, created=0.0)
    estimates = forecast(
        {TEAM: TeamQuota(team_id=TEAM, quota=4)},
        [(Held(100, TEAM, 4), HOUR)],
        [light, heavy],
        {1: HOUR, 2: HOUR},
        aged=Aging(start=6 * HOUR, usage={TEAM: {10: 50.0, 20: 1.0}}),
    )
    assert (estimates[1].start_in, estimates[2].start_in) == (HOUR, 2 * HOUR)
