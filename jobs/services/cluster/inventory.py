"""The portal's picture of the cluster's GPU nodes: two list calls (nodes, running pods) per sync."""

from __future__ import annotations

import json
from collections import defaultdict

from django.db import transaction
from django.utils import timezone

from jobs.kube import client as kube
from jobs.models import GpuNode, GpuType
from jobs.services.validation import canonical_image

CUDA_MAJOR = "nvidia.com/cuda.driver.major"
CUDA_MINOR = "nvidia.com/cuda.driver.minor"
# "false" on a node that reaches no registry (localcluster's real nodes; an air-gapped site labels its own):
# only the images it has run there, and the intake refuses the others (validation.check_image_on_nodes).
PULLS_IMAGES = "gpuportal.io/pulls-images"


def _quantity(value: str | int | None) -> int:
    if value is None:
        return 0
    try:
        return int(str(value))
    except ValueError:
        return 0


def _container_gpus(container: dict, resources: set[str]) -> int:
    requested = (container.get("resources") or {}).get("requests") or {}
    limits = (container.get("resources") or {}).get("limits") or {}
    return sum(_quantity(requested.get(resource, limits.get(resource))) for resource in resources)


def _gpus(status: dict, key: str, resources: set[str]) -> int:
    """A node's GPUs by its status's `key` ("capacity", "allocatable"), over every GPU resource."""
    return sum(_quantity((status.get(key) or {}).get(r)) for r in resources)


def _ready(status: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _gpu_type_of(labels: dict, types: list[GpuType]) -> GpuType | None:
    return next((t for t in types if labels.get(t.node_label_key) == t.node_label_value), None)


def _list_nodes_and_pods() -> tuple[dict, dict]:
    """The cluster's nodes and its pods that have not ended, as raw JSON."""
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
    return nodes, pods


def _gpus_in_use(pods: dict, resources: set[str]) -> dict[str, int]:
    """GPUs the pods ask for, per node they are placed on (requests, else limits, of each GPU resource)."""
    in_use: dict[str, int] = defaultdict(int)
    for pod in pods.get("items") or []:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        for container in (pod.get("spec") or {}).get("containers") or []:
            in_use[node] += _container_gpus(container, resources)
    return in_use


def _node_images(status: dict) -> list[str]:
    """The images the kubelet says the node has (`.status.images`, at most its nodeStatusMaxImages, 50 by
    default), as canonical references, tags and digests alike."""
    names = {canonical_image(name) for image in status.get("images") or [] for name in image.get("names") or []}
    return sorted(name for name in names if name)


def _gpu_node_fields(node: dict, resources: set[str], types: list[GpuType]) -> dict | None:
    """A node's GpuNode fields (all but GPUs in use and when seen); None for a node without GPUs."""
    meta, status, spec = node["metadata"], node.get("status") or {}, node.get("spec") or {}
    labels = meta.get("labels") or {}
    capacity = _gpus(status, "capacity", resources)
    if capacity == 0:
        return None
    fields = {
        "gpu_type": _gpu_type_of(labels, types),
        "gpus_capacity": capacity,
        "gpus_allocatable": _gpus(status, "allocatable", resources),
        "ready": _ready(status),
        "schedulable": not spec.get("unschedulable", False),
        "labels": labels,
        "pulls_images": labels.get(PULLS_IMAGES) != "false",
    }
    fields["images"] = [] if fields["pulls_images"] else _node_images(status)
    # GPU Feature Discovery's labels, when present; otherwise keep what the node agent reported.
    if CUDA_MAJOR in labels:
        fields["cuda_driver_version"] = f"{labels[CUDA_MAJOR]}.{labels.get(CUDA_MINOR, '0')}"
    return fields


def inventory_sync() -> int:
    """Refresh GpuNode rows from the cluster; returns the number of GPU nodes seen."""
    types = list(GpuType.objects.all())
    resources = {t.resource_name for t in types} or {"nvidia.com/gpu"}
    nodes, pods = _list_nodes_and_pods()
    in_use = _gpus_in_use(pods, resources)
    now = timezone.now()
    seen: list[str] = []
    with transaction.atomic():
        # The types again, as they are now: the cluster calls above take time, and a node must not be
        # written with the type list read before them (a type added or re-created meanwhile would be lost
        # until the next sync, and its nodes would look missing to the intake).
        types = list(GpuType.objects.all())
        for node in nodes.get("items") or []:
            fields = _gpu_node_fields(node, resources, types)
            if fields is None:
                continue
            name = node["metadata"]["name"]
            fields |= {"gpus_in_use": in_use.get(name, 0), "last_seen_at": now}
            GpuNode.objects.update_or_create(name=name, defaults=fields)
            seen.append(name)
        GpuNode.objects.exclude(name__in=seen).delete()
    return len(seen)
