"""Keep the agent's CUDA driver version on jobs.GpuNode when the inventory sync has none to give.

The inventory sync (jobs.services.cluster.inventory) sets GpuNode.cuda_driver_version from GPU Feature
Discovery's node labels and writes "" where a node has none, which would erase what the node's agent
reported until its next report. Before such a save, fall back to the agent's latest value.
"""

from __future__ import annotations

from django.db.models.signals import pre_save
from django.dispatch import receiver

from jobs.models import GpuNode
from telemetry.models import TelemetryNode


@receiver(pre_save, sender=GpuNode, dispatch_uid="telemetry.keep_agent_cuda_version")
def keep_agent_cuda_version(sender, instance: GpuNode, raw: bool = False, **kwargs) -> None:
    if raw or instance.cuda_driver_version:
        return
    reported = TelemetryNode.objects.filter(name=instance.name).values_list("cuda_driver_version", flat=True).first()
    if reported:
        instance.cuda_driver_version = reported
