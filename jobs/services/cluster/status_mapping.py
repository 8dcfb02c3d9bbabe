"""From what Kubernetes reports (Job, Pods, Deployment as raw JSON) to workload states.

`observe` is a pure function; `apply_observation` writes the result through the guarded transitions.
The tracker process (management command `track`) feeds both from one watch stream per kind plus a
periodic full list; nothing here makes one API call per workload.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from jobs.models import Kind, State, Workload, WorkloadEvent
from jobs.services.cluster import replaced_pods
from jobs.services.cluster.pull_errors import image_pull_message
from jobs.services.transitions import PlannedWrite, can_move, plan_transition, transition, write_one

log = logging.getLogger(__name__)

IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})


# A running service's reason until its pod is Ready (its readiness probe answered): "starting" on its page.
STARTING = "Starting"


def starting_message(node_name: str) -> str:
    return f"Running on {node_name}; starting up: it does not answer on its port yet."


# The scheduler's reasons ("0/7 nodes are available: 7 pod has unbound immediate PersistentVolumeClaims.") in
# the portal's words, first match wins; the raw text stays in the page's Kubernetes events card.
_UNSCHEDULABLE_WORDS = (
    ("persistentvolumeclaim", "Waiting for its storage (workspace volumes) to be ready."),
    ("insufficient nvidia.com/", "Waiting for a node with enough free GPUs of its type."),
    ("insufficient cpu", "Waiting for a node with enough free CPU."),
    ("insufficient memory", "Waiting for a node with enough free memory."),
    ("anti-affinity", "Waiting for enough nodes: each rank of a gang job runs on a node of its own."),
    ("affinity/selector", "No node of its GPU type (or of the zone or rack it needs) can take it now; waiting."),
    ("node affinity", "No node of its GPU type (or of the zone or rack it needs) can take it now; waiting."),
    ("taint", "The nodes of its GPU type take no new work now (cordoned, draining or unhealthy); waiting."),
)
UNSCHEDULABLE_DEFAULT = "Waiting for a node with free GPUs."


def unschedulable_message(raw: str) -> str:
    text = raw.lower()
    return next((words for key, words in _UNSCHEDULABLE_WORDS if key in text), UNSCHEDULABLE_DEFAULT)


@dataclass(frozen=True)
class Observation:
    state: str
    reason: str
    message: str
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    node_name: str = ""
    pod_name: str = ""
    pod_uid: str = ""


def _ts(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def _main_container(pod: dict[str, Any]) -> dict[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        if status.get("name") == "main":
            return status
    return statuses[0] if statuses else {}


def _pod_facts(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    return {
        "node_name": (pod.get("spec") or {}).get("nodeName") or "",
        "pod_name": meta.get("name") or "",
        "pod_uid": meta.get("uid") or "",
    }


def container_start(pods: list[dict[str, Any]]) -> datetime | None:
    """When the workload's main container first started, by its pods' own statuses (None: never)."""
    starts = []
    for pod in pods:
        container = _main_container(pod)
        for state in (container.get("state") or {}, container.get("lastState") or {}):
            for key in ("running", "terminated"):
                started = _ts((state.get(key) or {}).get("startedAt"))
                if started is not None:
                    starts.append(started)
    return min(starts, default=None)


def _spec_image(pod: dict[str, Any]) -> str:
    containers = (pod.get("spec") or {}).get("containers") or []
    main = next((c for c in containers if c.get("name") == "main"), containers[0] if containers else {})
    return main.get("image") or ""


def _terminated(container: dict[str, Any], phase: str) -> dict[str, Any] | None:
    """The main container's end: its current state's, or, once the pod is over, its last state's."""
    terminated = (container.get("state") or {}).get("terminated")
    if terminated is None and phase in ("Succeeded", "Failed"):
        terminated = (container.get("lastState") or {}).get("terminated")
    return terminated


def _has_ended(phase: str, terminated: dict[str, Any] | None, kind: str) -> bool:
    """Does the main container's end decide the workload? (A service's container may end and restart.)"""
    return phase == "Succeeded" or bool(terminated and (phase == "Failed" or kind == Kind.BATCH))


def _exited(terminated: dict[str, Any] | None, phase: str, facts: dict[str, Any]) -> Observation:
    """The main container ended: succeeded on code 0 (unless the pod failed), else failed and why."""
    terminated = terminated or {}
    code = int(terminated.get("exitCode", 0))
    started = _ts(terminated.get("startedAt"))
    finished = _ts(terminated.get("finishedAt"))
    if code == 0 and phase != "Failed":
        return Observation(State.SUCCEEDED, "Completed", "Exited with code 0.", started, finished, 0, **facts)
    reason = terminated.get("reason") or "Error"
    if reason == "OOMKilled":
        message = "Killed by the kernel: the container ran out of memory (OOMKilled)."
    else:
        reason = "ExitCode"
        message = f"Exited with code {code}."
    return Observation(State.FAILED, reason, message, started, finished, code, **facts)


def _pod_failed(pod: dict[str, Any], status: dict[str, Any], facts: dict[str, Any]) -> Observation:
    """The pod failed without its container ending (evicted, a node lost): the pod's own reason."""
    reason = status.get("reason") or "PodFailed"
    message = status.get("message") or "The pod failed."
    if reason == "Evicted":
        message = f"Evicted by the node: {message}"
    ready = _condition(pod, "Ready")
    finished = _ts((ready or {}).get("lastTransitionTime")) or timezone.now()
    return Observation(State.FAILED, reason, message, None, finished, None, **facts)


def _running(pod: dict[str, Any], running: dict[str, Any], kind: str, facts: dict[str, Any]) -> Observation:
    started = _ts(running.get("startedAt"))
    if kind == Kind.SERVICE and _condition(pod, "Ready") is None:
        # Its container runs (billed from here), but its program does not answer on its port yet.
        return Observation(State.RUNNING, STARTING, starting_message(facts["node_name"]), started, **facts)
    return Observation(State.RUNNING, "Running", f"Running on {facts['node_name']}.", started, **facts)


def _waiting(
    pod: dict[str, Any], container: dict[str, Any], waiting: dict[str, Any], facts: dict[str, Any]
) -> Observation:
    reason = waiting.get("reason") or "Waiting"
    message = waiting.get("message") or reason
    if reason in IMAGE_PULL_REASONS:
        message = image_pull_message(reason, message, container.get("image") or _spec_image(pod))
    elif reason == "ContainerCreating":
        message = f"Starting the container on {facts['node_name']}."
    return Observation(State.PENDING, reason, message, **facts)


def _not_started(status: dict[str, Any], facts: dict[str, Any]) -> Observation:
    """No container state yet: unschedulable, being placed, or its container being created."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return Observation(
                State.PENDING,
                condition.get("reason") or "Unschedulable",
                unschedulable_message(condition.get("message") or ""),
                **facts,
            )
    if facts["node_name"]:
        return Observation(
            State.PENDING, "ContainerCreating", f"Starting the container on {facts['node_name']}.", **facts
        )
    return Observation(State.PENDING, "Scheduling", "Waiting for the scheduler.", **facts)


def observe_pod(pod: dict[str, Any], *, kind: str) -> Observation:
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    container = _main_container(pod)
    state = container.get("state") or {}
    facts = _pod_facts(pod)
    terminated = _terminated(container, phase)
    if _has_ended(phase, terminated, kind):
        return _exited(terminated, phase, facts)
    if phase == "Failed":
        return _pod_failed(pod, status, facts)
    if state.get("running"):
        return _running(pod, state["running"], kind, facts)
    if state.get("waiting"):
        return _waiting(pod, container, state["waiting"], facts)
    return _not_started(status, facts)


def _deadline_passed(job: dict[str, Any], failed: dict[str, Any]) -> bool:
    """Did the Job fail at or after its activeDeadlineSeconds? (The Job controller may name the pod it
    killed at the deadline, BackoffLimitExceeded, rather than the deadline itself.)"""
    if failed.get("reason") == "DeadlineExceeded":
        return True
    limit = (job.get("spec") or {}).get("activeDeadlineSeconds")
    began = _ts((job.get("status") or {}).get("startTime"))
    ended = _ts(failed.get("lastTransitionTime"))
    return bool(limit and began and ended and (ended - began).total_seconds() >= limit - 1)


def _past_deadline(job: dict[str, Any], pods: list[dict[str, Any]], kind: str) -> Observation | None:
    """A batch job stopped at its activeDeadlineSeconds, said so (None when it was not)."""
    failed = _condition(job, "Failed")
    if failed is None or not _deadline_passed(job, failed):
        return None
    limit = ((job.get("spec") or {}).get("activeDeadlineSeconds")) or 0
    started = next((o.started_at for o in (observe_pod(p, kind=kind) for p in pods) if o.started_at), None)
    return Observation(
        State.FAILED,
        "DeadlineExceeded",
        f"Stopped at its time limit ({_hms(limit)}).",
        started,
        _ts(failed.get("lastTransitionTime")) or timezone.now(),
    )


def _job_verdict(job: dict[str, Any]) -> Observation | None:
    """The Job's own verdict (complete or failed), if it has one yet."""
    complete = _condition(job, "Complete")
    if complete is not None:
        finished = _ts((job.get("status") or {}).get("completionTime"))
        return Observation(State.SUCCEEDED, "Completed", "Completed.", None, finished, 0)
    failed = _condition(job, "Failed")
    if failed is not None:
        return Observation(
            State.FAILED,
            failed.get("reason") or "Failed",
            failed.get("message") or "The job failed.",
            None,
            _ts(failed.get("lastTransitionTime")),
        )
    return None


def _speaking_pod(pods: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    """The newest pod not being deleted speaks for the workload (a Deployment replaces a lost pod with a new
    one); a service's only pod being replaced still says where it stands."""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    if kind == Kind.SERVICE and not live:
        live = pods
    return max(live, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", default=None)


def observe(*, kind: str, job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> Observation | None:
    """The state a workload is in, judged from its objects; None when they say nothing yet."""
    batch_job = job if kind == Kind.BATCH else None
    if batch_job is not None and (deadline := _past_deadline(batch_job, pods, kind)) is not None:
        return deadline
    pod = _speaking_pod(pods, kind)
    if pod is not None:
        seen = observe_pod(pod, kind=kind)
        if seen.state == State.FAILED and kind == Kind.BATCH:  # killed by Kubernetes, not its own exit
            return _disrupted([pod], kind=kind, seen=seen) or seen
        return seen
    if batch_job is None:
        return None
    # No pod left to ask (or only ones being deleted): the Job's own verdict, if it has one yet.
    verdict = _job_verdict(batch_job)
    if verdict is not None and verdict.state == State.FAILED:
        return _disrupted(pods, kind=kind) or verdict
    return verdict


def _disrupted(pods: list[dict[str, Any]], *, kind: str, seen: Observation | None = None) -> Observation | None:
    """A Job that failed because Kubernetes took its pod away (its node lost and the taint manager deleting
    the pod, a drain's eviction, the kubelet shutting down): the pod, being deleted, carries a DisruptionTarget
    condition, and the Job controller counts it as the one failure its backoffLimit 0 allows, so the Job says
    only BackoffLimitExceeded. The pod's condition is the truer end: not the job's fault (jobs/services/retry.py
    retries a restartable job after it, with the GPU-hours lost since its last checkpoint on its timeline)."""
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", reverse=True):
        condition = _condition(pod, "DisruptionTarget")
        if condition is None or not condition.get("reason"):
            continue
        seen = seen or observe_pod(pod, kind=kind)
        words = condition.get("message") or "Kubernetes took its pod away."
        return replace(
            seen,
            state=State.FAILED,
            reason=str(condition["reason"])[:64],
            message=f"Its pod was stopped by Kubernetes ({condition['reason']}): {words}",
            finished_at=_ts(condition.get("lastTransitionTime")) or seen.finished_at or timezone.now(),
        )
    return None


def _hms(seconds: int) -> str:
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else (f"{minutes}m{secs:02d}s" if minutes else f"{secs}s")


def _retried(workload: Workload, obs: Observation) -> tuple[bool, Observation]:
    """A restartable batch job's end that was not its fault runs again instead (jobs/services/retry.py);
    when its retries are used up, the failure says so."""
    from jobs.services.retry import retry_or_why_not

    if workload.started_at is None and obs.started_at is not None:
        workload.started_at = obs.started_at
    retried, why_not = retry_or_why_not(
        workload, reason=obs.reason, message=obs.message, at=obs.finished_at or timezone.now(),
        exit_code=obs.exit_code, node_name=obs.node_name, source=WorkloadEvent.Source.KUBERNETES,
    )  # fmt: skip
    return retried, replace(obs, message=obs.message + why_not) if why_not else obs


def _changed_fields(workload: Workload, obs: Observation) -> dict[str, Any]:
    """The row's fields the observation changes, besides state, reason and message."""
    fields: dict[str, Any] = {}
    for name in ("node_name", "pod_name", "pod_uid"):
        value = getattr(obs, name)
        if value and getattr(workload, name) != value:
            fields[name] = value
    if obs.started_at and workload.started_at is None:
        fields["started_at"] = obs.started_at
    if obs.state in State.final():
        fields["finished_at"] = obs.finished_at or timezone.now()
        fields["exit_code"] = obs.exit_code
    return fields


def _move(workload: Workload, obs: Observation, fields: dict[str, Any]) -> bool:
    """A new state: through the guarded transition (or a retry instead of a failure)."""
    if not can_move(workload.state, obs.state):
        return False
    if obs.state == State.FAILED:
        retried, obs = _retried(workload, obs)
        if retried:
            return True
    at = obs.started_at if obs.state == State.RUNNING else obs.finished_at if obs.state in State.final() else None
    moved = transition(
        workload,
        obs.state,
        reason=obs.reason,
        message=obs.message,
        at=at,
        source=WorkloadEvent.Source.KUBERNETES,
        **fields,
    )
    # Its objects go once it has ended (the delete task acts only on a workload that has ended).
    if moved and obs.state == State.FAILED and obs.reason in IMAGE_PULL_REASONS | {"DeadlineExceeded"}:
        from jobs.services.dispatch import enqueue_delete

        enqueue_delete(workload)
    return moved


def _plan_in_place(workload: Workload, obs: Observation, fields: dict[str, Any]) -> PlannedWrite | None:
    """The same state with new facts or a new reason or message (None: nothing to write). The row and, for a
    new reason, its timeline entry, written only while the state is still the one this observation was read
    against: a state change that slipped in between wrote its own entry, and this one is stale."""
    new_reason = obs.reason != workload.reason
    if new_reason or obs.message != workload.message:
        fields.update(reason=obs.reason, message=obs.message)
    if not fields:
        return None
    now = timezone.now()
    entry = None
    if new_reason:
        entry = {"at": now, "source": WorkloadEvent.Source.KUBERNETES, "from_state": workload.state,
                 "to_state": workload.state, "reason": fields["reason"], "message": fields["message"]}  # fmt: skip

    def done() -> None:
        for key, value in fields.items():
            setattr(workload, key, value)

    return PlannedWrite(workload, workload.state, {"updated_at": now, **fields}, entry, done, lambda: None)


def _update_in_place(workload: Workload, obs: Observation, fields: dict[str, Any]) -> bool:
    """The same state with new facts or a new reason or message (on PostgreSQL one statement, the guarded
    UPDATE's RETURNING feeding its timeline entry's INSERT, as a move's)."""
    plan = _plan_in_place(workload, obs, fields)
    if plan is None or not write_one(plan):
        return False
    plan.done()
    return True


# What `plan_observation` answers for an observation whose write cannot be planned ahead (a replacement pod,
# a failure that may be retried instead): the caller applies it alone, with `apply_observation`.
ALONE = object()


def plan_observation(workload: Workload, obs: Observation) -> PlannedWrite | object | None:
    """What `apply_observation` would write, planned for the caller to send together with other workloads'
    (`transitions.write_many`); None when it would write nothing, ALONE when it must be applied alone."""
    if workload.is_final:
        return None
    if replaced_pods.is_replacement(workload, obs):
        return ALONE
    fields = _changed_fields(workload, obs)
    if obs.state == workload.state:
        return _plan_in_place(workload, obs, fields)
    if not can_move(workload.state, obs.state):
        return None
    if obs.state == State.FAILED:
        return ALONE
    at = obs.started_at if obs.state == State.RUNNING else obs.finished_at if obs.state in State.final() else None
    return plan_transition(
        workload, obs.state, reason=obs.reason, message=obs.message, at=at, source=WorkloadEvent.Source.KUBERNETES,
        **fields,
    )  # fmt: skip


def would_change(workload: Any, obs: Observation) -> bool:
    """Whether `apply_observation` could write anything for this observation of an active workload (pure: it
    reads the row's state, reason, message, kind, nodes, placement and start, as a model or a values row)."""
    return (
        obs.state != workload.state
        or obs.reason != workload.reason
        or obs.message != workload.message
        or bool(_changed_fields(workload, obs))
        or replaced_pods.is_replacement(workload, obs)
    )


def apply_observation(workload: Workload, obs: Observation) -> bool:
    """Write what was observed; returns whether anything changed."""
    if workload.is_final:
        return False
    if replaced_pods.is_replacement(workload, obs):  # Kubernetes made a new pod for the same attempt
        return replaced_pods.record_replacement(workload, obs)
    fields = _changed_fields(workload, obs)
    if obs.state != workload.state:
        return _move(workload, obs, fields)
    return _update_in_place(workload, obs, fields)
