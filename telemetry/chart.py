"""The per-workload GPU chart as inline SVG geometry: no JavaScript, no chart library, readable without
either (the numbers are in the partial's table too)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from jobs.models import State, Workload
from telemetry.selectors import workload_gpu_series

WIDTH, HEIGHT = 600, 120


@dataclass(frozen=True)
class GpuChart:
    workload_uid: str
    series: dict[str, Any]
    utilization_points: str  # SVG polyline "x,y x,y ..."
    memory_points: str
    last: dict[str, Any] | None
    ran_seconds: float | None  # how long the workload has run (or ran): its real span, not the samples'
    state: str

    @property
    def empty(self) -> bool:
        return not self.series["points"]

    @property
    def span(self) -> str:
        """ "2026-03-02 10:00 - 12:00 UTC" (the date again only when the span crosses midnight)."""
        start, end = self.series["from"], self.series["to"]
        if not start or not end:
            return ""
        same_day = start[:10] == end[:10]
        return f"{start[:10]} {start[11:16]} – {end[11:16] if same_day else end[:10] + ' ' + end[11:16]} UTC"

    @property
    def simulated(self) -> bool:
        return bool(self.series["simulated"])

    @property
    def no_samples_reason(self) -> str:
        """Why the chart is empty, true for the workload's state."""
        if self.ran_seconds is None:
            if self.state in State.final():
                return "It ended before it started, so it never used a GPU."
            return "It has not started yet; its GPU use shows here once it runs."
        if self.state in State.final():
            return "No GPU samples were recorded while it ran: its node's agent did not report."
        return "No GPU samples yet: they appear within a minute or two once its node's agent reports."


def _polyline(values: list[float | None]) -> str:
    if not values:
        return ""
    step = WIDTH / max(1, len(values) - 1)
    coords = []
    for i, value in enumerate(values):
        if value is None:
            continue
        y = HEIGHT - max(0.0, min(100.0, value)) / 100 * HEIGHT
        coords.append(f"{i * step:.1f},{y:.1f}")
    if len(coords) == 1:  # one minute of data: draw a short flat line so it shows
        x, y = coords[0].split(",")
        coords.append(f"{float(x) + 4:.1f},{y}")
    return " ".join(coords)


def workload_gpu_chart(workload: Workload) -> GpuChart:
    series = workload_gpu_series(workload)
    points = series["points"]
    return GpuChart(
        workload_uid=workload.uid,
        series=series,
        utilization_points=_polyline([p["utilization"] for p in points]),
        memory_points=_polyline([p["memory_percent"] for p in points]),
        last=points[-1] if points else None,
        ran_seconds=_ran_seconds(workload),
        state=workload.state,
    )


def _ran_seconds(workload: Workload) -> float | None:
    if workload.started_at is None:
        return None
    end = workload.finished_at or timezone.now()
    return max(0.0, (end - workload.started_at).total_seconds())
