"""The domain's announcements (jobs/signals.py) that become notifications. Connected in apps.py."""

from __future__ import annotations

from typing import Any

from django.dispatch import receiver

from jobs.models import State, Workload
from jobs.services.checkpoints.cost import gpu_hours_words
from jobs.signals import workload_on_unhealthy_gpu, workload_preempted, workload_retried, workload_transitioned
from notifications import events


@receiver(workload_transitioned, dispatch_uid="notifications.workload_transitioned")
def on_transition(sender: Any, *, workload: Workload, from_state: str, actor: Any = None, **_: Any) -> None:
    events.workload_transitioned(workload, from_state=from_state, actor=actor)


@receiver(workload_preempted, dispatch_uid="notifications.workload_preempted")
def on_preempted(sender: Any, *, workload: Workload, lost_gpu_seconds: float | None = None, **_: Any) -> None:
    """The one place that tells the owner their workload was preempted (once per preemption, sent on
    commit). A batch job that ends FAILED is already told by the transition, as every failure is."""
    if workload.state == State.FAILED:
        return
    if workload.state == State.QUEUED:
        summary = f"{workload.name} was preempted (its GPUs were borrowed) and requeued at the front of the queue."
    else:
        summary = f"{workload.name} was preempted: the borrowed GPUs it ran on were needed back."
    if lost_gpu_seconds is not None:
        summary += f" Work lost: {gpu_hours_words(lost_gpu_seconds)} (since its last checkpoint, or its start)."
    events.notify(
        kind=events.PREEMPTED,
        workload=workload,
        summary=summary,
        key=f"{events.PREEMPTED}:{workload.uid}:{workload.attempt}:{workload.state}",
        requeued=workload.state == State.QUEUED,
    )


@receiver(workload_retried, dispatch_uid="notifications.workload_retried")
def on_retried(sender: Any, *, workload: Workload, reason: str, lost_gpu_seconds: float, **_: Any) -> None:
    """The owner hears that their job ended through no fault of its own and runs again."""
    events.notify(
        kind=events.RETRIED,
        workload=workload,
        summary=f"{workload.name} stopped ({reason}) through no fault of its own and was requeued for attempt "
        f"{workload.attempt}. Work lost: {gpu_hours_words(lost_gpu_seconds)} (since its last checkpoint, or its start).",
        key=f"{events.RETRIED}:{workload.uid}:{workload.attempt}",
    )


@receiver(workload_on_unhealthy_gpu, dispatch_uid="notifications.workload_on_unhealthy_gpu")
def on_unhealthy_gpu(sender: Any, *, workload: Workload, detail: str, mark_id: int, **_: Any) -> None:
    events.notify(
        kind=events.GPU_UNHEALTHY,
        workload=workload,
        summary=f"A GPU of the node {workload.name} runs on failed ({detail[:120]}). It keeps running but may fail: "
        "save your work.",
        key=f"{events.GPU_UNHEALTHY}:{workload.uid}:{mark_id}",
    )
