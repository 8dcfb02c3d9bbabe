"""Storing one agent report: the node's latest GPU states, its CUDA driver version, each attributed
workload's minute of GPU use, and the use of the workspaces whose volumes the node mounts.

One report is one transaction that locks its node's row, so two deliveries of the same report (an agent
that retried after a timeout) cannot both be counted: a report no newer than the node's last one is
acknowledged and ignored.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from agent.report import GpuReading, Report
from jobs.models import GangRank, GpuNode, State, Workload, Workspace
from jobs.services.dispatch import request_workspace_volumes
from telemetry.models import GpuState, TelemetryNode, WorkloadGpuMinute

log = logging.getLogger(__name__)

# A report's interval weighs its readings in GPU-seconds; an agent configured (or buggy) with a huge
# interval must not turn one reading into hours of use.
MAX_INTERVAL_SECONDS = 300.0
# Pods whose processes count: a service pod being re-created shows PENDING briefly while its old
# processes may still be reported.
ATTRIBUTABLE_STATES = (State.SUBMITTING, State.PENDING, State.RUNNING)


class ReportRejected(ValueError):
    """A valid report the portal will not store; the message names the field."""


@dataclass
class IngestResult:
    node: str
    stored: bool
    gpus: int = 0
    workloads: list[str] = field(default_factory=list)
    workspaces: int = 0  # workspaces whose use this report updated


@dataclass
class _WorkloadShare:
    """What one report says about one workload's GPUs."""

    gpus: set[object] = field(default_factory=set)  # GPU indexes, and (GPU, slice) for MIG devices
    utilization: list[int] = field(default_factory=list)
    memory_used: int = 0
    memory_total: int = 0


def _check_bounds(report: Report, received_at: datetime) -> None:
    """ReportRejected, naming the field, for a report larger than the portal takes or from the future."""
    if len(report.gpus) > settings.TELEMETRY_MAX_GPUS_PER_REPORT:
        raise ReportRejected(f"gpus: a node reports at most {settings.TELEMETRY_MAX_GPUS_PER_REPORT} GPUs")
    for gpu in report.gpus:
        if len(gpu.processes) > settings.TELEMETRY_MAX_PROCESSES_PER_GPU:
            raise ReportRejected(
                f"gpus[{gpu.index}].processes: at most {settings.TELEMETRY_MAX_PROCESSES_PER_GPU} per GPU"
            )
    skew = timedelta(seconds=settings.TELEMETRY_MAX_CLOCK_SKEW_SECONDS)
    if report.timestamp > received_at + skew:
        raise ReportRejected(
            f"timestamp: {report.timestamp.isoformat()} is more than {skew.total_seconds():.0f} s ahead of the "
            "portal's clock; check the node's time"
        )


def report_ingest(*, report: Report, received_at: datetime | None = None) -> IngestResult:
    received_at = received_at or timezone.now()
    _check_bounds(report, received_at)
    with transaction.atomic():
        node = _lock_node(report, received_at)
        if node.reports_total and report.timestamp <= node.last_report_at:
            # A retry of a report already stored, or one older than what we have: acknowledged, not counted.
            return IngestResult(node=node.name, stored=False)
        node.simulated = report.simulated
        node.agent_version = report.agent_version[:40]
        node.driver_version = (report.driver_version or "")[:40]
        node.cuda_driver_version = report.cuda_driver_version or ""
        node.interval_seconds = report.interval_seconds
        node.last_report_at = report.timestamp
        node.received_at = received_at
        node.reports_total += 1
        node.save()
        _store_gpu_states(node, report)
        if report.cuda_driver_version:
            # Feeds the CUDA-fit check at submit (jobs.services.submission.intake.gather_facts).
            GpuNode.objects.filter(name=report.node).exclude(cuda_driver_version=report.cuda_driver_version).update(
                cuda_driver_version=report.cuda_driver_version
            )
        workloads = _store_workload_minutes(report)
        workspaces = _store_volume_use(report) if report.volumes else 0
    return IngestResult(node=node.name, stored=True, gpus=len(report.gpus), workloads=workloads, workspaces=workspaces)


def _lock_node(report: Report, received_at: datetime) -> TelemetryNode:
    node = TelemetryNode.objects.select_for_update().filter(name=report.node).first()
    if node is not None:
        return node
    try:
        with transaction.atomic():
            TelemetryNode.objects.create(name=report.node, last_report_at=report.timestamp, received_at=received_at)
    except IntegrityError:
        pass  # the node's first two reports raced; the other one created it
    return TelemetryNode.objects.select_for_update().get(name=report.node)


def _gpu_fields(gpu: GpuReading, sampled_at: datetime) -> dict[str, object]:
    return {
        "uuid": (gpu.uuid or "")[:80],
        "model": (gpu.name or "")[:100],
        "state": gpu.state,
        "utilization_gpu_percent": gpu.utilization_gpu_percent,
        "utilization_memory_percent": gpu.utilization_memory_percent,
        "memory_used_bytes": gpu.memory_used_bytes,
        "memory_total_bytes": gpu.memory_total_bytes,
        "temperature_celsius": gpu.temperature_celsius,
        "power_draw_watts": gpu.power_draw_watts,
        "power_limit_watts": gpu.power_limit_watts,
        "sm_clock_mhz": gpu.sm_clock_mhz,
        "ecc_uncorrected_volatile": gpu.ecc_uncorrected_volatile,
        "xid_errors": gpu.xid_errors,
        "last_xid": gpu.last_xid,
        "errors": list(gpu.errors)[:20],
        "pod_uids": gpu.pod_uids,
        "mig_devices": [
            {
                "index": mig.index,
                "uuid": (mig.uuid or "")[:80],
                "gpu_instance_id": mig.gpu_instance_id,
                "memory_used_bytes": mig.memory_used_bytes,
                "memory_total_bytes": mig.memory_total_bytes,
                "utilization_gpu_percent": mig.utilization_gpu_percent,
                "pod_uids": mig.pod_uids,
            }
            for mig in gpu.mig_devices[:16]
        ],
        "sampled_at": sampled_at,
    }


def _store_gpu_states(node: TelemetryNode, report: Report) -> None:
    # Replace the node's rows wholesale: two statements, where updating 8 rows x 17 columns with
    # bulk_update's CASE expressions costs far more in Python than the database spends on it. GPUs the
    # agent no longer lists at all go with it (a lost GPU is still listed, as "lost").
    GpuState.objects.filter(node=node).delete()
    GpuState.objects.bulk_create(
        GpuState(node=node, index=gpu.index, **_gpu_fields(gpu, report.timestamp)) for gpu in report.gpus
    )


def _add_readings(
    shares: dict[str, _WorkloadShare], key: object, utilization: int, memory_total: int | None, processes: tuple
) -> None:
    for process in processes:
        if not process.pod_uid:
            continue
        share = shares[process.pod_uid]
        if key not in share.gpus:
            share.gpus.add(key)
            share.utilization.append(utilization)
            share.memory_total += memory_total or 0
        share.memory_used += process.used_memory_bytes or 0


def _shares_by_pod(report: Report) -> dict[str, _WorkloadShare]:
    """Each pod's readings of the report's healthy GPUs and MIG slices (pods without one left out)."""
    shares: dict[str, _WorkloadShare] = defaultdict(_WorkloadShare)
    for gpu in report.gpus:
        if gpu.state != "ok":
            continue
        _add_readings(shares, gpu.index, gpu.utilization_gpu_percent or 0, gpu.memory_total_bytes, gpu.processes)
        # A MIG slice is its holder's GPU (issue 40). Where the driver cannot say a slice's utilisation, the
        # slice gives no reading: missing telemetry is not idleness (telemetry/services/idle.py).
        for mig in gpu.mig_devices:
            if mig.utilization_gpu_percent is not None:
                _add_readings(
                    shares, (gpu.index, mig.index), mig.utilization_gpu_percent, mig.memory_total_bytes, mig.processes
                )
    return {uid: share for uid, share in shares.items() if share.utilization}


def _minute_row(workload: Workload, share: _WorkloadShare, report: Report, minute, interval: float) -> tuple:
    """One workload's row of `_upsert_minutes` for this report."""
    utilization_sum = float(sum(share.utilization))
    return (
        workload.id,
        workload.team_id,
        minute,
        report.node,
        report.simulated,
        1,
        len(share.utilization),
        utilization_sum,
        max(share.utilization),
        share.memory_used,
        share.memory_used,
        share.memory_total,
        utilization_sum / 100 * interval,
        len(share.utilization) * interval,
    )


def _store_workload_minutes(report: Report) -> list[str]:
    shares = _shares_by_pod(report)
    if not shares:
        return []
    # A process counts for a workload only when the workload runs on the reporting node: a node's agent
    # (or its token) must not be able to make another node's workload look busy or idle.
    by_pod = {
        w.pod_uid: w
        for w in Workload.objects.filter(
            pod_uid__in=list(shares), state__in=ATTRIBUTABLE_STATES, node_name=report.node
        ).only("id", "team_id", "uid", "pod_uid")
    }
    by_pod.update(gang_ranks_on(report.node, [uid for uid in shares if uid not in by_pod]))
    workloads = list(by_pod.values())
    interval = min(report.interval_seconds, MAX_INTERVAL_SECONDS)
    minute = report.timestamp.replace(second=0, microsecond=0)
    rows = [_minute_row(workload, shares[pod_uid], report, minute, interval) for pod_uid, workload in by_pod.items()]
    _upsert_minutes(rows)
    return sorted(w.uid for w in workloads)


def gang_ranks_on(node: str, pod_uids: list[str]) -> dict[str, Workload]:
    """The gang jobs whose other ranks (rank 0 is the workload's own pod) run these pods on this node: their
    GPU use adds to the gang's minutes, as its GPU-hours sum over ranks."""
    if not pod_uids:
        return {}
    ranks = GangRank.objects.filter(
        pod_uid__in=pod_uids, node_name=node, workload__state__in=ATTRIBUTABLE_STATES
    ).select_related("workload")
    return {rank.pod_uid: rank.workload for rank in ranks if rank.attempt == rank.workload.attempt}


def mounted_claims(node: str) -> set[tuple[str, str]]:
    """(namespace, claim) of every workspace that a workload on this node mounts now."""
    mounted: set[tuple[str, str]] = set()
    rows = Workload.objects.filter(node_name=node, state__in=ATTRIBUTABLE_STATES).values_list("namespace", "mounts")
    for namespace, mounts in rows:
        for mount in mounts or []:
            if mount.get("kind") in ("home", "team") and mount.get("claim"):
                mounted.add((namespace, mount["claim"]))
    return mounted


def _store_volume_use(report: Report) -> int:
    """Store each reported volume's use on its workspace; returns how many workspaces it updated.

    As with GPU processes, a node speaks only for what it mounts: a volume's reading counts when a
    workload on the reporting node mounts that workspace. A reading older than the stored one (another
    node mounting the same shared volume reported later) is ignored."""
    by_name = {volume.name: volume for volume in report.volumes}
    workspaces = list(
        Workspace.objects.filter(volume_name__in=list(by_name)).values_list(
            "id", "namespace", "claim_name", "volume_name"
        )
    )
    if len(workspaces) < len(by_name) and Workspace.objects.filter(volume_name="").exists():
        # A volume the portal cannot place yet, and claims whose volume it has not learned: ask the engine.
        request_workspace_volumes()
    if not workspaces:
        return 0
    mounted = mounted_claims(report.node)
    updated = 0
    for workspace_id, namespace, claim_name, volume_name in workspaces:
        if (namespace, claim_name) not in mounted:
            continue
        volume = by_name[volume_name]
        updated += (
            Workspace.objects.filter(id=workspace_id)
            .filter(Q(used_measured_at__isnull=True) | Q(used_measured_at__lt=report.timestamp))
            .update(
                used_bytes=volume.used_bytes,
                capacity_bytes=volume.capacity_bytes,
                used_measured_at=report.timestamp,
                used_measured_on=report.node,
            )
        )
    return updated


_MINUTE_COLUMNS = (
    "workload_id", "team_id", "minute", "node_name", "simulated", "reports", "gpu_readings", "utilization_sum",
    "utilization_max", "memory_used_bytes_max", "memory_used_bytes_last", "memory_total_bytes",
    "busy_gpu_seconds", "observed_gpu_seconds",
)  # fmt: skip
_SUMMED = ("reports", "gpu_readings", "utilization_sum", "busy_gpu_seconds", "observed_gpu_seconds")
_LARGEST = ("utilization_max", "memory_used_bytes_max", "memory_total_bytes")
_LATEST = ("node_name", "simulated", "memory_used_bytes_last")


def _upsert_minutes(rows: list[tuple[object, ...]]) -> None:
    """Add a report's shares to their workloads' minute rows in one statement (PostgreSQL or SQLite):
    sums add up, maxima keep the larger, the rest take the newest value."""
    if not rows:
        return
    table = connection.ops.quote_name(WorkloadGpuMinute._meta.db_table)
    greatest = "GREATEST" if connection.vendor == "postgresql" else "MAX"
    columns = ", ".join(_MINUTE_COLUMNS)
    placeholders = ", ".join(["(" + ", ".join(["%s"] * len(_MINUTE_COLUMNS)) + ")"] * len(rows))
    updates = [f"{c} = {table}.{c} + EXCLUDED.{c}" for c in _SUMMED]
    updates += [f"{c} = {greatest}({table}.{c}, EXCLUDED.{c})" for c in _LARGEST]
    updates += [f"{c} = EXCLUDED.{c}" for c in _LATEST]
    sql = (
        f"INSERT INTO {table} ({columns}) VALUES {placeholders} "  # noqa: S608 - identifiers are ours, values are parameters
        f"ON CONFLICT (workload_id, minute) DO UPDATE SET {', '.join(updates)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for row in rows for value in row])


def telemetry_prune(*, now: datetime | None = None) -> int:
    """Delete per-workload minutes older than the retention; returns how many rows went."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.TELEMETRY_RETENTION_DAYS)
    deleted, _ = WorkloadGpuMinute.objects.filter(minute__lt=cutoff).delete()
    return deleted
