"""The portal's picture of the cluster's GPU nodes: two list calls (nodes, running pods) per sync."""

from __future__ import annotations

import json
from collections import defaultdict

from django.db import transaction
from django.utils import timezone

from jobs.kube import client as kube
from jobs.models import GpuNode, GpuType

CUDA_MAJOR = "nvidia.com/cuda.driver.major"
CUDA_MINOR = "nvidia.com/cuda.driver.minor"


def _quantity(value: str | int | None) -> int:
    if value is None:
        return 0
    try:
        return int(str(value))
    except ValueError:
        return 0


def inventory_sync() -> int:
    """Refresh GpuNode rows from the cluster; returns the number of GPU nodes seen."""
    types = list(GpuType.objects.all())
    resources = {t.resource_name for t in types} or {"nvidia.com/gpu"}
    nodes = json.loads(kube.core().list_node(_preload_content=False, _request_timeout=kube.timeout() * 2).data)
    pods = json.loads(
        kube.core()
        .list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
            _preload_content=False,
            _request_timeout=kube.timeout() * 4,
        )
        .data
    )
    in_use: dict[str, int] = defaultdict(int)
    for pod in pods.get("items") or []:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        for container in (pod.get("spec") or {}).get("containers") or []:
            requested = (container.get("resources") or {}).get("requests") or {}
            limits = (container.get("resources") or {}).get("limits") or {}
            for resource in resources:
                in_use[node] += _quantity(requested.get(resource, limits.get(resource)))
    now = timezone.now()
    seen: list[str] = []
    with transaction.atomic():
        # The types again, as they are now: the cluster calls above take time, and a node must not be
        # written with the type list read before them (a type added or re-created meanwhile would be lost
        # until the next sync, and its nodes would look missing to the intake).
        types = list(GpuType.objects.all())
        for node in nodes.get("items") or []:
            meta, status, spec = node["metadata"], node.get("status") or {}, node.get("spec") or {}
            labels = meta.get("labels") or {}
            capacity = sum(_quantity((status.get("capacity") or {}).get(r)) for r in resources)
            if capacity == 0:
                continue
            allocatable = sum(_quantity((status.get("allocatable") or {}).get(r)) for r in resources)
            gpu_type = next((t for t in types if labels.get(t.node_label_key) == t.node_label_value), None)
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            defaults = {
                "gpu_type": gpu_type,
                "gpus_capacity": capacity,
                "gpus_allocatable": allocatable,
                "gpus_in_use": in_use.get(meta["name"], 0),
                "ready": ready,
                "schedulable": not spec.get("unschedulable", False),
                "labels": labels,
                "last_seen_at": now,
            }
            # GPU Feature Discovery's labels, when present; otherwise keep what the node agent reported.
            if CUDA_MAJOR in labels:
                defaults["cuda_driver_version"] = f"{labels[CUDA_MAJOR]}.{labels.get(CUDA_MINOR, '0')}"
            GpuNode.objects.update_or_create(name=meta["name"], defaults=defaults)
            seen.append(meta["name"])
        GpuNode.objects.exclude(name__in=seen).delete()
    return len(seen)
