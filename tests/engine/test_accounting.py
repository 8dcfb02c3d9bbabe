"""GPU-hours: exact at day, month and range boundaries; the roll-up agrees with the live computation."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine

from jobs.models import State, Workload
from jobs.services.accounting import (
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


def test_split_by_day_follows_the_local_calendar():
    tz = zoneinfo.ZoneInfo("Europe/Berlin")  # UTC+1 in winter
    parts = list(split_by_day(datetime(2026, 1, 1, 22, 30, tzinfo=UTC), datetime(2026, 1, 1, 23, 30, tzinfo=UTC), tz))
    assert parts == [(date(2026, 1, 1), 1800.0), (date(2026, 1, 2), 1800.0)]


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
        from jobs.services.transitions import transition

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
