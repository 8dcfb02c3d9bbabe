"""Efficiency arithmetic (GPU-hours used vs held), the per-workload series and summary, retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.models import State
from telemetry.models import WorkloadGpuMinute
from telemetry.selectors import team_efficiency, workload_gpu_series, workload_gpu_summary
from telemetry.services.ingest import telemetry_prune
from tests.telemetry.conftest import running_workload

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 10, 0, tzinfo=UTC)


def minutes(workload, start: datetime, count: int, *, gpus: int, utilization: float) -> None:
    """`count` full minutes of samples (12 reports at a 5 s interval each) at a steady utilization."""
    WorkloadGpuMinute.objects.bulk_create(
        WorkloadGpuMinute(
            workload=workload,
            team_id=workload.team_id,
            minute=start + timedelta(minutes=i),
            reports=12,
            gpu_readings=12 * gpus,
            utilization_sum=12 * gpus * utilization,
            utilization_max=round(utilization),
            memory_used_bytes_max=gpus * 8 * 1024**3,
            memory_used_bytes_last=gpus * 8 * 1024**3,
            memory_total_bytes=gpus * 16 * 1024**3,
            busy_gpu_seconds=gpus * 60 * utilization / 100,
            observed_gpu_seconds=gpus * 60,
        )
        for i in range(count)
    )


@pytest.fixture
def two_workloads(people):
    # A: 2 GPUs, 10:00-12:00, half busy. B: 1 GPU from 11:00, still running at 13:00, fully busy.
    a = running_workload(
        people, name="a", gpus=2, started_at=T0, finished_at=T0 + timedelta(hours=2), state=State.SUCCEEDED
    )
    b = running_workload(people, name="b", gpus=1, started_at=T0 + timedelta(hours=1))
    minutes(a, T0, 120, gpus=2, utilization=50)
    minutes(b, T0 + timedelta(hours=1), 120, gpus=1, utilization=100)
    return a, b


def test_team_efficiency_is_used_over_held_gpu_hours(people, two_workloads):
    now = T0 + timedelta(hours=3)
    result = team_efficiency(people.team, T0, now, now=now)
    assert result.held_gpu_hours == pytest.approx(2 * 2 + 1 * 2)
    assert result.used_gpu_hours == pytest.approx(2 * 2 * 0.5 + 1 * 2 * 1.0)
    assert result.efficiency == pytest.approx(4 / 6)
    assert result.coverage == pytest.approx(1.0)
    assert result.to_dict()["efficiency"] == pytest.approx(0.6667)


def test_team_efficiency_is_exact_at_the_range_edges(people, two_workloads):
    now = T0 + timedelta(hours=3)
    result = team_efficiency(people.team, T0 + timedelta(hours=1), T0 + timedelta(hours=2), now=now)
    assert result.held_gpu_hours == pytest.approx(2 + 1)
    assert result.used_gpu_hours == pytest.approx(1 + 1)
    assert result.efficiency == pytest.approx(2 / 3)


def test_team_efficiency_without_held_time_or_for_another_team(people, two_workloads):
    from tests.engine.factories import TeamFactory

    now = T0 + timedelta(days=2)
    idle = team_efficiency(people.team, T0 - timedelta(days=1), T0, now=now)
    assert (idle.held_gpu_hours, idle.used_gpu_hours, idle.efficiency, idle.coverage) == (0, 0, None, None)
    other = team_efficiency(TeamFactory(slug="other"), T0, now, now=now)
    assert other.used_gpu_hours == 0


def test_missing_samples_lower_coverage_not_held_time(people):
    w = running_workload(
        people, name="w", gpus=4, started_at=T0, finished_at=T0 + timedelta(hours=1), state=State.SUCCEEDED
    )
    minutes(w, T0, 30, gpus=4, utilization=80)  # the agent saw only the first half hour
    result = team_efficiency(people.team, T0, T0 + timedelta(hours=1), now=T0 + timedelta(hours=2))
    assert result.held_gpu_hours == pytest.approx(4)
    assert result.used_gpu_hours == pytest.approx(4 * 0.5 * 0.8)
    assert result.coverage == pytest.approx(0.5)


def test_the_series_merges_long_spans_into_exact_averages(people):
    w = running_workload(people, name="long", gpus=1, started_at=T0)
    minutes(w, T0, 300, gpus=1, utilization=20)
    minutes(w, T0 + timedelta(minutes=300), 300, gpus=1, utilization=80)
    series = workload_gpu_series(w, since=T0, max_points=100)
    points = series["points"]
    assert len(points) == 100
    assert points[0]["utilization"] == 20
    assert points[-1]["utilization"] == 80
    assert points[0]["memory_percent"] == 50
    assert series["from"] == T0.isoformat()
    assert series["to"] == (T0 + timedelta(minutes=600)).isoformat()
    assert series["simulated"] is False


def test_the_summary_for_the_api(people):
    w = running_workload(people, name="s", gpus=2, started_at=T0)
    assert workload_gpu_summary(w)["samples"] == 0
    assert workload_gpu_summary(w)["utilization_percent_avg"] is None
    minutes(w, T0, 2, gpus=2, utilization=30)
    minutes(w, T0 + timedelta(minutes=2), 1, gpus=2, utilization=90)
    summary = workload_gpu_summary(w)
    assert summary["samples"] == 36
    assert summary["utilization_percent_avg"] == 50.0
    assert summary["utilization_percent_last"] == 90.0
    assert summary["memory_total_bytes"] == 2 * 16 * 1024**3
    assert summary["gpu_hours_busy"] == pytest.approx(round((2 * 60 * 0.3 * 2 + 2 * 60 * 0.9) / 3600, 4))
    assert summary["last_sample_at"] == (T0 + timedelta(minutes=3)).isoformat()


def test_prune_keeps_the_retention_window(people, settings):
    settings.TELEMETRY_RETENTION_DAYS = 7
    w = running_workload(people, name="old", gpus=1, started_at=T0)
    minutes(w, T0, 3, gpus=1, utilization=10)
    minutes(w, T0 + timedelta(days=8), 2, gpus=1, utilization=10)
    assert telemetry_prune(now=T0 + timedelta(days=8, hours=1)) == 3
    assert WorkloadGpuMinute.objects.count() == 2
