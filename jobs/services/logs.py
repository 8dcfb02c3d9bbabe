"""A workload's container logs and Kubernetes events, read through the API server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils.dateparse import parse_datetime
from kubernetes.client.exceptions import ApiException

from jobs.kube import client as kube
from jobs.kube import names
from jobs.kube.objects import CONTAINER_NAME
from jobs.models import Workload

MAX_TAIL = 10_000


class LogsUnavailable(Exception):
    """There is no container to read logs from (not started yet, or cleaned up); the message says which."""


def _pod_name(workload: Workload) -> str:
    if workload.pod_name:
        return workload.pod_name
    if not workload.namespace:
        raise LogsUnavailable("The workload has not been started yet.")
    pods = json.loads(
        kube.core()
        .list_namespaced_pod(
            workload.namespace,
            label_selector=f"{names.LABEL_WORKLOAD}={workload.uid}",
            _preload_content=False,
            _request_timeout=kube.timeout(),
        )
        .data
    ).get("items")
    if not pods:
        raise LogsUnavailable("No container has been started for this workload yet.")
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))["metadata"]["name"]


def workload_logs(workload: Workload, *, tail: int = 200, since_seconds: int | None = None) -> str:
    """The last `tail` lines of the workload's container log."""
    pod = _pod_name(workload)
    try:
        return kube.core().read_namespaced_pod_log(
            pod,
            workload.namespace,
            container=CONTAINER_NAME,
            tail_lines=max(1, min(tail, MAX_TAIL)),
            since_seconds=since_seconds,
            _request_timeout=kube.timeout(),
        )
    except ApiException as exc:
        if exc.status in (400, 404):
            raise LogsUnavailable(_unavailable_message(exc)) from exc
        raise


def follow_logs(workload: Workload, *, tail: int = 50, timeout_seconds: int = 3600) -> Iterator[str]:
    """Stream log lines as the container writes them, until it ends or the timeout passes."""
    pod = _pod_name(workload)
    try:
        response = kube.core().read_namespaced_pod_log(
            pod,
            workload.namespace,
            container=CONTAINER_NAME,
            follow=True,
            tail_lines=max(0, min(tail, MAX_TAIL)),
            _preload_content=False,
            _request_timeout=(kube.timeout(), timeout_seconds),
        )
    except ApiException as exc:
        if exc.status in (400, 404):
            raise LogsUnavailable(_unavailable_message(exc)) from exc
        raise
    try:
        pending = b""
        for chunk in response.stream(amt=4096, decode_content=False):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")
    finally:
        response.release_conn()


def _unavailable_message(exc: ApiException) -> str:
    message = kube.classify(exc).message
    if "ContainerCreating" in message or "waiting to start" in message:
        return "The container has not started yet."
    if exc.status == 404:
        return "The container is gone (its Kubernetes objects were cleaned up)."
    return message


@dataclass(frozen=True)
class KubeEvent:
    at: datetime | None
    type: str
    reason: str
    message: str
    object: str
    count: int


def workload_events(workload: Workload) -> list[KubeEvent]:
    """Kubernetes events about the workload's Job/Deployment, its ReplicaSet and pods (one list call)."""
    if not workload.namespace or not workload.k8s_name:
        return []
    try:
        items = json.loads(
            kube.core()
            .list_namespaced_event(workload.namespace, _preload_content=False, _request_timeout=kube.timeout())
            .data
        ).get("items", [])
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise
    prefix = workload.k8s_name
    events = []
    for item in items:
        involved = item.get("involvedObject") or {}
        name = involved.get("name") or ""
        if not name.startswith(prefix):
            continue
        stamp = (
            item.get("lastTimestamp") or item.get("eventTime") or (item.get("metadata") or {}).get("creationTimestamp")
        )
        events.append(
            KubeEvent(
                at=parse_datetime(stamp) if stamp else None,
                type=item.get("type") or "Normal",
                reason=item.get("reason") or "",
                message=item.get("message") or "",
                object=f"{involved.get('kind', '')}/{name}",
                count=item.get("count") or 1,
            )
        )
    return sorted(events, key=lambda e: e.at or datetime.min.replace(tzinfo=UTC))
