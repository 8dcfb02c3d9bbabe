"""A workload's container logs and Kubernetes events, read through the API server."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.utils.dateparse import parse_datetime
from kubernetes.client.exceptions import ApiException

from jobs.kube import client as kube
from jobs.kube import names
from jobs.kube.objects import CONTAINER_NAME
from jobs.models import GangRank, Workload

log = logging.getLogger(__name__)

MAX_TAIL = 10_000


class LogsUnavailable(Exception):
    """There is no container to read logs from (not started yet, or cleaned up); the message says which."""


def _pod_name(workload: Workload, rank: int | None = None) -> str:
    if workload.nodes > 1:
        return _rank_pod_name(workload, rank or 0)
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


def _rank_pod_name(workload: Workload, rank: int) -> str:
    """One rank's pod of a gang job's current attempt: as the tracker recorded it, else asked for by label."""
    known = (
        GangRank.objects.filter(workload=workload, attempt=workload.attempt, rank=rank)
        .exclude(pod_name="")
        .values_list("pod_name", flat=True)
        .first()
    )
    if known:
        return known
    if not workload.namespace:
        raise LogsUnavailable("The workload has not been started yet.")
    selector = f"{names.LABEL_GANG}={names.gang_label(workload.uid, workload.attempt)},{names.LABEL_RANK}={rank}"
    pods = json.loads(
        kube.core()
        .list_namespaced_pod(
            workload.namespace, label_selector=selector, _preload_content=False, _request_timeout=kube.timeout()
        )
        .data
    ).get("items")
    if not pods:
        raise LogsUnavailable(f"No container has been started for rank {rank} yet.")
    return max(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))["metadata"]["name"]


CUT_MARK = " … [line cut at {n} characters]"


def shown_line(raw: str, *, max_chars: int | None = None) -> str:
    """A log line as a terminal would have left it: a carriage return (progress bars) moves back to the
    start, so only the text after the last one shows; a line longer than the cap is cut, and says so."""
    max_chars = max_chars or settings.LOG_MAX_LINE_CHARS
    line = raw.rstrip("\r").rsplit("\r", 1)[-1]
    if len(line) > max_chars:
        return line[:max_chars] + CUT_MARK.format(n=max_chars)
    return line


def shown_text(text: str | None) -> str:
    # The Kubernetes client hands an empty log (a container that has printed nothing yet) back as None.
    return "\n".join(shown_line(line) for line in (text or "").split("\n"))


def workload_logs(
    workload: Workload, *, tail: int = 200, since_seconds: int | None = None, rank: int | None = None
) -> str:
    """The last `tail` lines of the workload's container log (at most LOG_MAX_BYTES of them); a gang
    job's `rank` (rank 0 when not given)."""
    pod = _pod_name(workload, rank)
    try:
        text = kube.core().read_namespaced_pod_log(
            pod,
            workload.namespace,
            container=CONTAINER_NAME,
            tail_lines=max(1, min(tail, MAX_TAIL)),
            since_seconds=since_seconds,
            # The API server stops reading at this many bytes: a log of one endless line (or huge lines)
            # never has to be held whole in the web process.
            limit_bytes=settings.LOG_MAX_BYTES,
            _request_timeout=kube.timeout(),
        )
        return shown_text(text)
    except ApiException as exc:
        if exc.status in (400, 404):
            raise LogsUnavailable(_unavailable_message(exc)) from exc
        raise


def split_stream(chunks: Iterable[bytes], *, max_chars: int, deadline: float | None = None) -> Iterator[str]:
    """Lines out of a byte stream, holding at most about `max_chars` bytes however the stream is shaped:
    a carriage return drops what it overwrites, and an endless line is cut and the rest of it skipped.
    Stops at `deadline` (time.monotonic()) when a chunk arrives after it."""
    pending = b""
    skipping = False  # inside a line already cut
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if skipping:
                skipping = False
                continue
            yield shown_line(line.decode("utf-8", "replace"), max_chars=max_chars)
        if b"\r" in pending:
            pending = pending.rsplit(b"\r", 1)[-1]
        if len(pending) > max_chars * 4:  # bytes: up to 4 per character
            if not skipping:
                yield shown_line(pending.decode("utf-8", "replace"), max_chars=max_chars)
            skipping, pending = True, b""
        if deadline is not None and time.monotonic() >= deadline:
            return
    if pending and not skipping:
        yield shown_line(pending.decode("utf-8", "replace"), max_chars=max_chars)


def follow_logs(
    workload: Workload,
    *,
    tail: int = 50,
    since_seconds: int | None = None,
    timeout_seconds: int = 3600,
    rank: int | None = None,
) -> Iterator[str]:
    """Stream log lines as the container writes them (from the last `tail` lines, or those of the last
    `since_seconds`), until it ends or `timeout_seconds` have passed in all (a deadline for the whole
    stream, not only between reads), and at most LOG_MAX_FOLLOW_BYTES."""
    pod = _pod_name(workload, rank)
    deadline = time.monotonic() + timeout_seconds
    try:
        response = kube.core().read_namespaced_pod_log(
            pod,
            workload.namespace,
            container=CONTAINER_NAME,
            follow=True,
            tail_lines=max(0, min(tail, MAX_TAIL)),
            since_seconds=since_seconds,
            limit_bytes=settings.LOG_MAX_FOLLOW_BYTES,
            _preload_content=False,
            _request_timeout=(kube.timeout(), timeout_seconds),
        )
    except ApiException as exc:
        if exc.status in (400, 404):
            raise LogsUnavailable(_unavailable_message(exc)) from exc
        raise
    try:
        yield from split_stream(
            response.stream(amt=4096, decode_content=False), max_chars=settings.LOG_MAX_LINE_CHARS, deadline=deadline
        )
    finally:
        response.release_conn()


def _unavailable_message(exc: ApiException) -> str:
    message = kube.classify(exc).message
    if "ContainerCreating" in message or "waiting to start" in message:
        return "The container has not started yet."
    if exc.status == 404:
        return "The container is gone (its Kubernetes objects were cleaned up)."
    log.warning("logs unavailable: Kubernetes answered %s: %s", exc.status, message)
    if exc.status == 400:  # the API server's way of saying the container cannot give logs now
        return "The container is not running (not yet, or no longer)."
    return f"{kube.user_words(exc)}."


@dataclass(frozen=True)
class KubeEvent:
    at: datetime | None
    type: str
    reason: str
    message: str
    object: str
    count: int


def _namespace_events(namespace: str) -> list[dict]:
    """The namespace's events as raw JSON (none when the namespace is gone)."""
    try:
        return json.loads(
            kube.core().list_namespaced_event(namespace, _preload_content=False, _request_timeout=kube.timeout()).data
        ).get("items", [])
    except ApiException as exc:
        if exc.status == 404:
            return []
        raise


def _kube_event(item: dict, involved: dict, name: str) -> KubeEvent:
    stamp = item.get("lastTimestamp") or item.get("eventTime") or (item.get("metadata") or {}).get("creationTimestamp")
    return KubeEvent(
        at=parse_datetime(stamp) if stamp else None,
        type=item.get("type") or "Normal",
        reason=item.get("reason") or "",
        message=item.get("message") or "",
        object=f"{involved.get('kind', '')}/{name}",
        count=item.get("count") or 1,
    )


def workload_events(workload: Workload, *, rank: int | None = None) -> list[KubeEvent]:
    """Kubernetes events about the workload's Job/Deployment, its ReplicaSet and pods (one list call);
    a gang job's one `rank` when given."""
    if not workload.namespace or not workload.k8s_name:
        return []
    items = _namespace_events(workload.namespace)
    prefix = workload.k8s_name
    if rank is not None and workload.nodes > 1:
        prefix = names.rank_name(workload.name, workload.uid, workload.attempt, rank)
    events = []
    for item in items:
        involved = item.get("involvedObject") or {}
        name = involved.get("name") or ""
        if name.startswith(prefix):
            events.append(_kube_event(item, involved, name))
    return sorted(events, key=lambda e: e.at or datetime.min.replace(tzinfo=UTC))
