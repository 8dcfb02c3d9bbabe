"""The per-workload series and summary, retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from telemetry.models import WorkloadGpuMinute
from telemetry.selectors import workload_gpu_series, workload_gpu_summary
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
