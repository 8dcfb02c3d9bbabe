from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class UsageDaily(models.Model):
    """GPU-seconds per day, team, user and GPU type: a roll-up that keeps reports fast.

    A row is a cache of what the workloads table says for one closed day; it is recomputed whenever a
    workload that overlaps that day changes its interval, so reports read it without losing exactness.
    """

    day = models.DateField()
    team = models.ForeignKey("jobs.Team", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    gpu_type = models.ForeignKey("jobs.GpuType", on_delete=models.CASCADE, related_name="+")
    gpu_seconds = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["day", "team", "user", "gpu_type"], name="one_usage_row_per_key")
        ]
        indexes = [models.Index(fields=["team", "day"], name="usage_team_day")]

    def __str__(self) -> str:
        return f"{self.day} {self.team_id}/{self.user_id}/{self.gpu_type_id}: {self.gpu_seconds:.0f} GPU-s"


class RolledUpDay(models.Model):
    """Days whose usage rows are complete; a report reads these from UsageDaily."""

    day = models.DateField(primary_key=True)
    computed_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return str(self.day)


class BillingWeight(models.Model):
    """A GPU type's billing weight from one local day on. Usage is weighted as it was on the day the
    GPU-hours were used, so editing a weight changes what is billed from today, never last month."""

    gpu_type = models.ForeignKey("jobs.GpuType", on_delete=models.CASCADE, related_name="weight_history")
    valid_from = models.DateField()
    weight = models.DecimalField(max_digits=6, decimal_places=3)
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["gpu_type", "valid_from"], name="one_weight_per_type_day")]
        ordering = ["gpu_type", "valid_from"]

    def __str__(self) -> str:
        return f"{self.gpu_type_id} from {self.valid_from}: {self.weight}"
