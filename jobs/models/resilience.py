"""Work that survives: the checkpoints a job reports, and the GPU health marks that keep new work off a failing node.

A checkpoint row is what the job itself said (through its workload-scoped token, jobs/services/checkpoints):
it saved its state at `at`, maybe with a step number and a path. Preemption reads the newest one to price
what a stop would lose; the page, the API and the CLI show it with its age.

A health mark says the agent saw a GPU of a node fail (a fatal Xid, an uncorrectable ECC error, a GPU lost,
a sustained over-temperature). While a mark is open, new workloads avoid the node (node affinity: the
portal never writes Node objects). It closes when an admin clears it or after a run of healthy reports;
the closed marks are the node's health history.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Checkpoint(models.Model):
    """One checkpoint a running job reported."""

    workload = models.ForeignKey("jobs.Workload", on_delete=models.CASCADE, related_name="checkpoints")
    attempt = models.PositiveIntegerField(help_text="The attempt that wrote it (GPUPORTAL_ATTEMPT then).")
    at = models.DateTimeField(default=timezone.now, help_text="When the portal heard of it.")
    step = models.BigIntegerField(null=True, blank=True, help_text="The job's own progress counter, if it gave one.")
    path = models.CharField(max_length=1024, blank=True, help_text="Where it wrote it, as the job said.")
    note = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["workload", "-at"], name="checkpoint_latest")]

    def __str__(self) -> str:
        return f"{self.workload_id}#{self.attempt} step {self.step} at {self.at:%Y-%m-%d %H:%M:%S}"


class GpuHealthMark(models.Model):
    """A node's GPU seen failing: open (new work avoids the node) until cleared by an admin or by recovery."""

    class Cause(models.TextChoices):
        XID = "xid", "Fatal Xid error"
        ECC = "ecc", "Uncorrectable ECC error"
        LOST = "lost", "GPU lost"
        THERMAL = "thermal", "Sustained over-temperature"
        DEVICE_PLUGIN = "device_plugin", "Device plugin reports it unhealthy"
        ADMIN = "admin", "Taken out by an admin"

    class Cleared(models.TextChoices):
        ADMIN = "admin", "Cleared by an admin"
        RECOVERED = "recovered", "Healthy again"

    node_name = models.CharField(max_length=253)
    gpu_index = models.PositiveIntegerField(null=True, blank=True, help_text="The GPU on the node, if known.")
    gpu_uuid = models.CharField(max_length=64, blank=True)
    cause = models.CharField(max_length=16, choices=Cause.choices)
    detail = models.CharField(max_length=500, blank=True, help_text="What the agent reported (Xid 79, …).")
    marked_at = models.DateTimeField(default=timezone.now)
    last_bad_at = models.DateTimeField(default=timezone.now, help_text="The latest report of this failure.")
    healthy_reports = models.PositiveIntegerField(
        default=0, help_text="Healthy reports in a row since the last bad one; enough of them close the mark."
    )
    cleared_at = models.DateTimeField(null=True, blank=True)
    cleared_how = models.CharField(max_length=12, choices=Cleared.choices, blank=True)
    cleared_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-marked_at", "-id"]
        verbose_name = "GPU health mark"
        indexes = [models.Index(fields=["node_name", "-marked_at"], name="health_node_recent")]
        constraints = [
            # One open mark per GPU of a node (a new report of the same failure updates it).
            models.UniqueConstraint(
                fields=["node_name", "gpu_uuid"], condition=models.Q(cleared_at__isnull=True), name="health_one_open"
            )
        ]

    def __str__(self) -> str:
        gpu = f" GPU {self.gpu_index}" if self.gpu_index is not None else ""
        return f"{self.node_name}{gpu}: {self.get_cause_display()}"

    @property
    def is_open(self) -> bool:
        return self.cleared_at is None


class GpuHealthWatch(models.Model):
    """What one GPU's past reports leave for judging the next: since when it runs hot, and how many Xid
    errors its agent had counted (a fatal Xid is a new failure only when that count grows)."""

    node_name = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=64)
    hot_since = models.DateTimeField(null=True, blank=True)
    xid_errors_seen = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node_name", "gpu_uuid"], name="health_watch_one_per_gpu")]

    def __str__(self) -> str:
        return f"{self.node_name}/{self.gpu_uuid}"
