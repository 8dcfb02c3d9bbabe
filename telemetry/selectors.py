"""Reads of GPU telemetry for pages, the REST API and the usage report; each is a fixed number of queries.

Public entry points for other apps:
    workload_gpu_series(workload)          points for the per-workload chart (templates/telemetry/_workload_gpu.html)
    workload_gpu_summary(workload)         a small JSON-ready dict for the API's workload representation
    nodes_overview(user)                   the nodes page
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Max, Sum
from django.utils import timezone

from jobs.models import GpuNode, GpuType, Workload
from jobs.selectors import workloads_visible_to
from telemetry.models import GpuState, TelemetryNode, WorkloadGpuMinute

HOT_CELSIUS = 85
BUSY_PERCENT = 10

# Health of one GPU: (key, label). Keys double as CSS classes on the nodes page.
HEALTH_LABELS = {
    "lost": "Lost",
    "error": "Errors",
    "stale": "No recent report",
    "hot": "Hot",
    "busy": "Busy",
    "idle": "Idle",
}


def _has_errors(gpu: GpuState) -> bool:
    """Uncorrected ECC errors, XID errors, or an error the agent reported."""
    return (gpu.ecc_uncorrected_volatile or 0) > 0 or (gpu.xid_errors or 0) > 0 or bool(gpu.errors)


def gpu_health(gpu: GpuState, *, stale: bool) -> str:
    if gpu.lost:
        return "lost"
    if stale:
        return "stale"
    if _has_errors(gpu):
        return "error"
    if gpu.temperature_celsius is not None and gpu.temperature_celsius >= HOT_CELSIUS:
        return "hot"
    if (gpu.utilization_gpu_percent or 0) >= BUSY_PERCENT or gpu.pod_uids:
        return "busy"
    return "idle"


# --- the nodes page --------------------------------------------------------------------------------


@dataclass
class SliceRow:
    """One MIG device of a GPU, as its agent last saw it, and who holds it."""

    index: int
    gpu_instance_id: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    utilization_gpu_percent: int | None
    workloads: list[str]


@dataclass
class GpuRow:
    state: GpuState
    health: str
    workloads: list[str]  # what the viewer may know about the pods on it
    slices: list[SliceRow] = field(default_factory=list)  # its MIG devices, when MIG is on

    @property
    def health_label(self) -> str:
        return HEALTH_LABELS[self.health]


@dataclass
class NodeRow:
    name: str
    inventory: GpuNode | None
    telemetry: TelemetryNode | None
    stale: bool = False
    gpus: list[GpuRow] = field(default_factory=list)

    @property
    def gpu_type(self) -> GpuType | None:
        return self.inventory.gpu_type if self.inventory else None

    @property
    def health(self) -> str:
        if self.telemetry is None:
            return "unreported"
        if self.stale:
            return "stale"
        worst = {g.health for g in self.gpus}
        for key in ("lost", "error", "hot"):
            if key in worst:
                return key
        return "ok"

    @property
    def health_label(self) -> str:
        return {"unreported": "No agent", "ok": "Healthy"}.get(self.health) or HEALTH_LABELS[self.health]


def _who_runs(user, pod_uids: set[str]) -> tuple[dict[str, str], set[str]]:
    """The pods of `pod_uids` that are workloads `user` may see (pod uid -> "name (uid)"), and those that are
    other teams' workloads."""
    visible: dict[str, str] = {}
    others: set[str] = set()
    if not pod_uids:
        return visible, others
    mine = set(workloads_visible_to(user).filter(pod_uid__in=pod_uids).values_list("id", flat=True))
    for workload in Workload.objects.filter(pod_uid__in=pod_uids).only("id", "uid", "name", "pod_uid", "team_id"):
        if workload.id in mine or user.is_staff:
            visible[workload.pod_uid] = f"{workload.name} ({workload.uid})"
        else:
            others.add(workload.pod_uid)
    return visible, others


def _gpu_row(gpu: GpuState, *, stale: bool, visible: dict[str, str], others: set[str]) -> GpuRow:
    def labels(uids: list[str]) -> list[str]:
        return [
            visible.get(uid) or ("another team's workload" if uid in others else "a pod outside the portal")
            for uid in uids
        ]

    slices = [
        SliceRow(
            index=mig.get("index", 0),
            gpu_instance_id=mig.get("gpu_instance_id"),
            memory_used_bytes=mig.get("memory_used_bytes"),
            memory_total_bytes=mig.get("memory_total_bytes"),
            utilization_gpu_percent=mig.get("utilization_gpu_percent"),
            workloads=labels(mig.get("pod_uids") or []),
        )
        for mig in gpu.mig_devices or []
    ]
    return GpuRow(state=gpu, health=gpu_health(gpu, stale=stale), workloads=labels(gpu.pod_uids), slices=slices)


def nodes_overview(user, *, now: datetime | None = None) -> list[NodeRow]:
    """Every GPU node the inventory or an agent knows, with its GPUs' latest readings (4 queries)."""
    now = now or timezone.now()
    inventory = {n.name: n for n in GpuNode.objects.select_related("gpu_type")}
    reported = {n.name: n for n in TelemetryNode.objects.prefetch_related("gpus")}
    pod_uids = {uid for node in reported.values() for gpu in node.gpus.all() for uid in gpu.pod_uids}
    visible, others = _who_runs(user, pod_uids)
    rows = []
    for name in sorted(set(inventory) | set(reported)):
        telemetry = reported.get(name)
        row = NodeRow(name=name, inventory=inventory.get(name), telemetry=telemetry)
        if telemetry is not None:
            row.stale = telemetry.is_stale(now)
            row.gpus = [_gpu_row(gpu, stale=row.stale, visible=visible, others=others) for gpu in telemetry.gpus.all()]
        rows.append(row)
    return rows


# --- per workload --------------------------------------------------------------------------------


def _series_point(chunk: list[tuple]) -> dict[str, Any]:
    """One point of the series: the exact average (and maxima) of the minutes of `chunk`."""
    readings = sum(m[1] for m in chunk)
    memory = max(m[4] for m in chunk)
    total = max(m[5] for m in chunk)
    return {
        "t": chunk[0][0].isoformat(),
        "utilization": round(sum(m[2] for m in chunk) / readings, 1) if readings else None,
        "utilization_max": max(m[3] for m in chunk),
        "memory_used_bytes": memory,
        "memory_percent": round(100 * memory / total, 1) if total else None,
    }


def workload_gpu_series(workload: Workload, *, since: datetime | None = None, max_points: int = 240) -> dict[str, Any]:
    """The workload's GPU utilization and memory per minute, JSON-ready:

    {"points": [{"t": iso, "utilization": avg %, "utilization_max": %, "memory_used_bytes": max,
                 "memory_percent": % of its GPUs' memory}], "simulated": bool,
     "memory_total_bytes": int, "from": iso | None, "to": iso | None}

    Covers the last 24 hours of the workload (or from `since`); longer spans are merged into at most
    `max_points` points, each the exact average of the minutes it covers.
    """
    rows = WorkloadGpuMinute.objects.filter(workload_id=workload.id).order_by("minute")
    last = rows.aggregate(last=Max("minute"))["last"]
    if last is None:
        return {"points": [], "simulated": False, "memory_total_bytes": 0, "from": None, "to": None}
    since = since or (last - timedelta(hours=24))
    minutes = list(
        rows.filter(minute__gte=since).values_list(
            "minute",
            "gpu_readings",
            "utilization_sum",
            "utilization_max",
            "memory_used_bytes_max",
            "memory_total_bytes",
            "simulated",
        )
    )
    step = max(1, -(-len(minutes) // max_points))
    points = []
    memory_total = max((m[5] for m in minutes), default=0)
    for start in range(0, len(minutes), step):
        points.append(_series_point(minutes[start : start + step]))
    return {
        "points": points,
        "simulated": any(m[6] for m in minutes),
        "memory_total_bytes": memory_total,
        "from": minutes[0][0].isoformat() if minutes else None,
        "to": (minutes[-1][0] + timedelta(minutes=1)).isoformat() if minutes else None,
    }


def workload_gpu_summary(workload: Workload) -> dict[str, Any]:
    """Per-workload GPU use for the API (2 queries):

    {"samples": reports counted, "utilization_percent_avg": over its whole life or None,
     "utilization_percent_last": the last minute's average or None, "memory_used_bytes_max": int | None,
     "memory_used_bytes_last": int | None, "memory_total_bytes": int | None,
     "gpu_hours_busy": utilization-weighted GPU-hours, "gpu_hours_observed": GPU-hours with samples,
     "last_sample_at": iso | None, "simulated": bool}
    """
    rows = WorkloadGpuMinute.objects.filter(workload_id=workload.id)
    totals = rows.aggregate(
        reports=Sum("reports"),
        readings=Sum("gpu_readings"),
        utilization=Sum("utilization_sum"),
        memory_max=Max("memory_used_bytes_max"),
        busy=Sum("busy_gpu_seconds"),
        observed=Sum("observed_gpu_seconds"),
    )
    last = rows.order_by("-minute").first()
    if last is None:
        return {
            "samples": 0,
            "utilization_percent_avg": None,
            "utilization_percent_last": None,
            "memory_used_bytes_max": None,
            "memory_used_bytes_last": None,
            "memory_total_bytes": None,
            "gpu_hours_busy": 0.0,
            "gpu_hours_observed": 0.0,
            "last_sample_at": None,
            "simulated": False,
        }
    readings = totals["readings"] or 0
    return {
        "samples": totals["reports"] or 0,
        "utilization_percent_avg": round(totals["utilization"] / readings, 1) if readings else None,
        "utilization_percent_last": round(last.utilization_avg, 1) if last.utilization_avg is not None else None,
        "memory_used_bytes_max": totals["memory_max"],
        "memory_used_bytes_last": last.memory_used_bytes_last,
        "memory_total_bytes": last.memory_total_bytes,
        "gpu_hours_busy": round((totals["busy"] or 0) / 3600, 4),
        "gpu_hours_observed": round((totals["observed"] or 0) / 3600, 4),
        "last_sample_at": (last.minute + timedelta(minutes=1)).isoformat(),
        "simulated": last.simulated,
    }
