"""The tracker: keeps workload states in step with the cluster.

One full list of pods and Jobs (two API calls, whatever the number of workloads) seeds a local cache;
one watch stream per kind then streams changes. Changed workloads are written in small batches, so a
pod's phase change reaches the database within a fraction of a second. Every PORTAL_RESYNC_SECONDS the
view is applied again to every active workload (a full sync: what the database changed meanwhile, objects
deleted outside the portal). A stream the API server ends on its timeout is followed by the next from the
last version seen; a full relist runs whenever a watch breaks (an error, 410 Gone), so a missed event is
caught up, not lost.
"""

from __future__ import annotations

import functools
import gc
import logging
import queue
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.utils import timezone
from kubernetes.client.exceptions import ApiException

from jobs.kube import client as kube
from jobs.kube import names
from jobs.models import Kind, State, Workload
from jobs.services import dispatch, transitions
from jobs.services.cluster import status_mapping
from jobs.services.cluster.gang_tracking import attempt_object_name, sync_gang
from jobs.services.cluster.status_mapping import Observation, apply_observation, observe, would_change
from jobs.services.cluster.watch_events import essentials, read_event, read_list

log = logging.getLogger(__name__)


def name_os_thread(name: str) -> bool:
    """Name the calling thread as the operating system sees it (Linux: `/proc/<pid>/task/<tid>/comm`, what
    `top -H`, `ps -L` and the budgets benchmark's CPU per thread read; at most 15 bytes); Python 3.11 leaves
    every thread with the process's name there. Whether it took: elsewhere, or should the write fail, the
    thread keeps its name and nothing else changes."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(name.encode()[:15].decode(errors="ignore"))
    except OSError:
        return False
    return True


def selector() -> str:
    return f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY},{names.LABEL_INSTANCE}={names.label_value(settings.PORTAL_INSTANCE)}"


def is_ours(obj: dict[str, Any]) -> bool:
    """Whether an object carries this portal instance's labels (the list and watch ask for them, but a
    stream is not where trust is decided)."""
    return _ours((obj.get("metadata") or {}).get("labels") or {})


def _ours(labels: dict[str, Any]) -> bool:
    return (
        labels.get(names.LABEL_MANAGED_BY) == names.MANAGED_BY
        and labels.get(names.LABEL_INSTANCE) == _instance_label(settings.PORTAL_INSTANCE)
        and bool(labels.get(names.LABEL_WORKLOAD))
    )


@functools.lru_cache(maxsize=8)
def _instance_label(instance: str) -> str:
    """The instance's label value (a pure function of it: asked at every watch event)."""
    return names.label_value(instance)


# Strangers already reported, so that one impostor does not fill the log at every event and relist.
# Bounded: a flood of them is reported up to this many times, then only counted.
_reported_strangers: set[tuple[str, str, str]] = set()
_REPORT_LIMIT = 10_000


def report_stranger(kind: str, obj: dict[str, Any], *, expected_namespace: str) -> None:
    meta = obj.get("metadata") or {}
    key = (kind, meta.get("namespace") or "", meta.get("name") or "")
    if key in _reported_strangers or len(_reported_strangers) >= _REPORT_LIMIT:
        return
    _reported_strangers.add(key)
    log.warning(
        "ignoring %s %s/%s: it wears workload %s's labels but is outside that workload's namespace %s",
        kind,
        key[1],
        key[2],
        (meta.get("labels") or {}).get(names.LABEL_WORKLOAD),
        expected_namespace,
    )


def workload_namespace(workload: Workload | Placement) -> str:
    return workload.namespace or workload.team.namespace


def in_namespace(kind: str, obj: dict[str, Any], namespace: str) -> bool:
    """An object speaks for a workload only from that workload's team namespace: anyone who may create a
    pod somewhere else in the cluster could otherwise copy a workload's labels and end it."""
    if (obj.get("metadata") or {}).get("namespace") == namespace:
        return True
    report_stranger(kind, obj, expected_namespace=namespace)
    return False


ENDED = "ended"  # what the view keeps of a workload whose row it saw end


@dataclass(frozen=True)
class Placement:
    """What `ClusterView.objects_for` reads of a workload: its uid, name, kind, attempt and own namespace."""

    uid: str
    name: str
    kind: str
    attempt: int
    namespace: str


@dataclass
class ClusterView:
    """The latest Jobs and Pods per workload uid, keyed by "namespace/name": of each, the fields the tracker
    reads (watch_events.essentials), in the object's own JSON shape."""

    jobs: dict[str, dict[str, dict[str, Any]]] = field(default_factory=lambda: defaultdict(dict))
    pods: dict[str, dict[str, dict[str, Any]]] = field(default_factory=lambda: defaultdict(dict))
    listed_at: float = 0.0
    # Per workload uid, what its row said when the tracker last recorded it and found it as its objects say:
    # the placement its objects were read by, their keys then, and the observation; or ENDED (see `remember`).
    recorded: dict[str, Any] = field(default_factory=dict)

    def put(
        self, kind: str, obj: dict[str, Any], deleted: bool = False, *, if_changed: bool = False, kept: bool = False
    ) -> str | None:
        """Keep (or forget) an object; returns its workload's uid, None when it is not ours, or (`if_changed`,
        as the watches ask) when nothing the tracker reads changed (a Job's counts, a pod's finalizers, a
        resend): then its workload has nothing new to record. `kept`: the object is already its essentials
        (as `watch_events.read_event` and `read_list` read a line)."""
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        uid = labels.get(names.LABEL_WORKLOAD)
        if not uid or not _ours(labels):  # is_ours, its labels read once: asked at every watch event
            return None
        # Keyed by namespace and name, so a look-alike elsewhere never replaces the real object.
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        objects = self.jobs[uid] if kind == "Job" else self.pods[uid]
        if deleted:
            objects.pop(where, None)
            if not self.jobs.get(uid) and not self.pods.get(uid):
                self.recorded.pop(uid, None)
            return uid
        if not kept:
            obj = essentials(kind, obj)
        if if_changed and objects.get(where) == obj:
            return None
        objects[where] = obj
        return uid

    def in_own_namespace(self, workload: Workload | Placement) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The workload's Jobs and pods of every attempt, in its own namespace only."""
        namespace = workload_namespace(workload)
        jobs = [j for j in self.jobs.get(workload.uid, {}).values() if in_namespace("Job", j, namespace)]
        pods = [p for p in self.pods.get(workload.uid, {}).values() if in_namespace("Pod", p, namespace)]
        return jobs, pods

    def objects_for(self, workload: Workload | Placement) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """The workload's Job and pods, counting only those in its own namespace."""
        jobs, pods = self.in_own_namespace(workload)
        if workload.attempt:
            # Requeued after preemption: only this attempt's Job and pods say anything about it (the
            # previous attempt's may still be terminating).
            name = names.attempt_name(workload.name, workload.uid, workload.attempt)
            jobs = [j for j in jobs if (j.get("metadata") or {}).get("name") == name]
            pods = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get("job-name") == name]
        job = jobs[0] if jobs else None
        return job, pods

    def may_say_something(self, uid: str) -> bool:
        """Whether `observe` could conclude anything for the workload: it has a pod (anywhere: the
        namespace is checked on the workload), or a Job that finished. A Job just created, with no pod
        yet, says nothing; draining a long queue makes thousands of them at once."""
        if self.pods.get(uid):
            return True
        return any(_finished(job) for job in self.jobs.get(uid, {}).values())

    def keys(self, uid: str) -> tuple[str, ...]:
        """The workload's objects held, by kind and key: a new attempt's or a replacement's shows as a new key."""
        return (*(f"Job {key}" for key in self.jobs.get(uid, ())), *(f"Pod {key}" for key in self.pods.get(uid, ())))

    def remember(self, workload: Workload, obs: Observation | None, *, recorded: bool = True) -> None:
        """After a workload's row was committed (`recorded`: without a failure): keep what it says when it
        says what its objects say (a single pod's workload), or that it has ended (an end is final: no later
        event can change it); else forget what was kept."""
        if recorded and workload.state in State.final():
            self.recorded[workload.uid] = ENDED
            return
        namespace = workload_namespace(workload)
        if (
            not recorded
            or obs is None
            or workload.nodes > 1
            or obs.state in State.final()
            or not namespace
            or would_change(workload, obs)
        ):
            self.recorded.pop(workload.uid, None)
            return
        place = Placement(workload.uid, workload.name, workload.kind, workload.attempt, namespace)
        self.recorded[workload.uid] = (place, self.keys(workload.uid), obs)

    def already_recorded(self, uid: str) -> bool:
        """Whether loading the workload's row could find nothing to write: it has ended (the burst would not
        load it), or its objects, as they are now, say exactly what its row said when it was last recorded,
        with the same objects (no new attempt, no replacement pod): a Job's start time or completion, a pod's
        Ready or Initialized condition changed the view but not the observation. (Another writer that
        changed the row meanwhile either moved it where the tracker does not write (queued again, ended)
        or is caught by the next resync, which reads every row.)"""
        kept = self.recorded.get(uid)
        if kept is None:
            return False
        if kept is ENDED:
            return True
        place, keys, obs = kept
        if keys != self.keys(uid):
            return False
        job, pods = self.objects_for(place)
        return observe(kind=place.kind, job=job, pods=pods) == obs

    def worth_loading(self, uids: set[str]) -> set[str]:
        """Those of the workloads whose objects may say something their row does not say yet."""
        return {uid for uid in uids if self.may_say_something(uid) and not self.already_recorded(uid)}

    def holds_own_job(self, uid: str, namespace: str) -> bool:
        """Whether the view holds the workload's Job in its own namespace (first attempt)."""
        return any((job.get("metadata") or {}).get("namespace") == namespace for job in self.jobs.get(uid, {}).values())


def _placed_before(state: str, submitted_at: datetime | None, since: datetime) -> bool:
    """A workload placed on the cluster (pending or running) since before `since`: its objects, should
    none be left, are missing rather than not made yet."""
    return state in (State.PENDING, State.RUNNING) and submitted_at is not None and submitted_at < since


def _finished(job: dict[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


def _list(kind: str) -> tuple[list[dict[str, Any]], str, bool]:
    """The kind's objects of this instance (as their essentials, should the response fit the typed reading:
    `watch_events.read_list`), the list's resourceVersion, and whether they are essentials."""
    if kind == "Job":
        response = kube.batch().list_job_for_all_namespaces(
            label_selector=selector(), _preload_content=False, _request_timeout=kube.timeout() * 4
        )
    else:
        response = kube.core().list_pod_for_all_namespaces(
            label_selector=selector(), _preload_content=False, _request_timeout=kube.timeout() * 4
        )
    return read_list(kind, response.data)


def still_runs(pod: dict[str, Any]) -> bool:
    """Whether a pod still holds its node's resources: not being deleted, and not ended. A pod whose
    containers ended (phase Succeeded or Failed) holds no GPU, and it is what `logs` reads a failed job's
    output from, so it stays until cleanup's retention period is over."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def reap_finished(view: ClusterView) -> int:
    """Finished workloads whose pods still run (a delete request lost with the broker, say): ask again.
    Pods that ended on their own are left alone (their logs are the user's to read until cleanup).

    Their GPUs were already returned to the quota, so the cluster must let go of them too.
    """
    from jobs.services.dispatch import enqueue_delete

    running = {uid for uid, pods in view.pods.items() if any(still_runs(p) for p in pods.values())}
    if not running:
        return 0
    finished = Workload.objects.filter(
        uid__in=running, state__in=(State.CANCELLED, State.FAILED, State.PREEMPTED)
    ).select_related("team")
    # Only the workload's own pods count: a look-alike elsewhere must not make us delete anything.
    stale = [w for w in finished if any(still_runs(p) for p in view.objects_for(w)[1])]
    for workload in stale:
        enqueue_delete(workload)
    return len(stale) + reap_superseded_attempts(view, running)


def reap_superseded_attempts(view: ClusterView, running: set[str]) -> int:
    """Pods of an attempt that preemption ended (the workload was requeued and runs, or waits, under a
    new name) that still run: the delete request was lost (broker down, say). Ask again, with the grace."""
    from jobs.services.dispatch import enqueue_preempt_delete

    requeued = Workload.objects.filter(uid__in=running, attempt__gt=0).select_related("team")
    asked = 0
    for w in requeued:
        current = names.attempt_name(w.name, w.uid, w.attempt)
        namespace = workload_namespace(w)
        old = {
            attempt_object_name(w, (p.get("metadata") or {}).get("labels") or {})
            for p in view.pods.get(w.uid, {}).values()
            if still_runs(p) and in_namespace("Pod", p, namespace)
        } - {current, None}
        for name in sorted(old):
            enqueue_preempt_delete(w, name)
            asked += 1
    return asked


def objects_missing(workload: Workload) -> bool:
    """Whether the object that keeps the workload's pods coming is gone. A batch job's Job is in the
    tracker's view; a service's pods may be briefly absent while its Deployment replaces one, so its
    Deployment is asked for (one call, only for a service seen without pods on a full sync)."""
    if workload.kind == Kind.BATCH:
        return True
    if not workload.k8s_name:
        return False
    try:
        kube.apps().read_namespaced_deployment(
            workload.k8s_name, workload_namespace(workload), _request_timeout=kube.timeout()
        )
    except ApiException as exc:
        return exc.status == 404
    except Exception:
        return False  # the API server is unreachable: nothing is known, so nothing is concluded
    return False


def missing_objects_observation(workload: Workload) -> Observation:
    """A workload whose objects are gone ends FAILED, saying who deleted them: "outside the portal" only
    when the portal did not (its own deletions of a running workload's objects are on the timeline)."""
    from jobs.models import WorkloadEvent
    from jobs.services.cluster.object_creation import DELETED_BY_PORTAL

    what = "Job was" if workload.kind == Kind.BATCH else "Deployment was"
    by_portal = WorkloadEvent.objects.filter(workload_id=workload.id, reason=DELETED_BY_PORTAL)
    if workload.submitted_at:
        by_portal = by_portal.filter(at__gte=workload.submitted_at)
    if by_portal.exists():
        message = f"Its {what} deleted by the portal, so it cannot go on."
        return Observation(State.FAILED, DELETED_BY_PORTAL, message, None, timezone.now())
    return Observation(State.FAILED, "ObjectsMissing", f"Its {what} deleted outside the portal.", None, timezone.now())


def sync_workloads(view: ClusterView, uids: set[str] | None, *, full: bool, worth_loading: bool = False) -> int:
    """Apply the view to active workloads (all of them on a full sync); returns how many changed.
    `worth_loading`: the caller already kept only the `uids` that `view.worth_loading` keeps."""
    grace = timezone.now() - timedelta(seconds=max(10, settings.PORTAL_RESYNC_SECONDS))
    if uids is not None:
        if full:
            uids = set(filter(view.may_say_something, uids))
        elif not worth_loading:
            uids = view.worth_loading(uids)
        if not uids and not full:
            return 0
    # The burst's notifications go to the worker as one message after it (each still committed with its
    # transition): one publish per burst instead of one per finished workload.
    with dispatch.sends_gathered():
        return _sync_each(view, uids, full=full, grace=grace)


# A burst's changes are recorded this many workloads to a transaction: one commit (one WAL flush, one
# BEGIN and COMMIT) for them instead of one each, and their rows visible together a few milliseconds later.
# Should any of them fail, its chunk is rolled back whole and recorded again one workload at a time, each in
# its own transaction as before, so one bad workload never holds back the others.
CHUNK = 50


def _sync_each(view: ClusterView, uids: set[str] | None, *, full: bool, grace) -> int:
    # The GPU type too: a finished workload's notification names it. In id order: a chunk's transaction locks
    # its rows in the order other multi-row writers use, not the model's default (newest first).
    workloads = _load(_to_sync(view, uids, full=full, grace=grace))
    changed = 0
    for start in range(0, len(workloads), CHUNK):
        chunk = workloads[start : start + CHUNK]
        seen: list[tuple[Workload, Observation | None, bool]] = []
        try:
            with transaction.atomic(), transitions.moves_share_the_transaction():
                if connection.vendor == "postgresql":
                    changed += _sync_together(view, chunk, full=full, grace=grace, seen=seen)
                else:
                    changed += sum(
                        _sync_one(view, workload, full=full, grace=grace, alone=False, seen=seen) for workload in chunk
                    )
        except Exception as exc:
            log.warning(
                "%d workload(s) could not be recorded together (%s); recording them one at a time", len(chunk), exc
            )
            seen = []
            fresh = Workload.objects.filter(id__in=[w.id for w in chunk]).select_related("team", "gpu_type")
            changed += sum(
                _sync_one(view, workload, full=full, grace=grace, alone=True, seen=seen) for workload in fresh
            )
        for workload, obs, recorded in seen:  # committed: what the rows now say
            view.remember(workload, obs, recorded=recorded)
    return changed


def _sync_together(view: ClusterView, chunk: list[Workload], *, full: bool, grace, seen: list) -> int:
    """A chunk's workloads in the chunk's transaction, their moves and in-place updates sent together
    (`transitions.write_many`: one statement on PostgreSQL for the rows and the timeline entries of those
    that moved), then each written one's follow-ups (its in-memory object, the notification, the accounting,
    the admission request), as one at a time would. A workload that must be applied alone (a gang, a
    replacement pod, a failure that may be retried) is, in id order: what was planned before it is sent first,
    so the rows are still locked in id order."""
    planned: list[tuple[transitions.PlannedWrite, Observation]] = []
    changed = 0

    def send() -> int:
        written = transitions.write_many([plan for plan, _ in planned])
        for (plan, obs), moved in zip(planned, written, strict=True):
            if moved:
                plan.done()
            else:
                plan.missed()
            seen.append((plan.workload, obs, True))
        planned.clear()
        return sum(written)

    for workload in chunk:
        if workload.nodes > 1:  # a gang: all its ranks' objects make one state, recorded alone
            changed += send()
            changed += _sync_one(view, workload, full=full, grace=grace, alone=False, seen=seen)
            continue
        obs = _observe_one(view, workload, full=full, grace=grace)
        plan = None if obs is None else status_mapping.plan_observation(workload, obs)
        if plan is status_mapping.ALONE:
            changed += send()
            changed += int(apply_observation(workload, obs))
            seen.append((workload, obs, True))
        elif plan is None:
            seen.append((workload, obs, True))
        else:
            planned.append((plan, obs))
    return changed + send()


# A burst's rows with their team and GPU type, as fixed SQL (PostgreSQL): the ORM compiled the same
# three-table select anew for every burst, two thirds of the CPU of a burst of one workload, and under a busy
# cluster most bursts hold one or two. Table and column names from the models; every value is a parameter.
_LOAD_SQL = """
SELECT {workload}, {team}, {gpu_type} FROM {workload_table} w
JOIN {team_table} t ON t.{pk} = w.{team_id} JOIN {gpu_type_table} g ON g.{pk} = w.{gpu_type_id}
WHERE w.{key} = ANY(%s) AND w.{state} = ANY(%s) ORDER BY w.{pk}
"""


@functools.cache
def _load_sql(key: str) -> str:
    from jobs import sql as jobs_sql
    from jobs.models import GpuType, Team

    quote, field = connection.ops.quote_name, Workload._meta.get_field
    return _LOAD_SQL.format(
        workload=jobs_sql.select_list(Workload, "w"), team=jobs_sql.select_list(Team, "t"),
        gpu_type=jobs_sql.select_list(GpuType, "g"), workload_table=quote(Workload._meta.db_table),
        team_table=quote(Team._meta.db_table), gpu_type_table=quote(GpuType._meta.db_table), pk=quote("id"),
        team_id=quote(field("team").column), gpu_type_id=quote(field("gpu_type").column),
        key=quote(field(key).column), state=quote(field("state").column),
    )  # fmt: skip


def _load(wanted: tuple[str, list[Any]]) -> list[Workload]:
    """The active (not queued) workloads whose `key` ("uid" or "id") is among the values, with their team
    and GPU type, in id order (a chunk's transaction locks its rows in the order other multi-row writers use)."""
    key, values = wanted
    if not values:
        return []
    states = [state for state in State.active() if state != State.QUEUED]
    if connection.vendor != "postgresql":
        rows = Workload.objects.filter(**{f"{key}__in": values}, state__in=states)
        return list(rows.select_related("team", "gpu_type").order_by("id"))
    from jobs import sql as jobs_sql
    from jobs.models import GpuType, Team

    first, second = jobs_sql.width(Workload), jobs_sql.width(Workload) + jobs_sql.width(Team)
    with connection.cursor() as cursor:
        cursor.execute(_load_sql(key), [list(values), states])
        rows = cursor.fetchall()
    loaded = []
    for row in rows:
        workload = jobs_sql.instance(Workload, row[:first])
        Workload.team.field.set_cached_value(workload, jobs_sql.instance(Team, row[first:second]))
        Workload.gpu_type.field.set_cached_value(workload, jobs_sql.instance(GpuType, row[second:]))
        loaded.append(workload)
    return loaded


def _sync_one(
    view: ClusterView, workload: Workload, *, full: bool, grace, alone: bool, seen: list[tuple[Workload, Any, bool]]
) -> int:
    """Apply the view to one workload; `alone`, in a transaction of its own, where a failure is logged and
    counts as no change (else it is raised, for the caller's transaction to be redone). What was observed of
    a workload recorded without a failure goes to `seen`, for the view to remember once committed."""
    if workload.nodes > 1:
        moved = _sync_gang(view, workload, missing_since=grace if full else None, alone=alone)
        seen.append((workload, None, moved is not None))
        return int(bool(moved))
    obs = _observe_one(view, workload, full=full, grace=grace)
    if obs is None:
        seen.append((workload, None, True))
        return 0
    if not alone:
        changed = int(apply_observation(workload, obs))
        seen.append((workload, obs, True))
        return changed
    try:
        changed = int(apply_observation(workload, obs))
    except Exception:
        log.exception("workload %s: could not apply observation", workload.uid)
        seen.append((workload, None, False))
        return 0
    seen.append((workload, obs, True))
    return changed


def _observe_one(view: ClusterView, workload: Workload, *, full: bool, grace: datetime) -> Observation | None:
    """What the view says of one workload; on a full sync, a workload placed a while ago whose objects are
    gone says so."""
    job, pods = view.objects_for(workload)
    obs = observe(kind=workload.kind, job=job, pods=pods)
    if obs is not None or not full or job is not None or pods:
        return obs
    if _placed_before(workload.state, workload.submitted_at, grace) and objects_missing(workload):
        return missing_objects_observation(workload)
    return None


def _sync_gang(view: ClusterView, workload: Workload, *, missing_since=None, alone: bool = True) -> bool | None:
    """A gang job: all its ranks' Jobs and pods (its own namespace only) make one state. On a full sync
    (`missing_since`), one made before then with nothing left in the cluster ends FAILED, as a job does.
    Whether it changed; None when it could not be recorded (`alone`: logged)."""
    jobs, pods = view.in_own_namespace(workload)
    try:
        if (
            missing_since is not None
            and not (jobs or pods)
            and _placed_before(workload.state, workload.submitted_at, missing_since)
        ):
            return apply_observation(workload, missing_objects_observation(workload))
        return sync_gang(workload, jobs, pods)
    except Exception:
        if not alone:
            raise
        log.exception("gang %s: could not apply its ranks", workload.uid)
        return None


def _to_sync(view: ClusterView, uids: set[str] | None, *, full: bool, grace) -> tuple[str, list[Any]]:
    """The active workloads worth loading, as ("uid" or "id", values): those whose objects may say something,
    and on a full sync those whose objects may be missing. Read first as a few columns each on a full sync (a
    drained queue is thousands of workloads whose Jobs have no pod yet: nothing to load, nothing to conclude;
    a resync that finds every workload as its objects say loads none)."""
    if not full and uids is not None:
        return "uid", sorted(uids)
    active = Workload.objects.filter(state__in=State.active()).exclude(state=State.QUEUED)
    if uids is not None:
        active = active.filter(uid__in=uids)
    columns = ("id", "uid", "name", "kind", "nodes", "state", "reason", "message", "attempt", "namespace",
               "submitted_at", "started_at", "node_name", "pod_name", "pod_uid")  # fmt: skip
    wanted = [
        row.id
        for row in active.values_list(*columns, named=True)
        if (view.may_say_something(row.uid) and _may_change(view, row))
        or (
            _placed_before(row.state, row.submitted_at, grace)
            and not (row.namespace and not row.attempt and view.holds_own_job(row.uid, row.namespace))
        )
    ]
    return "id", wanted


def _may_change(view: ClusterView, row) -> bool:
    """Whether the view could change this workload, judged from its row's columns: a full sync loads only
    those (a resync that finds every running workload as its objects say loads none of them). A gang, a
    workload without its own namespace recorded, or one with no objects left are always loaded."""
    if row.nodes > 1 or not row.namespace:
        return True
    job, pods = view.objects_for(row)
    if job is None and not pods:
        return True
    obs = observe(kind=row.kind, job=job, pods=pods)
    return obs is not None and would_change(row, obs)


# A burst's notifications (the fan-out of its ends' events, committed with them) are handed to the worker at
# most this long after it: under a busy cluster a burst holds one or two ends, and one publish a second
# instead of one a burst is a large share of the tracker's CPU per workload. Within the notification
# sweep's grace (5 s), so the sweep never takes them for lost.
SEND_HELD_SECONDS = 1.0


# The connection is checked (Django's health check, on the socket: portal/postgresql; and CONN_MAX_AGE) before a
# burst at most this often: under a busy cluster bursts come every few tens of milliseconds. A connection
# lost in between fails the next burst's load, and the loop relists (and reconnects) as on any failure.
CONNECTION_CHECK_SECONDS = 1.0
_checked_at = [float("-inf")]


def record_burst(view: ClusterView, dirty: set[str], *, worth_loading: bool = False) -> int:
    """What the watches changed in one batch window, recorded; returns how many workloads changed. A burst
    in which no workload's objects say anything new touches neither the database nor the broker.
    `worth_loading`: the caller already kept only those `view.worth_loading` keeps (it is not asked again)."""
    if not worth_loading:
        dirty = view.worth_loading(dirty)
    if not dirty:
        return 0
    if time.monotonic() - _checked_at[0] >= CONNECTION_CHECK_SECONDS:
        close_old_connections()
        _checked_at[0] = time.monotonic()
    return sync_workloads(view, dirty, full=False, worth_loading=True)


# The burst window: how long the loop gathers watch events after a burst's first before recording them. A
# burst's round trips to PostgreSQL cost the same for one workload or ten, so while the stream is busy (the
# last burst held BUSY_BURST_EVENTS events or more, and the next was already waiting) the window widens,
# doubling per burst up to BURST_WINDOW_BUSY_SECONDS, and a burst holds more workloads; a small burst or a
# pause brings it back to BURST_WINDOW_SECONDS, so a quiet cluster's workloads are recorded as soon as before.
# (A wide window is not ended early by a pause: the cluster's events come in clumps a few tens of
# milliseconds apart, so a burst that ended at a 50 ms pause held no more than a 50 ms one.)
BURST_WINDOW_SECONDS = 0.05
BURST_WINDOW_BUSY_SECONDS = 0.2
BUSY_BURST_EVENTS = 8


def next_burst_window(
    last: float, *, events: int, waited: float, quiet: float, busiest: float, busy_events: int = BUSY_BURST_EVENTS
) -> float:
    """The window of the next burst (pure), after one that gathered `events` watch events over `last` seconds
    and a wait of `waited` seconds for the next burst's first event: a quiet stream (a pause of `quiet` or
    more, or a burst of fewer than `busy_events`) gets `quiet`; a busy one twice `last`, never more than
    `busiest`."""
    if waited >= quiet or events < busy_events:
        return quiet
    return min(busiest, max(quiet, last * 2))


def settle_heap() -> int:
    """Take what the process holds once started (Django, the models, the Kubernetes and Celery clients, the
    view of the first list) out of the garbage collector's full passes (`gc.freeze`); returns how many
    objects that is. A full pass otherwise walks all of them (~170,000 objects, 50-150 ms of CPU on a busy
    machine) every few hundred workloads, though none of them ever becomes garbage; the young objects of the
    bursts and watch events are collected as before. Frozen objects are still freed when no longer referenced
    (the view's objects as newer ones replace them); only a cycle among them would stay."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class Tracker:
    """The long-running loop behind `manage.py track`."""

    def __init__(
        self, *, batch_seconds: float = BURST_WINDOW_SECONDS, busy_batch_seconds: float = BURST_WINDOW_BUSY_SECONDS
    ) -> None:
        # (generation, kind, event type, object, whether the object is already its essentials)
        self.events: queue.Queue[tuple[int, str, str, dict[str, Any] | None, bool]] = queue.Queue()
        self.stop_event = threading.Event()
        self.batch_seconds = batch_seconds
        self.busy_batch_seconds = max(batch_seconds, busy_batch_seconds)
        self.window = batch_seconds
        self.last_burst_events = 0
        self.view = ClusterView()
        self._watchers: list[threading.Thread] = []
        self.relist_needed = threading.Event()
        # Watches of an earlier list may still deliver a few events; they are older than the new list
        # and must not overwrite it, so each event carries the generation of the list it belongs to.
        self.generation = 0
        # What the watches delivered since the last resync, for one log line per resync: events by kind, type
        # and whether they changed what the tracker reads, and the bursts they made.
        self.tally: Counter[tuple[str, str, bool]] = Counter()
        self.bursts = self.loaded = 0
        self.gathered_seconds = 0.0
        self.heap_settled = False

    def _watch(self, kind: str, resource_version: str, generation: int) -> str | None:
        """Stream changes for one kind into the queue until told to stop or the stream ends. Returns the
        resourceVersion to watch on from when the API server ended the stream itself (it does every
        timeoutSeconds), None when a relist is needed (an ERROR event such as 410 Gone, a broken stream)."""
        path = "/apis/batch/v1/jobs" if kind == "Job" else "/api/v1/pods"
        version = resource_version
        try:
            response = kube.stream_get(
                path,
                {
                    "watch": "true",
                    "labelSelector": selector(),
                    "resourceVersion": resource_version,
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": str(max(30, settings.PORTAL_RESYNC_SECONDS)),
                },
                read_timeout=max(60, settings.PORTAL_RESYNC_SECONDS * 2),
            )
            buffer = b""
            for chunk in response.stream(amt=65536, decode_content=False):
                if self.stop_event.is_set() or generation != self.generation:
                    break
                # Every whole line of what arrived at once; the last, unfinished one waits for the next chunk.
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    # The object as its essentials, read without building the rest (watch_events.read_event).
                    kind_event, obj, object_version, kept = read_event(kind, line)
                    if kind_event == "ERROR":
                        self.relist_needed.set()  # e.g. 410 Gone: our resourceVersion is too old
                        return None
                    version = object_version or version
                    if kind_event == "BOOKMARK":
                        continue
                    self.events.put((generation, kind, kind_event, obj, kept))
            response.release_conn()
            return version
        except Exception as exc:
            if not self.stop_event.is_set():
                log.warning("%s watch ended: %s", kind, kube.classify(exc).message)
            if generation == self.generation:
                self.relist_needed.set()
            return None

    def _follow(self, kind: str, resource_version: str, generation: int) -> None:
        """One kind's watch thread: each stream the API server ends is followed by the next, from the last
        version seen (bookmarks keep it fresh), until a relist is needed or the tracker stops. A relist of
        every object is only for a broken watch: it is what costs (10,000 Jobs are 30 MB to encode, send
        and decode), and a watch that goes on from where it was misses nothing."""
        version: str | None = resource_version
        name_os_thread(f"watch-{kind}")
        while version is not None and not self.stop_event.is_set() and generation == self.generation:
            began = time.monotonic()
            version = self._watch(kind, version, generation)
            if time.monotonic() - began < 1.0:
                self.stop_event.wait(1.0)  # a stream ended at once: not a tight loop of them

    def _start_watches(self, versions: dict[str, str]) -> None:
        self._watchers = [
            threading.Thread(target=self._follow, args=(kind, rv, self.generation), name=f"watch-{kind}", daemon=True)
            for kind, rv in versions.items()
        ]
        for thread in self._watchers:
            thread.start()

    def relist(self) -> None:
        self.generation += 1
        versions: dict[str, str] = {}
        fresh = ClusterView()
        for kind in ("Job", "Pod"):
            items, versions[kind], kept = _list(kind)
            for obj in items:
                fresh.put(kind, obj, kept=kept)
        fresh.listed_at = time.monotonic()
        self.view = fresh
        # Drain events that predate the new list; the watches restart from the list's versions.
        self.relist_needed.clear()
        sync_workloads(self.view, None, full=True)
        reap_finished(self.view)
        self._start_watches(versions)

    def run(self, *, max_seconds: float | None = None) -> None:
        started = time.monotonic()
        backoff = 1.0
        while not self.stop_event.is_set():
            if max_seconds is not None and time.monotonic() - started > max_seconds:
                break
            try:
                close_old_connections()
                self.relist()
                if not self.heap_settled:  # once, with the process started and its first view built
                    settle_heap()
                    self.heap_settled = True
                backoff = 1.0
                self._stream_until_relist(started, max_seconds)
            except Exception as exc:
                failure = kube.classify(exc)
                log.warning("tracker: %s; retrying in %.0fs", failure.message, backoff)
                self.stop_event.wait(backoff)
                backoff = min(30.0, backoff * 2)
            finally:
                self._stop_watches()

    def resync(self) -> None:
        """The periodic safety net, from the view the watches keep: every active workload against its
        objects (what the database changed meanwhile, objects deleted outside the portal), and pods that
        outlived their workload."""
        self._log_tally()
        close_old_connections()
        sync_workloads(self.view, None, full=True)
        reap_finished(self.view)

    def _log_tally(self) -> None:
        """One line per resync of what the watches delivered meanwhile (nothing when they delivered nothing)."""
        if not self.tally:
            return
        events = sum(self.tally.values())
        kinds = ", ".join(
            f"{kind} {event} {count}" + (" (changed nothing)" if not changed else "")
            for (kind, event, changed), count in sorted(self.tally.items())
        )
        log.info(
            "tracker: %d watch events (%s) in %d bursts (gathered over %.0f ms each on average), %d of them with"
            " something new to record, since the last resync",
            events, kinds, self.bursts, self.gathered_seconds / max(1, self.bursts) * 1000, self.loaded,
        )  # fmt: skip
        self.tally.clear()
        self.bursts = self.loaded = 0
        self.gathered_seconds = 0.0

    def _stream_until_relist(self, started: float, max_seconds: float | None) -> None:
        with dispatch.gathered_ids_held():
            self._record_until_relist(started, max_seconds)

    def _record_until_relist(self, started: float, max_seconds: float | None) -> None:
        next_resync = time.monotonic() + settings.PORTAL_RESYNC_SECONDS
        next_send = time.monotonic() + SEND_HELD_SECONDS
        while not self.stop_event.is_set():
            if time.monotonic() >= next_send:
                dispatch.send_held()
                next_send = time.monotonic() + SEND_HELD_SECONDS
            if max_seconds is not None and time.monotonic() - started > max_seconds:
                return
            if self.relist_needed.is_set():
                return
            if time.monotonic() >= next_resync:
                self.resync()
                next_resync = time.monotonic() + settings.PORTAL_RESYNC_SECONDS
            dirty: set[str] = set()
            waiting_since = time.monotonic()
            try:
                generation, kind, kind_event, obj, kept = self.events.get(timeout=min(0.5, SEND_HELD_SECONDS))
            except queue.Empty:
                self.window, self.last_burst_events = self.batch_seconds, 0
                dispatch.send_held()  # quiet: nothing waits for company
                continue
            began = time.monotonic()
            self.window = next_burst_window(
                self.window, events=self.last_burst_events, waited=began - waiting_since,
                quiet=self.batch_seconds, busiest=self.busy_batch_seconds,
            )  # fmt: skip
            self.last_burst_events = 0
            deadline = began + self.window
            while True:
                self.last_burst_events += 1
                if generation == self.generation:
                    uid = self.view.put(kind, obj or {}, deleted=kind_event == "DELETED", if_changed=True, kept=kept)
                    self.tally[kind, kind_event, bool(uid)] += 1
                    if uid:
                        dirty.add(uid)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    generation, kind, kind_event, obj, kept = self.events.get(timeout=remaining)
                except queue.Empty:
                    break
            self.bursts += 1
            self.gathered_seconds += time.monotonic() - began
            dirty = self.view.worth_loading(dirty)
            if dirty:
                self.loaded += 1
                record_burst(self.view, dirty, worth_loading=True)

    def _stop_watches(self) -> None:
        # Watches end on their own at timeoutSeconds; we only drop our references and drain the queue.
        self._watchers = []
        while not self.events.empty():
            try:
                self.events.get_nowait()
            except queue.Empty:
                break

    def stop(self) -> None:
        self.stop_event.set()
