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


class RunSegment(models.Model):
    """A closed stretch of a workload's GPU time, kept apart because the workload itself went on.

    Two things close one: a preemption that sends a restartable job back to the queue (the run it had
    is over, the workload is not; its next run starts afresh), and a change of the run's borrowed mark
    (the stretch before it is billed as it was marked). Usage counts these rows beside each workload's
    current stretch, which begins at `Workload.counted_from` when it is later than the container start.
    Team, owner and GPU type are copied so the same report filters apply to both tables.
    """

    workload = models.ForeignKey("jobs.Workload", on_delete=models.CASCADE, related_name="segments")
    team = models.ForeignKey("jobs.Team", on_delete=models.PROTECT, related_name="+")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    gpu_type = models.ForeignKey("jobs.GpuType", on_delete=models.PROTECT, related_name="+")
    gpu_count = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField(help_text="The run it belongs to (the workload's attempt then).")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    borrowed = models.BooleanField(help_text="It ran on GPUs borrowed from the cohort.")
    reason = models.CharField(
        max_length=32,
        help_text="What closed it: Preempted, a retried fault (Evicted, GpuFault, …), or BorrowedMarkChanged.",
    )
    lost_gpu_seconds = models.FloatField(
        default=0.0, help_text="Of its GPU time, what the stop threw away (since the last checkpoint, or its start)."
    )

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [models.Index(fields=["started_at", "finished_at"], name="segment_interval")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(finished_at__gte=models.F("started_at")), name="segment_ends_after_start"
            )
        ]

    def __str__(self) -> str:
        return f"{self.workload_id}#{self.attempt} {self.started_at:%Y-%m-%d %H:%M}-{self.finished_at:%H:%M}"
