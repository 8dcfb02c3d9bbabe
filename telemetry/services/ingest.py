"""Storing one agent report: the node's latest GPU states, its CUDA driver version, and each attributed
workload's minute of GPU use.

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
from django.db import IntegrityError, transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from agent.report import GpuReading, Report
from jobs.models import GpuNode, State, Workload
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


@dataclass
class _WorkloadShare:
    """What one report says about one workload's GPUs."""

    gpus: set[int] = field(default_factory=set)
    utilization: list[int] = field(default_factory=list)
    memory_used: int = 0
    memory_total: int = 0


def report_ingest(*, report: Report, received_at: datetime | None = None) -> IngestResult:
    received_at = received_at or timezone.now()
    skew = timedelta(seconds=settings.TELEMETRY_MAX_CLOCK_SKEW_SECONDS)
    if report.timestamp > received_at + skew:
        raise ReportRejected(
            f"timestamp: {report.timestamp.isoformat()} is more than {skew.total_seconds():.0f} s ahead of the "
            "portal's clock; check the node's time"
        )
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
            # Feeds the CUDA-fit check at submit (jobs.services.submit.gather_facts).
            GpuNode.objects.filter(name=report.node).exclude(cuda_driver_version=report.cuda_driver_version).update(
                cuda_driver_version=report.cuda_driver_version
            )
        workloads = _store_workload_minutes(report)
    return IngestResult(node=node.name, stored=True, gpus=len(report.gpus), workloads=workloads)


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
        "sampled_at": sampled_at,
    }


def _store_gpu_states(node: TelemetryNode, report: Report) -> None:
    existing = {row.index: row for row in GpuState.objects.filter(node=node)}
    changed, created = [], []
    for gpu in report.gpus:
        values = _gpu_fields(gpu, report.timestamp)
        row = existing.pop(gpu.index, None)
        if row is None:
            created.append(GpuState(node=node, index=gpu.index, **values))
        else:
            for key, value in values.items():
                setattr(row, key, value)
            changed.append(row)
    if changed:
        GpuState.objects.bulk_update(changed, list(_gpu_fields(report.gpus[0], report.timestamp)))
    if created:
        GpuState.objects.bulk_create(created)
    if existing:
        # GPUs the agent no longer lists at all (a lost GPU is still listed, as "lost").
        GpuState.objects.filter(id__in=[row.id for row in existing.values()]).delete()


def _store_workload_minutes(report: Report) -> list[str]:
    shares: dict[str, _WorkloadShare] = defaultdict(_WorkloadShare)
    for gpu in report.gpus:
        if gpu.state != "ok":
            continue
        for process in gpu.processes:
            if not process.pod_uid:
                continue
            share = shares[process.pod_uid]
            if gpu.index not in share.gpus:
                share.gpus.add(gpu.index)
                share.utilization.append(gpu.utilization_gpu_percent or 0)
                share.memory_total += gpu.memory_total_bytes or 0
            share.memory_used += process.used_memory_bytes or 0
    if not shares:
        return []
    workloads = list(
        Workload.objects.filter(pod_uid__in=list(shares), state__in=ATTRIBUTABLE_STATES).only(
            "id", "team_id", "uid", "pod_uid"
        )
    )
    interval = min(report.interval_seconds, MAX_INTERVAL_SECONDS)
    minute = report.timestamp.replace(second=0, microsecond=0)
    for workload in workloads:
        share = shares[workload.pod_uid]
        readings = len(share.utilization)
        utilization_sum = float(sum(share.utilization))
        busy = utilization_sum / 100 * interval
        observed = readings * interval
        updated = WorkloadGpuMinute.objects.filter(workload_id=workload.id, minute=minute).update(
            node_name=report.node,
            simulated=report.simulated,
            reports=F("reports") + 1,
            gpu_readings=F("gpu_readings") + readings,
            utilization_sum=F("utilization_sum") + utilization_sum,
            utilization_max=Greatest(F("utilization_max"), max(share.utilization)),
            memory_used_bytes_max=Greatest(F("memory_used_bytes_max"), share.memory_used),
            memory_used_bytes_last=share.memory_used,
            memory_total_bytes=Greatest(F("memory_total_bytes"), share.memory_total),
            busy_gpu_seconds=F("busy_gpu_seconds") + busy,
            observed_gpu_seconds=F("observed_gpu_seconds") + observed,
        )
        if not updated:
            # A workload's pod runs on one node, whose row this transaction holds locked: no one else
            # creates this minute concurrently.
            WorkloadGpuMinute.objects.create(
                workload_id=workload.id,
                team_id=workload.team_id,
                minute=minute,
                node_name=report.node,
                simulated=report.simulated,
                reports=1,
                gpu_readings=readings,
                utilization_sum=utilization_sum,
                utilization_max=max(share.utilization),
                memory_used_bytes_max=share.memory_used,
                memory_used_bytes_last=share.memory_used,
                memory_total_bytes=share.memory_total,
                busy_gpu_seconds=busy,
                observed_gpu_seconds=observed,
            )
    return sorted(w.uid for w in workloads)


def telemetry_prune(*, now: datetime | None = None) -> int:
    """Delete per-workload minutes older than the retention; returns how many rows went."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.TELEMETRY_RETENTION_DAYS)
    deleted, _ = WorkloadGpuMinute.objects.filter(minute__lt=cutoff).delete()
    return deleted
