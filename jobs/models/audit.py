from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class QuotaChange(models.Model):
    """One change to a team's quota for a GPU type: who, when, from what to what. Never edited."""

    team = models.ForeignKey("jobs.Team", on_delete=models.CASCADE, related_name="quota_changes")
    gpu_type = models.ForeignKey("jobs.GpuType", on_delete=models.CASCADE, related_name="quota_changes")
    old_max_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: there was no quota.")
    new_max_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="Empty: the quota was removed.")
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_at = models.DateTimeField(default=timezone.now)
    admitted = models.PositiveIntegerField(default=0, help_text="Queued workloads admitted right after the change.")
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["-changed_at", "-id"]
        indexes = [models.Index(fields=["team", "-changed_at"], name="quotachange_team_recent")]

    def __str__(self) -> str:
        old = "none" if self.old_max_gpus is None else self.old_max_gpus
        new = "none" if self.new_max_gpus is None else self.new_max_gpus
        return f"{self.team_id}/{self.gpu_type_id}: {old} → {new}"
