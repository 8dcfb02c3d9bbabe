"""What the node agents tell the portal: the latest reading of every GPU, a per-minute series per workload,
the tokens agents authenticate with, and the per-team idle-service policy.

Nodes are keyed by their Kubernetes name, not by a foreign key to jobs.GpuNode: the inventory sync
deletes and re-creates those rows as nodes come and go, and an agent may report before the sync has
seen its node.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone


class AgentToken(models.Model):
    """A bearer token a node agent pushes reports with. Only its SHA-256 is stored; the token itself is
    shown once, when it is issued."""

    name = models.CharField(max_length=100, help_text="What the token is for, e.g. 'GPU nodes of cluster A'.")
    node_name = models.CharField(
        max_length=253,
        blank=True,
        help_text="The one node whose reports this token may send (its Kubernetes node name). A token issued "
        "without one is bound to the first node that reports with it.",
    )
    prefix = models.CharField(max_length=12, editable=False, help_text="The token's first characters.")
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "agent token"
        constraints = [
            # One node, one live token: a stolen token speaks for one node only, and is revoked alone.
            models.UniqueConstraint(
                fields=["node_name"],
                condition=models.Q(revoked_at__isnull=True) & ~models.Q(node_name=""),
                name="one_active_token_per_node",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class TelemetryNode(models.Model):
    """A node as its agent last described it."""

    name = models.CharField(max_length=253, unique=True)
    simulated = models.BooleanField(default=False, help_text="Readings come from the simulated source.")
    agent_version = models.CharField(max_length=40, blank=True)
    driver_version = models.CharField(max_length=40, blank=True)
    cuda_driver_version = models.CharField(max_length=8, blank=True)
    interval_seconds = models.FloatField(default=5.0)
    last_report_at = models.DateTimeField(help_text="When the newest stored sample was taken (agent's clock).")
    received_at = models.DateTimeField(help_text="When the portal received it.")
    reports_total = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["name"]
        verbose_name = "node (telemetry)"
        verbose_name_plural = "nodes (telemetry)"

    def __str__(self) -> str:
        return self.name

    def stale_after(self) -> timedelta:
        # Three missed reports, but never less than a minute (a slow portal should not flap the page).
        return timedelta(seconds=max(60.0, 3 * self.interval_seconds))

    def is_stale(self, now: datetime | None = None) -> bool:
        return (now or timezone.now()) - self.received_at > self.stale_after()


class GpuState(models.Model):
    """The latest reading of one GPU of a node."""

    class State(models.TextChoices):
        OK = "ok", "OK"
        LOST = "lost", "Lost"

    node = models.ForeignKey(TelemetryNode, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=80, blank=True)
    model = models.CharField(max_length=100, blank=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.OK)
    utilization_gpu_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    utilization_memory_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    memory_used_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    memory_total_bytes = models.PositiveBigIntegerField(null=True, blank=True)
    temperature_celsius = models.SmallIntegerField(null=True, blank=True)
    power_draw_watts = models.FloatField(null=True, blank=True)
    power_limit_watts = models.FloatField(null=True, blank=True)
    sm_clock_mhz = models.PositiveIntegerField(null=True, blank=True)
    ecc_uncorrected_volatile = models.PositiveBigIntegerField(null=True, blank=True)
    xid_errors = models.PositiveBigIntegerField(null=True, blank=True)
    last_xid = models.PositiveIntegerField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    pod_uids = models.JSONField(default=list, blank=True, help_text="Pods with a process on this GPU.")
    # The GPU's MIG devices when MIG is on (issue 40): [{"index", "uuid", "gpu_instance_id",
    # "memory_used_bytes", "memory_total_bytes", "utilization_gpu_percent", "pod_uids"}], by index.
    mig_devices = models.JSONField(default=list, blank=True, help_text="The GPU's MIG slices and their pods.")
    sampled_at = models.DateTimeField()

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [models.UniqueConstraint(fields=["node", "index"], name="one_gpu_state_per_index")]
        verbose_name = "GPU state"

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"

    @property
    def lost(self) -> bool:
        return self.state == self.State.LOST

    @property
    def memory_percent(self) -> float | None:
        if not self.memory_total_bytes or self.memory_used_bytes is None:
            return None
        return 100 * self.memory_used_bytes / self.memory_total_bytes


class WorkloadGpuMinute(models.Model):
    """One minute of a workload's GPU use, summed over the reports that attributed processes to its pod.

    Bounded by construction: at most one row per workload per minute, pruned after
    TELEMETRY_RETENTION_DAYS. Sums (not averages) are stored so that rows can be merged exactly.
    """

    workload = models.ForeignKey("jobs.Workload", on_delete=models.CASCADE, related_name="gpu_minutes")
    # Denormalised from the workload so a team's efficiency over a range reads one index.
    team = models.ForeignKey("jobs.Team", on_delete=models.CASCADE, related_name="+")
    minute = models.DateTimeField(help_text="Start of the minute (UTC).")
    node_name = models.CharField(max_length=253, blank=True)
    simulated = models.BooleanField(default=False)
    reports = models.PositiveIntegerField(default=0)
    gpu_readings = models.PositiveIntegerField(default=0, help_text="GPU readings summed (GPUs × reports).")
    utilization_sum = models.FloatField(default=0.0, help_text="Sum of GPU utilization % over the readings.")
    utilization_max = models.PositiveSmallIntegerField(default=0)
    memory_used_bytes_max = models.PositiveBigIntegerField(default=0)
    memory_used_bytes_last = models.PositiveBigIntegerField(default=0)
    memory_total_bytes = models.PositiveBigIntegerField(default=0)
    busy_gpu_seconds = models.FloatField(default=0.0, help_text="Σ utilization/100 × sampling interval.")
    observed_gpu_seconds = models.FloatField(default=0.0, help_text="Σ GPUs × sampling interval.")

    class Meta:
        ordering = ["workload", "minute"]
        constraints = [models.UniqueConstraint(fields=["workload", "minute"], name="one_gpu_minute_per_workload")]
        indexes = [
            models.Index(fields=["team", "minute"], name="gpuminute_team"),
            models.Index(fields=["minute"], name="gpuminute_prune"),
        ]
        verbose_name = "workload GPU minute"

    def __str__(self) -> str:
        return f"{self.workload_id} {self.minute:%Y-%m-%d %H:%M}"

    @property
    def utilization_avg(self) -> float | None:
        return self.utilization_sum / self.gpu_readings if self.gpu_readings else None


class IdlePolicy(models.Model):
    """Per team: warn the owner of a service whose GPUs stayed below `threshold_percent` utilization for
    `warn_after_hours`, and optionally stop it `stop_after_hours` after the warning."""

    team = models.OneToOneField("jobs.Team", on_delete=models.CASCADE, related_name="idle_policy")
    enabled = models.BooleanField(default=True)
    threshold_percent = models.PositiveSmallIntegerField(
        default=5, validators=[MinValueValidator(1), MaxValueValidator(100)], help_text="X: below this is idle."
    )
    warn_after_hours = models.DecimalField(
        max_digits=6,
        decimal_places=2,
        default=Decimal(4),
        validators=[MinValueValidator(Decimal("0.25"))],
        help_text="N: warn the owner after this many hours idle.",
    )
    stop_after_hours = models.DecimalField(
        max_digits=6,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0.25"))],
        help_text="M: stop the service this many hours after the warning if still idle. Empty: never stop.",
    )
    browser_activity_counts = models.BooleanField(
        default=True,
        help_text="Traffic through the portal's proxy (an open, active browser tab) counts as use: a service is "
        "idle only since the later of its last busy GPU minute and its last browser activity. Off: GPU use only.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name"]
        verbose_name = "idle-service policy"
        verbose_name_plural = "idle-service policies"

    def __str__(self) -> str:
        stop = f", stop after {self.stop_after_hours} h more" if self.stop_after_hours is not None else ""
        return f"{self.team}: warn after {self.warn_after_hours} h below {self.threshold_percent} %{stop}"

    @property
    def warn_after(self) -> timedelta:
        return timedelta(hours=float(self.warn_after_hours))

    @property
    def stop_after(self) -> timedelta | None:
        return None if self.stop_after_hours is None else timedelta(hours=float(self.stop_after_hours))


class IdleWarning(models.Model):
    """A service's owner has been warned that it is idle (one open warning per workload at a time)."""

    workload = models.OneToOneField("jobs.Workload", on_delete=models.CASCADE, related_name="idle_warning")
    idle_since = models.DateTimeField()
    warned_at = models.DateTimeField()
    threshold_percent = models.PositiveSmallIntegerField()
    stop_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-warned_at"]

    def __str__(self) -> str:
        return f"{self.workload} idle since {self.idle_since:%Y-%m-%d %H:%M}"
