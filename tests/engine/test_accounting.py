"""GPU-hours: exact at day, month and range boundaries; the roll-up agrees with the live computation."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.db.models import Q
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from jobs.models import State, Workload
from jobs.models.usage import RolledUpDay, RunSegment
from jobs.services.transitions import transition
from jobs.services.usage import accounting
from jobs.services.usage.accounting import (
    budget_exhausted,
    rollup_pending,
    split_by_day,
    totals,
    usage_report,
    usage_report_days,
    usage_rollup_day,
)
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory


def test_split_by_day_cuts_at_midnight():
    tz = zoneinfo.ZoneInfo("UTC")
    parts = list(split_by_day(datetime(2026, 1, 31, 23, 0, tzinfo=UTC), datetime(2026, 2, 1, 1, 30, tzinfo=UTC), tz))
    assert parts == [(date(2026, 1, 31), 3600.0), (date(2026, 2, 1), 5400.0)]


def test_a_run_counts_from_its_start_or_from_a_later_mark_change_never_earlier():
    started = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    assert accounting.counted_start(started, None) == started
    assert accounting.counted_start(started, started + timedelta(hours=2)) == started + timedelta(hours=2)
    # A mark older than the run (left from an earlier attempt) does not count time the run never had.
    assert accounting.counted_start(started, started - timedelta(hours=2)) == started


def test_split_by_day_follows_the_local_calendar():
    tz = zoneinfo.ZoneInfo("Europe/Berlin")  # UTC+1 in winter
    parts = list(split_by_day(datetime(2026, 1, 1, 22, 30, tzinfo=UTC), datetime(2026, 1, 1, 23, 30, tzinfo=UTC), tz))
    assert parts == [(date(2026, 1, 1), 1800.0), (date(2026, 1, 2), 1800.0)]


def test_split_by_day_counts_the_hours_a_day_has_when_the_clocks_change():
    tz = zoneinfo.ZoneInfo("Europe/Berlin")  # forward on 29 March 2026, back on 25 October
    spring = dict(split_by_day(datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 3, 30, 12, tzinfo=UTC), tz))
    autumn = dict(split_by_day(datetime(2026, 10, 24, 12, tzinfo=UTC), datetime(2026, 10, 26, 12, tzinfo=UTC), tz))
    assert spring[date(2026, 3, 29)] == 23 * 3600.0
    assert autumn[date(2026, 10, 25)] == 25 * 3600.0
    assert sum(spring.values()) == sum(autumn.values()) == 48 * 3600.0


@pytest.fixture
def lab(db):
    team = TeamFactory(slug="lab")
    member = MembershipFactory(team=team)
    p100 = GpuTypeFactory(slug="p100", billing_weight="1.0")
    v100 = GpuTypeFactory(slug="v100", billing_weight="2.0")
    return team, member.user, p100, v100


def make(team, user, gpu_type, gpus, start, end, state=State.SUCCEEDED):
    return Workload.objects.create(
        team=team, owner=user, name="w", kind="batch", image="ubuntu", gpu_type=gpu_type, gpu_count=gpus,
        time_limit_seconds=86400, state=state, started_at=start, finished_at=end,
    )  # fmt: skip


def test_a_job_across_midnight_and_month_end_is_split_exactly(lab):
    team, user, p100, _ = lab
    make(team, user, p100, 2, datetime(2026, 1, 31, 22, 0, tzinfo=UTC), datetime(2026, 2, 1, 2, 0, tzinfo=UTC))
    with time_machine.travel(datetime(2026, 2, 10, tzinfo=UTC)):
        january = usage_report_days(first_day=date(2026, 1, 1), last_day=date(2026, 1, 31))
        february = usage_report_days(first_day=date(2026, 2, 1), last_day=date(2026, 2, 28))
    assert [(r.day, r.gpu_hours) for r in january] == [(date(2026, 1, 31), 4.0)]
    assert [(r.day, r.gpu_hours) for r in february] == [(date(2026, 2, 1), 4.0)]


def test_a_range_clips_to_the_second(lab):
    team, user, p100, _ = lab
    make(team, user, p100, 1, datetime(2026, 3, 1, 10, 0, tzinfo=UTC), datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    with time_machine.travel(datetime(2026, 3, 5, tzinfo=UTC)):
        rows = usage_report(start=datetime(2026, 3, 1, 11, 59, 59, tzinfo=UTC), end=datetime(2026, 3, 2, tzinfo=UTC))
    assert [r.gpu_seconds for r in rows] == [1.0]


def test_running_workloads_count_live(lab):
    team, user, p100, _ = lab
    make(team, user, p100, 4, datetime(2026, 4, 1, 8, 0, tzinfo=UTC), None, state=State.RUNNING)
    with time_machine.travel(datetime(2026, 4, 1, 8, 30, tzinfo=UTC), tick=False):
        rows = usage_report_days(first_day=date(2026, 4, 1), last_day=date(2026, 4, 1))
    assert [r.gpu_hours for r in rows] == [2.0]


def test_billing_weights_apply(lab):
    team, user, p100, v100 = lab
    make(team, user, p100, 1, datetime(2026, 5, 1, 0, 0, tzinfo=UTC), datetime(2026, 5, 1, 1, 0, tzinfo=UTC))
    make(team, user, v100, 1, datetime(2026, 5, 1, 0, 0, tzinfo=UTC), datetime(2026, 5, 1, 1, 0, tzinfo=UTC))
    with time_machine.travel(datetime(2026, 5, 2, tzinfo=UTC)):
        rows = usage_report_days(first_day=date(2026, 5, 1), last_day=date(2026, 5, 1))
    assert totals(rows, "gpu_type_id") == {p100.id: (1.0, 1.0), v100.id: (1.0, 2.0)}


def test_rollup_gives_the_same_report_as_live(lab):
    team, user, p100, v100 = lab
    base = datetime(2026, 6, 1, tzinfo=UTC)
    for i in range(20):
        start = base + timedelta(hours=7 * i, minutes=13 * i)
        make(team, user, p100 if i % 2 else v100, 1 + i % 3, start, start + timedelta(hours=3, seconds=17 * i))
    with time_machine.travel(datetime(2026, 6, 20, tzinfo=UTC)):
        live = usage_report_days(first_day=date(2026, 6, 1), last_day=date(2026, 6, 10))
        assert rollup_pending() > 0
        rolled = usage_report_days(first_day=date(2026, 6, 1), last_day=date(2026, 6, 10))
    assert [(r.day, r.team_id, r.user_id, r.gpu_type_id) for r in rolled] == [
        (r.day, r.team_id, r.user_id, r.gpu_type_id) for r in live
    ]
    assert [r.gpu_seconds for r in rolled] == pytest.approx([r.gpu_seconds for r in live])


def test_a_late_recorded_end_invalidates_the_rollup(lab):
    team, user, p100, _ = lab
    workload = make(team, user, p100, 1, datetime(2026, 7, 1, 23, 0, tzinfo=UTC), None, state=State.RUNNING)
    with time_machine.travel(datetime(2026, 7, 3, tzinfo=UTC)):
        usage_rollup_day(date(2026, 7, 1))
        usage_rollup_day(date(2026, 7, 2))
        # The tracker learns (late) that it ended at 23:30 on the 1st.
        transition(workload, State.SUCCEEDED, finished_at=datetime(2026, 7, 1, 23, 30, tzinfo=UTC))
        rows = usage_report_days(first_day=date(2026, 7, 1), last_day=date(2026, 7, 2))
    assert [(r.day, r.gpu_seconds) for r in rows] == [(date(2026, 7, 1), 1800.0)]


def test_budget_exhausted_when_month_usage_reaches_it(lab):
    team, user, _, v100 = lab
    team.monthly_gpu_hour_budget = 10
    team.save()
    make(team, user, v100, 1, datetime(2026, 8, 1, 0, 0, tzinfo=UTC), datetime(2026, 8, 1, 4, 0, tzinfo=UTC))
    with time_machine.travel(datetime(2026, 8, 2, tzinfo=UTC)):
        assert not budget_exhausted(team)  # 4 h at weight 2 = 8 of 10
        make(team, user, v100, 1, datetime(2026, 8, 1, 5, 0, tzinfo=UTC), datetime(2026, 8, 1, 6, 0, tzinfo=UTC))
        assert budget_exhausted(team)  # 10 of 10
    with time_machine.travel(datetime(2026, 9, 1, 1, tzinfo=UTC)):
        assert not budget_exhausted(team)  # a new month


# --- the live computation in PostgreSQL is the Python one ----------------------------------------------
instants = st.datetimes(
    min_value=datetime(2026, 3, 27), max_value=datetime(2026, 4, 3), timezones=st.just(UTC)
)  # Berlin's clocks go forward on 29 March: one local day of the range has 23 hours


@st.composite
def runs(draw):
    start = draw(instants)
    return {
        "gpus": draw(st.integers(1, 8)),
        "start": start,
        "length": draw(st.one_of(st.none(), st.timedeltas(timedelta(0), timedelta(days=4)))),
        "counted_after": draw(st.one_of(st.none(), st.timedeltas(timedelta(0), timedelta(days=1)))),
        "segment": draw(st.booleans()),
        "type": draw(st.integers(0, 1)),
    }


@hypothesis_settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    drawn=st.lists(runs(), min_size=1, max_size=8),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/Los_Angeles"]),
    window=st.tuples(instants, instants),
)
def test_the_database_splits_and_sums_as_python_does(lab, settings, drawn, zone, window):
    """Every workload and run segment, clipped to any window and cut at local midnights (a DST change
    included), gives PostgreSQL the same GPU-seconds per day, team, user and type as the Python path
    that SQLite uses."""
    team, user, p100, v100 = lab
    Workload.objects.filter(team=team).delete()
    now = datetime(2026, 4, 2, 12, tzinfo=UTC)
    for run in drawn:
        gpu_type = (p100, v100)[run["type"]]
        end = run["start"] + run["length"] if run["length"] is not None else None
        if run["segment"]:
            workload = make(team, user, gpu_type, run["gpus"], None, None, state=State.QUEUED)
            RunSegment.objects.create(
                workload=workload, team=team, owner=user, gpu_type=gpu_type, gpu_count=run["gpus"], attempt=0,
                started_at=run["start"], finished_at=end or run["start"] + timedelta(hours=5), reason="Preempted", borrowed=False,
            )  # fmt: skip
        else:
            counted = run["start"] + run["counted_after"] if run["counted_after"] is not None else None
            workload = make(team, user, gpu_type, run["gpus"], run["start"], end,
                            state=State.SUCCEEDED if end else State.RUNNING)  # fmt: skip
            Workload.objects.filter(id=workload.id).update(counted_from=counted)
    settings.TIME_ZONE = zone
    start, end = sorted(window)
    for filters in (None, Q(gpu_type_id=p100.id), Q(team_id__in=[])):
        workloads, segments = accounting._live_querysets(start, end, filters)
        in_database = accounting._live_usage_sql(workloads, segments, start=start, end=min(end, now), now=now)
        in_python = accounting._live_usage_python(workloads, segments, start=start, end=min(end, now), now=now)
        positive = {key: value for key, value in in_python.items() if value > 0}
        assert in_database.keys() == positive.keys()
        for key, seconds in positive.items():
            assert in_database[key] == pytest.approx(seconds, rel=1e-9, abs=1e-6)


# --- which closed days a recorded run resets -------------------------------------------------------------
T = datetime(2026, 8, 10, 9, tzinfo=UTC)


@pytest.mark.parametrize(
    ("before", "after", "since"),
    [
        (None, None, None),
        ((T, None), (T, T + timedelta(days=3)), T + timedelta(days=3)),  # ended: nothing before its end
        ((T, None), (T, T - timedelta(hours=1) + timedelta(days=1)), T + timedelta(hours=23)),
        (None, (T, None), T),  # a start learned now: from the start
        (None, (T, T + timedelta(hours=2)), T),  # started and ended in one step
        ((T, None), (T + timedelta(hours=5), None), T),  # counted from later: from the earlier
        ((T, T + timedelta(hours=2)), (T, T + timedelta(hours=1)), T + timedelta(hours=1)),  # end corrected
        ((T, None), None, None),  # requeued: the run is kept as a segment, counted the same
        ((T, None), (T, None), None),
    ],
)
def test_a_recorded_run_changes_usage_from_its_earliest_difference(before, after, since):
    assert accounting.changed_since(before, after) == since


def test_an_end_recorded_as_it_happens_resets_no_closed_day(lab):
    team, user, p100, _ = lab
    workload = make(team, user, p100, 1, datetime(2026, 7, 1, 9, 0, tzinfo=UTC), None, state=State.RUNNING)
    with time_machine.travel(datetime(2026, 7, 20, 10, tzinfo=UTC)):
        assert rollup_pending() == 19
        transition(workload, State.SUCCEEDED, finished_at=datetime(2026, 7, 20, 9, 59, tzinfo=UTC))
        assert RolledUpDay.objects.filter(day__lt=date(2026, 7, 20)).count() == 19
        rows = usage_report_days(first_day=date(2026, 7, 1), last_day=date(2026, 7, 20))
    assert sum(r.gpu_hours for r in rows) == pytest.approx(19 * 24 - 9 + 9 + 59 / 60)


def test_a_start_learned_late_resets_the_days_since_it(lab):
    team, user, p100, _ = lab
    workload = make(team, user, p100, 2, None, None, state=State.SUBMITTING)
    with time_machine.travel(datetime(2026, 7, 20, 10, tzinfo=UTC)):
        rollup_pending(now=datetime(2026, 7, 20, 10, tzinfo=UTC))
        RolledUpDay.objects.bulk_create(RolledUpDay(day=date(2026, 7, d)) for d in range(15, 20))
        # The portal was down for two days: the tracker learns now that it started on the 18th at noon.
        transition(workload, State.RUNNING, started_at=datetime(2026, 7, 18, 12, tzinfo=UTC))
        assert sorted(RolledUpDay.objects.values_list("day", flat=True)) == [date(2026, 7, d) for d in (15, 16, 17)]
        rows = usage_report_days(first_day=date(2026, 7, 15), last_day=date(2026, 7, 19))
    assert [(r.day, r.gpu_hours) for r in rows] == [(date(2026, 7, 18), 24.0), (date(2026, 7, 19), 48.0)]
