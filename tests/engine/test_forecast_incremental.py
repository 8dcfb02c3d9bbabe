"""The forecast keeps what is held across its steps (`Holding`: totals added to and taken from as work
starts and ends) instead of re-summing every running workload at each step, so a step costs the same with
5,000 running as with 50. Its estimates must be exactly those of the plan rebuilt at every step: the
reference below is the forecast's loop as it was, rebuilding (pure, hypothesis)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.services.queue.forecast import MAX_QUEUED, Arrival, Estimate, _in_order, _requeue, forecast
from jobs.services.queue.sharing_plan import Held, Holding, TeamQuota, Waiting, plan


def _rebuilt(teams, running, queued, durations, *, capacity=None, horizon=7 * 24 * 3600.0, arrivals=(), until=None):
    """The forecast with every step's plan summed from every running workload, and the ended ones
    filtered out of all of them (the code before the incremental state)."""
    active = {h.id: (h, end) for h, end in running}
    waiting = {w.id for w in queued[:MAX_QUEUED]}
    if until is not None:
        waiting &= set(until)
    queues: dict[int, list[Waiting]] = {}
    for w in queued[:MAX_QUEUED]:
        queues.setdefault(w.team_id, []).append(w)
    runs = dict(durations)
    for a in arrivals:
        runs[a.waiting.id] = a.run_seconds
    latest = max((w.created for w in queued), default=0.0)
    newest = max((h.order for h, _ in running), default=0.0) + 1.0
    arrivals = sorted(arrivals, key=lambda a: a.at)
    next_arrival, starts, first, now = 0, {}, None, 0.0
    for _ in range(10 * (len(waiting) + len(active) + len(arrivals)) + 10):
        while next_arrival < len(arrivals) and arrivals[next_arrival].at <= now:
            a = arrivals[next_arrival]
            next_arrival += 1
            queues.setdefault(a.waiting.team_id, []).append(replace(a.waiting, created=latest + a.at))
        result = plan(teams, [h for h, _ in active.values()], _in_order(queues), capacity=capacity)
        first = first or result
        for victim in result.preempt:
            h, end = active.pop(victim, (None, 0.0))
            if h is not None and h.restartable:
                runs.setdefault(h.id, end - now)
                again = Waiting(h.id, h.team_id, h.gpus, h.user_id, h.priority, h.order, requeued=True)
                _requeue(queues.setdefault(h.team_id, []), again)
        admitted = set(result.admit)
        for team_queue in queues.values():
            for w in team_queue:
                if w.id in admitted:
                    if w.id in waiting:
                        starts[w.id] = now
                    held = Held(w.id, w.team_id, w.gpus, w.user_id, w.priority, w.id in result.borrowed, newest + now)
                    active[w.id] = (held, now + max(1.0, runs.get(w.id, 3600.0)))
            team_queue[:] = [w for w in team_queue if w.id not in admitted]
        if waiting <= starts.keys():
            break
        events = [end for _, end in active.values()]
        if next_arrival < len(arrivals):
            events.append(arrivals[next_arrival].at)
        if not events:
            break
        now = min(events)
        if now > horizon:
            break
        active = {i: (h, end) for i, (h, end) in active.items() if end > now}
    reasons = first.waiting if first is not None else {}
    return {w.id: Estimate(starts.get(w.id), reasons.get(w.id, "")) for w in queued}


TEAM_IDS = (1, 2, 3)
teams_st = st.fixed_dictionaries(
    {
        t: st.builds(
            TeamQuota,
            team_id=st.just(t),
            quota=st.integers(0, 8),
            borrowing_limit=st.integers(0, 6),
            lending_limit=st.one_of(st.none(), st.integers(0, 6)),
            user_max_gpus=st.one_of(st.none(), st.integers(1, 6)),
        )
        for t in TEAM_IDS
    }
)
running_st = st.lists(
    st.tuples(
        st.sampled_from(TEAM_IDS),
        st.sampled_from([1, 2, 4]),
        st.integers(0, 2),  # user
        st.integers(0, 1),  # priority
        st.booleans(),  # borrowed
        st.booleans(),  # restartable
        st.booleans(),  # preemptible
        st.sampled_from([0.0, 300.0, 600.0, 900.0, 1800.0, 3600.0]),  # end (ties on purpose)
    ),
    max_size=14,
)
queued_st = st.lists(
    st.tuples(st.sampled_from((*TEAM_IDS, 4)), st.sampled_from([1, 2, 4]), st.integers(0, 2), st.integers(0, 1)),
    min_size=1,
    max_size=20,
)


@settings(max_examples=150, deadline=None)
@given(
    teams_st,
    running_st,
    queued_st,
    st.one_of(st.none(), st.integers(4, 30)),
    st.lists(st.tuples(st.sampled_from(TEAM_IDS), st.sampled_from([1, 2]), st.integers(0, 7200)), max_size=4),
    st.one_of(st.none(), st.integers(1, 6)),
)
def test_the_incremental_forecast_equals_the_rebuilt_one(teams, run_rows, queue_rows, capacity, coming, head):
    running = [
        (Held(100 + i, t, g, u, p, b, float(i), restartable=r, preemptible=pre), end)
        for i, (t, g, u, p, b, r, pre, end) in enumerate(run_rows)
    ]
    queued = [Waiting(i, t, g, u, p, float(i)) for i, (t, g, u, p) in enumerate(queue_rows, start=1)]
    durations = {w.id: 300.0 * (1 + w.id % 5) for w in queued}
    arrivals = [Arrival(float(at), Waiting(-1000 - k, t, g, -1000 - k), 900.0) for k, (t, g, at) in enumerate(coming)]
    until = [w.id for w in queued][:head] if head else None
    kwargs = {"capacity": capacity, "arrivals": arrivals, "until": until}
    assert forecast(teams, running, queued, durations, **kwargs) == _rebuilt(
        teams, running, queued, durations, **kwargs
    )


@settings(max_examples=100, deadline=None)
@given(teams_st, running_st, queued_st, st.lists(st.integers(0, 13), max_size=8))
def test_a_plan_from_kept_totals_equals_one_summed_from_what_is_held(teams, run_rows, queue_rows, ended):
    held = [
        Held(100 + i, t, g, u, p, b, float(i), preemptible=pre) for i, (t, g, u, p, b, _, pre, _) in enumerate(run_rows)
    ]
    holding = Holding(held)
    for i in sorted(set(ended), reverse=True):
        if i < len(held):
            holding.remove(held.pop(i))
    queued = [Waiting(i, t, g, u, p) for i, (t, g, u, p) in enumerate(queue_rows, start=1)]
    assert plan(teams, (), queued, holding=holding) == plan(teams, held, queued)
