from __future__ import annotations

from django import template

from telemetry.chart import workload_gpu_chart

register = template.Library()


@register.inclusion_tag("telemetry/_workload_gpu.html")
def workload_gpu(workload) -> dict:
    """{% load telemetry %}{% workload_gpu workload %}: the workload's GPU utilization/memory chart."""
    return {"gpu_chart": workload_gpu_chart(workload)}


@register.filter
def gib(value) -> str:
    if value is None:
        return "–"
    return f"{value / 1024**3:.1f} GiB"


@register.filter
def node_label(inventory, key: str) -> str:
    """One label of a node as the inventory last saw it ('' when the node or the label is missing)."""
    if inventory is None or not key:
        return ""
    return str((inventory.labels or {}).get(key, ""))
