"""One rank of a gang job, as Kubernetes last reported its pod."""

from __future__ import annotations

from django.db import models


class GangRank(models.Model):
    """A gang job's rank in one attempt: where its pod ran and, by Kubernetes' own timestamps, for how long.

    The workload row holds the gang's one state; these rows say which rank did what (the rank picker,
    the failed rank named, GPU-hours summed over ranks)."""

    workload = models.ForeignKey("jobs.Workload", on_delete=models.CASCADE, related_name="ranks")
    attempt = models.PositiveIntegerField(default=0)
    rank = models.PositiveSmallIntegerField()
    phase = models.CharField(max_length=12, blank=True, help_text="The rank's own state (a workload state).")
    reason = models.CharField(max_length=64, blank=True)
    pod_name = models.CharField(max_length=253, blank=True)
    pod_uid = models.CharField(max_length=64, blank=True)
    pod_ip = models.CharField(max_length=45, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="Container start, from Kubernetes.")
    finished_at = models.DateTimeField(null=True, blank=True, help_text="Container end, from Kubernetes.")

    class Meta:
        ordering = ["workload", "attempt", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["workload", "attempt", "rank"], name="one_row_per_gang_rank"),
        ]

    def __str__(self) -> str:
        return f"{self.workload_id}#{self.attempt} rank {self.rank}: {self.phase}"
