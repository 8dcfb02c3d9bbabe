"""What the queue promised and estimated, kept beside what happened: reservations (a bounded wait for a
workload that does not fit) and every revision of a queued workload's estimated start."""

from __future__ import annotations

from django.db import models


class QueueReservation(models.Model):
    """GPUs of a team's quota promised to one queued workload from `starts_by`: smaller work of the team
    passes it only where it cannot delay it (jobs/services/queue/reservation_plan.py). Kept after the
    workload is admitted, so a broken promise can be counted."""

    workload = models.OneToOneField("jobs.Workload", on_delete=models.CASCADE, related_name="reservation")
    team = models.ForeignKey("jobs.Team", on_delete=models.CASCADE, related_name="+")
    gpu_type = models.ForeignKey("jobs.GpuType", on_delete=models.CASCADE, related_name="+")
    gpus = models.PositiveIntegerField()
    starts_by = models.DateTimeField(help_text="The promise: the workload is admitted no later than this.")
    made_at = models.DateTimeField()
    admitted_at = models.DateTimeField(null=True, blank=True, help_text="When the promise was kept (or broken).")

    class Meta:
        indexes = [
            # Each admission pass reads the reservations that stand for its teams and types.
            models.Index(fields=["team", "gpu_type"], condition=models.Q(admitted_at__isnull=True), name="qr_open"),
        ]

    def __str__(self) -> str:
        return f"{self.gpus} GPU(s) for workload {self.workload_id} by {self.starts_by:%Y-%m-%d %H:%M}"


class EstimateRevision(models.Model):
    """One estimate of a queued workload's start, as it was shown from `at`: the first one and each that
    moved by more than a minute. Beside the workload's actual start they say how good estimates are."""

    workload = models.ForeignKey("jobs.Workload", on_delete=models.CASCADE, related_name="estimate_revisions")
    at = models.DateTimeField()
    estimated_start_at = models.DateTimeField(null=True, blank=True, help_text="Empty: not within the horizon.")

    class Meta:
        ordering = ["workload", "at", "id"]
        indexes = [models.Index(fields=["workload", "at"], name="er_workload_at")]

    def __str__(self) -> str:
        return f"workload {self.workload_id}: {self.estimated_start_at} (from {self.at})"
