"""The tracker's view of a gang job: its ranks' pods become one workload state.

- running when every rank runs; pending (saying how many run and why the rest wait) until then;
- failed as soon as any rank fails, naming the rank and its exit code (the others are then deleted);
- succeeded when every rank succeeded.
Each rank's pod is kept as a GangRank row (node, pod, exit code, Kubernetes' own start and end). The
workload's `started_at`/`finished_at` are set so that its GPU count times their span is the sum over
ranks of GPUs per node times each rank's own run: the mean start of the ranks that started, and that plus
the ranks' summed run over the number of ranks (the mean end when every rank ran).

Without cluster DNS the tracker also hands rank 0's pod IP to the other ranks (an annotation on their
pods, which the kubelet copies into the file their wrapper waits on): one patch per rank pod, once.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from kubernetes.client.exceptions import ApiException

from jobs.kube import client as kube
from jobs.kube import names
from jobs.models import GangRank, Kind, State, Workload
from jobs.services.cluster.status_mapping import Observation, apply_observation, observe

log = logging.getLogger(__name__)


def rank_objects(
    jobs: list[dict[str, Any]], pods: list[dict[str, Any]], *, gang: str
) -> dict[int, tuple[dict[str, Any] | None, list[dict[str, Any]]]]:
    """Each rank's Job and pods, of one attempt (the gang label) only."""
    by_rank: dict[int, tuple[dict[str, Any] | None, list[dict[str, Any]]]] = {}
    for job in jobs:
        labels = (job.get("metadata") or {}).get("labels") or {}
        rank = _rank(labels, gang)
        if rank is not None:
            by_rank[rank] = (job, by_rank.get(rank, (None, []))[1])
    for pod in pods:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        rank = _rank(labels, gang)
        if rank is not None:
            job, own = by_rank.get(rank, (None, []))
            by_rank[rank] = (job, [*own, pod])
    return by_rank


def _rank(labels: dict[str, str], gang: str) -> int | None:
    if labels.get(names.LABEL_GANG) != gang:
        return None
    value = labels.get(names.LABEL_RANK, "")
    return int(value) if value.isdigit() else None


def attempt_object_name(workload: Workload, pod_labels: dict[str, str]) -> str | None:
    """The name of the attempt a pod belongs to, as preemption deletes attempts by: its Job's name, or for
    a gang's rank (whose Job is named per rank) the attempt's name read from the gang label."""
    gang = pod_labels.get(names.LABEL_GANG, "")
    uid, _, attempt = gang.rpartition("-")
    if gang and uid == workload.uid and attempt.isdigit():
        return names.attempt_name(workload.name, workload.uid, int(attempt))
    return pod_labels.get("job-name")


def observe_gang(nodes: int, ranks: dict[int, Observation | None]) -> Observation | None:
    """The gang's one state from its ranks' (pure). None: nothing to say yet."""
    seen = {rank: obs for rank, obs in ranks.items() if obs is not None and rank < nodes}
    if not seen:
        return None
    failed = sorted((rank, obs) for rank, obs in seen.items() if obs.state == State.FAILED)
    if failed:
        return _gang_failed(nodes, seen, *failed[0])
    return _gang_succeeded(nodes, seen) or _gang_not_done(nodes, seen)


def _gang_succeeded(nodes: int, seen: dict[int, Observation]) -> Observation | None:
    """Succeeded when every rank did; None until then."""
    done = [obs for obs in seen.values() if obs.state == State.SUCCEEDED]
    if len(done) != nodes:
        return None
    started, finished = gang_interval(nodes, done)
    return Observation(State.SUCCEEDED, "Completed", f"All {nodes} ranks exited with code 0.", started, finished, 0)


def _gang_failed(nodes: int, seen: dict[int, Observation], rank: int, obs: Observation) -> Observation:
    """The gang failed with rank `rank` (the lowest that failed; `obs` its observation)."""
    what = obs.message.rstrip(".")
    message = f"Rank {rank} of {nodes} failed: {what}. The other ranks were stopped."
    started, finished = gang_interval(nodes, list(seen.values()), fallback_end=obs.finished_at)
    return Observation(
        State.FAILED,
        obs.reason,
        message,
        started,
        finished,
        obs.exit_code,
        obs.node_name,
        obs.pod_name,
        obs.pod_uid,
    )


def _gang_not_done(nodes: int, seen: dict[int, Observation]) -> Observation:
    """Running when every rank runs (or has succeeded), else pending: how many run, why the first waits."""
    running = [obs for obs in seen.values() if obs.state in (State.RUNNING, State.SUCCEEDED)]
    rank0 = seen.get(0)
    where = {"node_name": rank0.node_name, "pod_name": rank0.pod_name, "pod_uid": rank0.pod_uid} if rank0 else {}
    if len(running) == nodes:
        started, _ = gang_interval(nodes, running)
        nodes_used = sorted({obs.node_name for obs in running if obs.node_name})
        return Observation(State.RUNNING, "Running", f"All {nodes} ranks running on {', '.join(nodes_used)}.",
                           started, **where)  # fmt: skip
    reason, why = _first_waiting(nodes, seen)
    return Observation(State.PENDING, reason, f"{len(running)} of {nodes} ranks running.{why}", **where)


def _first_waiting(nodes: int, seen: dict[int, Observation]) -> tuple[str, str]:
    """(reason, " Rank n: why") of the first rank still waiting, as a pending gang says it."""
    waiting = sorted(rank for rank in range(nodes) if rank not in seen or seen[rank].state == State.PENDING)
    first = seen.get(waiting[0]) if waiting else None
    if first is None:
        return "Scheduling", ""
    return first.reason, f" Rank {waiting[0]}: {first.message}"


def gang_interval(
    nodes: int, ranks: list[Observation], *, fallback_end: datetime | None = None
) -> tuple[datetime | None, datetime | None]:
    """(start, end) whose span times every GPU of the gang equals the sum of the ranks' own runs."""
    starts = [obs.started_at for obs in ranks if obs.started_at is not None]
    if not starts:
        return None, fallback_end
    base = min(starts)
    mean_start = base + sum(((s - base) for s in starts), timedelta()) / len(starts)
    ends = [(obs.started_at, obs.finished_at) for obs in ranks if obs.started_at and obs.finished_at]
    if not ends:
        return mean_start, fallback_end
    ran = sum((max(timedelta(), end - start) for start, end in ends), timedelta())
    return mean_start, mean_start + ran / nodes


def sync_gang(workload: Workload, jobs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> bool:
    """Apply a gang's objects to its workload (the tracker's `sync_workloads` calls this for gangs)."""
    gang = names.gang_label(workload.uid, workload.attempt)
    by_rank = rank_objects(jobs, pods, gang=gang)
    ranks = {rank: observe(kind=Kind.BATCH, job=job, pods=own) for rank, (job, own) in by_rank.items()}
    record_ranks(workload, ranks, by_rank)
    if not settings.CLUSTER_DNS and not workload.is_final:
        hand_over_master_addr(by_rank)
    obs = observe_gang(workload.nodes, ranks)
    if obs is None:
        return False
    moved = apply_observation(workload, obs)
    if moved and obs.state == State.FAILED:
        from jobs.services.dispatch import enqueue_delete  # as status_mapping does: dispatch imports tasks

        enqueue_delete(workload)  # the other ranks stop
    return moved


def _rank_facts(obs: Observation, pod: dict[str, Any] | None) -> dict[str, Any]:
    """A rank's GangRank fields from its observation and its newest pod."""
    return {
        "phase": obs.state,
        "reason": obs.reason[:64],
        "pod_name": obs.pod_name,
        "pod_uid": obs.pod_uid,
        "pod_ip": ((pod or {}).get("status") or {}).get("podIP") or "",
        "node_name": obs.node_name,
        "exit_code": obs.exit_code,
        "started_at": obs.started_at,
        "finished_at": obs.finished_at,
    }


def record_ranks(
    workload: Workload,
    ranks: dict[int, Observation | None],
    by_rank: dict[int, tuple[dict[str, Any] | None, list[dict[str, Any]]]],
) -> None:
    """Keep each rank's latest facts (a write only where something changed)."""
    known = {row.rank: row for row in GangRank.objects.filter(workload=workload, attempt=workload.attempt)}
    for rank, obs in ranks.items():
        if obs is None:
            continue
        facts = _rank_facts(obs, _newest(by_rank[rank][1]))
        row = known.get(rank)
        if row is None:
            GangRank.objects.create(workload=workload, attempt=workload.attempt, rank=rank, **facts)
            continue
        # Kubernetes' facts only grow: an empty value never overwrites one seen before.
        changed = {k: v for k, v in facts.items() if v not in (None, "") and getattr(row, k) != v}
        if changed:
            GangRank.objects.filter(id=row.id).update(**changed)


def _newest(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")] or pods
    return max(live, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", default=None)


def hand_over_master_addr(by_rank: dict[int, tuple[dict[str, Any] | None, list[dict[str, Any]]]]) -> int:
    """Write rank 0's pod IP on every other rank's live pod that lacks it; returns the pods patched."""
    rank0 = _newest(by_rank.get(0, (None, []))[1])
    address = ((rank0 or {}).get("status") or {}).get("podIP") or ""
    if not address or (rank0.get("metadata") or {}).get("deletionTimestamp"):
        return 0
    patched = 0
    for rank, (_, pods) in by_rank.items():
        if rank == 0:
            continue
        for pod in pods:
            patched += _hand_over(pod, rank, address)
    return patched


def _hand_over(pod: dict[str, Any], rank: int, address: str) -> bool:
    """Annotate one live rank pod with rank 0's `address` unless it has it; whether it was patched."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp") or (meta.get("annotations") or {}).get(names.ANNOTATION_MASTER_ADDR) == address:
        return False
    body = {"metadata": {"annotations": {names.ANNOTATION_MASTER_ADDR: address}}}
    try:
        kube.core().patch_namespaced_pod(meta["name"], meta["namespace"], body, _request_timeout=kube.timeout())
    except ApiException as exc:
        if exc.status != 404:
            log.warning("gang %s: could not hand rank 0's address to %s: %s", meta.get("name"), rank,
                        kube.classify(exc).message)  # fmt: skip
        return False
    return True
