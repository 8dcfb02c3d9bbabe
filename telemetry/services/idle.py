"""Idle services: warn the owner of a service whose GPUs sit unused, then (if the team's policy says so)
stop it. Every step is a timeline entry on the workload; the owner is told through notifications.

A minute counts as busy when its average GPU utilization reached the policy's threshold. A service is
idle since the end of its last busy minute (or since it started) and, when the team's policy counts
activity through the portal (browser_activity_counts, the default), not before its last use through the
portal's proxy: a notebook with an open, active tab and an idle GPU is in use; so is a service someone holds
an SSH session (or the browser's Terminal) open to, since the proxy records an open tunnel as activity on
every recheck (proxy/ssh_tunnel.py, SSH_RECHECK_SECONDS) into the same `last_activity_at`; one nobody has
touched for hours is not. Missing telemetry is not idleness: a
warning needs samples for at least half of the idle period, so an agent that is down never gets a
service stopped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import F, Max, Min, Q
from django.utils import timezone

from jobs.models import Kind, State, Workload, WorkloadEvent
from jobs.services.dispatch import enqueue_delete
from jobs.services.transitions import note, transition
from notifications.events import IDLE_WARNING, notify
from telemetry.models import IdlePolicy, IdleWarning, WorkloadGpuMinute

log = logging.getLogger(__name__)

MIN_COVERAGE = 0.5
WARNED, CLEARED, STOPPED = "IdleWarning", "IdleCleared", "IdleStopped"


@dataclass(frozen=True)
class IdleFacts:
    idle_since: datetime | None  # None: busy now, or not enough telemetry to tell
    minutes_sampled: int


def idle_facts(workload: Workload, *, threshold_percent: int, window: timedelta, now: datetime) -> IdleFacts:
    """Since when the workload's GPUs have been below the threshold, judged over the last `window`."""
    since = max(workload.started_at, now - window) if workload.started_at else now - window
    # Only readings from the node the service runs on: never stop it on another node's say-so.
    rows = WorkloadGpuMinute.objects.filter(
        workload_id=workload.id, node_name=workload.node_name, minute__gte=since - timedelta(minutes=1)
    )
    busy = Q(utilization_sum__gte=F("gpu_readings") * threshold_percent)
    facts = rows.aggregate(last_busy=Max("minute", filter=busy), first=Min("minute"))
    if facts["first"] is None:
        return IdleFacts(idle_since=None, minutes_sampled=0)
    idle_since = since
    if facts["last_busy"] is not None:
        idle_since = max(since, facts["last_busy"] + timedelta(minutes=1))
    idle_minutes = (now - idle_since).total_seconds() / 60
    sampled = rows.filter(minute__gte=idle_since).count()
    if idle_minutes <= 0 or sampled < MIN_COVERAGE * idle_minutes:
        return IdleFacts(idle_since=None, minutes_sampled=sampled)
    return IdleFacts(idle_since=idle_since, minutes_sampled=sampled)


def with_browser_activity(facts: IdleFacts, last_activity_at: datetime | None) -> IdleFacts:
    """Idle only since the later of the GPUs' last busy minute and the last use through the proxy (a request,
    a WebSocket message, or an SSH or Terminal session still open)."""
    if facts.idle_since is None or last_activity_at is None or last_activity_at <= facts.idle_since:
        return facts
    return IdleFacts(idle_since=last_activity_at, minutes_sampled=facts.minutes_sampled)


def idle_check(*, now: datetime | None = None) -> dict[str, int]:
    """One pass over running services of teams with an enabled policy; returns what it did."""
    now = now or timezone.now()
    done = {"checked": 0, "warned": 0, "cleared": 0, "stopped": 0}
    policies = {p.team_id: p for p in IdlePolicy.objects.filter(enabled=True)}
    if not policies:
        return done
    services = (
        Workload.objects.filter(team_id__in=list(policies), kind=Kind.SERVICE, state=State.RUNNING, gpu_count__gt=0)
        .select_related("owner", "team")
        .order_by("id")
    )
    warnings = {w.workload_id: w for w in IdleWarning.objects.filter(workload__in=services)}
    for workload in services:
        done["checked"] += 1
        policy = policies[workload.team_id]
        outcome = _check_one(workload, policy, warnings.get(workload.id), now)
        if outcome:
            done[outcome] += 1
    # Warnings of services that ended some other way have nothing left to do.
    IdleWarning.objects.exclude(workload__state=State.RUNNING).delete()
    return done


def _check_one(workload: Workload, policy: IdlePolicy, warning: IdleWarning | None, now: datetime) -> str | None:
    window = policy.warn_after + (policy.stop_after or timedelta(0)) + timedelta(hours=1)
    if warning is not None:
        # Judge an open warning over its whole idle period, however long the owner has let it run.
        window = max(window, now - warning.idle_since + timedelta(minutes=1))
    facts = idle_facts(workload, threshold_percent=policy.threshold_percent, window=window, now=now)
    if policy.browser_activity_counts:
        facts = with_browser_activity(facts, workload.last_activity_at)
    if warning is not None:
        if facts.idle_since is None or facts.idle_since > warning.warned_at:
            # Used again since the warning (or telemetry stopped): withdraw it.
            note(
                workload,
                reason=CLEARED,
                message=f"In use again (GPU utilization at or above {warning.threshold_percent} %, or opened in a "
                "browser or over SSH through the portal); the idle warning is withdrawn.",
                source=WorkloadEvent.Source.PORTAL,
            )
            warning.delete()
            return "cleared"
        if warning.stop_at is not None and now >= warning.stop_at:
            return "stopped" if _stop(workload, policy, facts, now) else None
        return None
    if facts.idle_since is None or now - facts.idle_since < policy.warn_after:
        return None
    stop_at = now + policy.stop_after if policy.stop_after is not None else None
    hours = _hours(now - facts.idle_since)
    message = (
        f"The GPUs of this service have been below {policy.threshold_percent} % utilization for {hours}"
        f" (since {facts.idle_since:%Y-%m-%d %H:%M} UTC)"
        + (
            ", and nobody has opened it or held an SSH session to it through the portal since."
            if policy.browser_activity_counts
            else "."
        )
    )
    if stop_at is not None:
        message += f" It will be stopped at {stop_at:%Y-%m-%d %H:%M} UTC unless it uses them again."
    else:
        message += " Please stop it if you no longer need it, so others can use the GPUs."
    with transaction.atomic():
        IdleWarning.objects.create(
            workload=workload,
            idle_since=facts.idle_since,
            warned_at=now,
            threshold_percent=policy.threshold_percent,
            stop_at=stop_at,
        )
        note(workload, reason=WARNED, message=message, source=WorkloadEvent.Source.PORTAL)
        # Keyed by the warning's moment: a service may be warned again after a later idle spell.
        notify(
            kind=IDLE_WARNING,
            workload=workload,
            key=f"{IDLE_WARNING}:{workload.uid}:{now:%Y%m%dT%H%M%S}",
            summary=f"{workload.name} is idle: {message}",
            stops_at=stop_at.isoformat() if stop_at else None,
        )
    return "warned"


def _stop(workload: Workload, policy: IdlePolicy, facts: IdleFacts, now: datetime) -> bool:
    if facts.idle_since is None:
        raise ValueError("only a service found idle is stopped for it")
    message = (
        f"Stopped after {_hours(now - facts.idle_since)} below {policy.threshold_percent} % GPU utilization "
        f"(team {workload.team.name}'s idle-service policy)."
    )
    moved = transition(workload, State.CANCELLED, reason=STOPPED, message=message, finished_at=now)
    if not moved:
        return False  # it changed state meanwhile (ended, cancelled): nothing to stop
    enqueue_delete(workload)
    IdleWarning.objects.filter(workload=workload).delete()
    # The owner hears of the stop through the transition's notification (a cancel not by them).
    return True


def _hours(delta: timedelta) -> str:
    hours = delta.total_seconds() / 3600
    return f"{hours:.1f} h"
