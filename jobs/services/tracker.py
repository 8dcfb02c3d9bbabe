"""The tracker: keeps workload states in step with the cluster.

One full list of pods and Jobs (two API calls, whatever the number of workloads) seeds a local cache;
one watch stream per kind then streams changes. Changed workloads are written in small batches, so a
pod's phase change reaches the database within a fraction of a second. A full relist runs every
PORTAL_RESYNC_SECONDS and whenever a watch breaks, so a missed event is caught up, not lost.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from jobs.kube import client as kube
from jobs.kube import names
from jobs.models import State, Workload
from jobs.services.tracking import apply_observation, observe

log = logging.getLogger(__name__)


def selector() -> str:
    return f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY},{names.LABEL_INSTANCE}={names.label_value(settings.PORTAL_INSTANCE)}"


@dataclass
class ClusterView:
    """The latest Job and Pods per workload uid, as raw JSON dicts."""

    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, dict[str, Any]]] = field(default_factory=lambda: defaultdict(dict))
    listed_at: float = 0.0

    def put(self, kind: str, obj: dict[str, Any], deleted: bool = False) -> str | None:
        meta = obj.get("metadata") or {}
        uid = (meta.get("labels") or {}).get(names.LABEL_WORKLOAD)
        if not uid:
            return None
        if kind == "Job":
            # A requeued batch job's old Job (another name, being deleted) must not hide its new one.
            current = (self.jobs.get(uid) or {}).get("metadata") or {}
            replaced = current and current.get("name") != meta.get("name")
            if deleted:
                if not replaced:
                    self.jobs.pop(uid, None)
            elif not (replaced and meta.get("deletionTimestamp")):
                self.jobs[uid] = obj
        elif deleted:
            self.pods[uid].pop(meta.get("name"), None)
        else:
            self.pods[uid][meta.get("name")] = obj
        return uid


def _list(kind: str) -> tuple[list[dict[str, Any]], str]:
    if kind == "Job":
        response = kube.batch().list_job_for_all_namespaces(
            label_selector=selector(), _preload_content=False, _request_timeout=kube.timeout() * 4
        )
    else:
        response = kube.core().list_pod_for_all_namespaces(
            label_selector=selector(), _preload_content=False, _request_timeout=kube.timeout() * 4
        )
    body = json.loads(response.data)
    return body.get("items") or [], body["metadata"]["resourceVersion"]


def reap_finished(view: ClusterView) -> int:
    """Finished workloads whose pods still run (a delete request lost with the broker, say): ask again.

    Their GPUs were already returned to the quota, so the cluster must let go of them too.
    """
    from jobs.services.dispatch import enqueue_delete

    running = {
        uid
        for uid, pods in view.pods.items()
        if any(not (p.get("metadata") or {}).get("deletionTimestamp") for p in pods.values())
    }
    if not running:
        return 0
    stale = list(
        Workload.objects.filter(
            uid__in=running, state__in=(State.CANCELLED, State.FAILED, State.PREEMPTED)
        ).values_list("id", flat=True)
    )
    for workload_id in stale:
        enqueue_delete(workload_id)
    return len(stale)


def sync_workloads(view: ClusterView, uids: set[str] | None, *, full: bool) -> int:
    """Apply the view to active workloads (all of them on a full sync); returns how many changed."""
    active = Workload.objects.filter(state__in=State.active()).exclude(state=State.QUEUED)
    if uids is not None:
        active = active.filter(uid__in=uids)
    changed = 0
    grace = timezone.now() - timedelta(seconds=max(10, settings.PORTAL_RESYNC_SECONDS))
    for workload in active.select_related("team"):
        pods = list(view.pods.get(workload.uid, {}).values())
        job = view.jobs.get(workload.uid)
        if workload.attempt:
            # Requeued after preemption: only this attempt's Job and pods say anything about it.
            name = names.attempt_name(workload.name, workload.uid, workload.attempt)
            if job is not None and (job.get("metadata") or {}).get("name") != name:
                job = None
            pods = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get("job-name") == name]
        obs = observe(kind=workload.kind, job=job, pods=pods)
        if obs is None:
            if (
                full
                and workload.state in (State.PENDING, State.RUNNING)
                and job is None
                and not pods
                and workload.kind == "batch"
                and workload.submitted_at
                and workload.submitted_at < grace
            ):
                from jobs.services.tracking import Observation

                obs = Observation(
                    State.FAILED, "ObjectsMissing", "Its Job was deleted outside the portal.", None, timezone.now()
                )
            else:
                continue
        try:
            changed += apply_observation(workload, obs)
        except Exception:
            log.exception("workload %s: could not apply observation", workload.uid)
    return changed


class Tracker:
    """The long-running loop behind `manage.py track`."""

    def __init__(self, *, batch_seconds: float = 0.05) -> None:
        self.events: queue.Queue[tuple[int, str, str, dict[str, Any] | None]] = queue.Queue()
        self.stop_event = threading.Event()
        self.batch_seconds = batch_seconds
        self.view = ClusterView()
        self._watchers: list[threading.Thread] = []
        self.relist_needed = threading.Event()
        # Watches of an earlier list may still deliver a few events; they are older than the new list
        # and must not overwrite it, so each event carries the generation of the list it belongs to.
        self.generation = 0

    def _watch(self, kind: str, resource_version: str, generation: int) -> None:
        """Stream changes for one kind into the queue until told to stop or the stream breaks."""
        path = "/apis/batch/v1/jobs" if kind == "Job" else "/api/v1/pods"
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
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        self.relist_needed.set()  # e.g. 410 Gone: our resourceVersion is too old
                        return
                    if event.get("type") == "BOOKMARK":
                        continue
                    self.events.put((generation, kind, event.get("type"), event.get("object")))
            response.release_conn()
        except Exception as exc:
            if not self.stop_event.is_set():
                log.warning("%s watch ended: %s", kind, kube.classify(exc).message)
        finally:
            if generation == self.generation:
                self.relist_needed.set()

    def _start_watches(self, versions: dict[str, str]) -> None:
        self._watchers = [
            threading.Thread(target=self._watch, args=(kind, rv, self.generation), name=f"watch-{kind}", daemon=True)
            for kind, rv in versions.items()
        ]
        for thread in self._watchers:
            thread.start()

    def relist(self) -> None:
        self.generation += 1
        versions: dict[str, str] = {}
        fresh = ClusterView()
        for kind in ("Job", "Pod"):
            items, versions[kind] = _list(kind)
            for obj in items:
                fresh.put(kind, obj)
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
                backoff = 1.0
                self._stream_until_relist(started, max_seconds)
            except Exception as exc:
                failure = kube.classify(exc)
                log.warning("tracker: %s; retrying in %.0fs", failure.message, backoff)
                self.stop_event.wait(backoff)
                backoff = min(30.0, backoff * 2)
            finally:
                self._stop_watches()

    def _stream_until_relist(self, started: float, max_seconds: float | None) -> None:
        next_resync = time.monotonic() + settings.PORTAL_RESYNC_SECONDS
        while not self.stop_event.is_set():
            if max_seconds is not None and time.monotonic() - started > max_seconds:
                return
            if self.relist_needed.is_set() or time.monotonic() >= next_resync:
                return
            dirty: set[str] = set()
            try:
                generation, kind, kind_event, obj = self.events.get(timeout=0.5)
            except queue.Empty:
                continue
            deadline = time.monotonic() + self.batch_seconds
            while True:
                if generation == self.generation:
                    uid = self.view.put(kind, obj or {}, deleted=kind_event == "DELETED")
                    if uid:
                        dirty.add(uid)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    generation, kind, kind_event, obj = self.events.get(timeout=remaining)
                except queue.Empty:
                    break
            close_old_connections()
            sync_workloads(self.view, dirty, full=False)

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
