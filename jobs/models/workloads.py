from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import datetime

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from spec_rules import MAX_PRIORITY, MIN_PRIORITY


class Kind(models.TextChoices):
    BATCH = "batch", "Batch job"
    SERVICE = "service", "Service"


class State(models.TextChoices):
    QUEUED = "QUEUED", "Queued"
    SUBMITTING = "SUBMITTING", "Submitting"
    PENDING = "PENDING", "Pending"
    RUNNING = "RUNNING", "Running"
    SUCCEEDED = "SUCCEEDED", "Succeeded"
    FAILED = "FAILED", "Failed"
    CANCELLED = "CANCELLED", "Cancelled"
    PREEMPTED = "PREEMPTED", "Preempted"

    @classmethod
    def final(cls) -> frozenset[State]:
        return frozenset({cls.SUCCEEDED, cls.FAILED, cls.CANCELLED, cls.PREEMPTED})

    @classmethod
    def holding(cls) -> frozenset[State]:
        """States in which a workload holds its GPUs against the team's quota."""
        return frozenset({cls.SUBMITTING, cls.PENDING, cls.RUNNING})

    @classmethod
    def active(cls) -> frozenset[State]:
        return frozenset(set(cls) - cls.final())


FINAL_STATES = ["SUCCEEDED", "FAILED", "CANCELLED", "PREEMPTED"]  # State.final(), as literals for the constraint

# Every legal move. RUNNING -> PENDING happens to services whose pod is re-created (node lost).
# Holding -> QUEUED is a restartable batch job preempted by a lender reclaiming its GPUs; a service
# preempted that way ends PREEMPTED.
_RECLAIMED = {State.QUEUED, State.PREEMPTED}
TRANSITIONS: dict[str, frozenset[str]] = {
    State.QUEUED: frozenset({State.SUBMITTING, State.CANCELLED, State.FAILED}),
    State.SUBMITTING: frozenset(
        {State.PENDING, State.RUNNING, State.SUCCEEDED, State.FAILED, State.CANCELLED, *_RECLAIMED}
    ),
    State.PENDING: frozenset({State.RUNNING, State.SUCCEEDED, State.FAILED, State.CANCELLED, *_RECLAIMED}),
    State.RUNNING: frozenset({State.PENDING, State.SUCCEEDED, State.FAILED, State.CANCELLED, *_RECLAIMED}),
    State.SUCCEEDED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
    State.PREEMPTED: frozenset(),
}


UID_BYTES = 8


def segment_gpu_seconds(segments: Iterable[tuple[int, datetime, datetime]]) -> float:
    """GPU-seconds of closed stretches given as (GPUs, start, end)."""
    return sum(gpus * max(0.0, (end - start).total_seconds()) for gpus, start, end in segments)


def new_uid() -> str:
    """16 lowercase hex characters (64 random bits): safe inside Kubernetes names and label values, and
    unguessable. With 40 bits a site had a ~40 % chance of one collision by a million workloads; with 64
    it is about 3 in 100 million (and a collision is retried at submit, never a server error)."""
    return secrets.token_hex(UID_BYTES)


class Workload(models.Model):
    """What a researcher asked for, and what Kubernetes made of it."""

    # Unique by the constraint wl_uid, not unique=True: that would also build a varchar_pattern_ops copy of the
    # index for LIKE 'prefix%' (which nothing of the portal asks), written again at every change of state.
    uid = models.CharField(max_length=16, default=new_uid, editable=False)
    # No index of their own: wl_queue and wl_team_recent begin with the team, wl_owner_recent with the owner,
    # and every index is written again at each change of state (issue 41).
    team = models.ForeignKey("jobs.Team", on_delete=models.PROTECT, related_name="workloads", db_index=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="workloads", db_index=False
    )
    name = models.CharField(max_length=40)
    kind = models.CharField(max_length=10, choices=Kind.choices)

    # --- the spec, as validated at submit -------------------------------------------------------
    image = models.CharField(max_length=255)
    catalog_image = models.ForeignKey(
        "jobs.CatalogImage",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="workloads",
        db_index=False,  # wl_catalog_image: only the rows that have one
    )
    gpu_type = models.ForeignKey("jobs.GpuType", on_delete=models.PROTECT, related_name="workloads")
    gpu_count = models.PositiveIntegerField(
        help_text="GPUs it holds in all: for a gang job, nodes × GPUs per node (what quota, usage and the queue count)."
    )
    # db_default too: rows written by raw SQL (benchmarks, bulk tools) that know nothing of gangs get 1 node.
    nodes = models.PositiveSmallIntegerField(
        default=1, db_default=1, help_text="A batch job's ranks, one per node (a gang job when more than one)."
    )
    topology = models.CharField(
        max_length=10,
        choices=[("", "Anywhere"), ("preferred", "Preferred"), ("required", "Required")],
        default="",
        db_default="",
        blank=True,
        help_text="A gang job: whether its ranks must (or should) share one value of the admin's topology label.",
    )
    command = models.JSONField(default=list, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=list, blank=True, help_text='[{"name": ..., "value": ...}]')
    port = models.PositiveIntegerField(null=True, blank=True)
    time_limit_seconds = models.PositiveIntegerField()
    priority = models.IntegerField(
        default=0, validators=[MinValueValidator(MIN_PRIORITY), MaxValueValidator(MAX_PRIORITY)]
    )
    cpu_millicores = models.PositiveIntegerField(
        null=True, blank=True, help_text="CPU asked for (the whole pod). Empty: the GPU type's default per GPU."
    )
    memory_mib = models.PositiveIntegerField(
        null=True, blank=True, help_text="Memory asked for (the whole pod). Empty: the GPU type's default per GPU."
    )
    secrets = models.JSONField(
        default=list,
        blank=True,
        help_text='Secrets it uses, by name (never values): [{"name": ..., "env": "VAR" or ""}]',
    )
    mounts = models.JSONField(
        default=list,
        blank=True,
        help_text='What is mounted where: [{"kind": "home"|"team", "mount_path": ..., "claim": ..., '
        '"read_only": false, "size_gib": ...}]',
    )
    restartable = models.BooleanField(
        default=False, help_text="A batch job preempted by a lender goes back to the front of the queue."
    )
    retry_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Automatic retries after ends that are not its fault. Empty: the team's default.",
    )
    retryable_exit_codes = models.JSONField(
        default=list, blank=True, help_text="Exit codes of its own that are retried like a fault (e.g. [75])."
    )
    checkpoint_workspace = models.CharField(
        max_length=8,
        choices=[("home", "The owner's home"), ("team", "The team's shared workspace")],
        default="home",
        help_text="Where GPUPORTAL_CHECKPOINT_DIR lies: a workspace that outlives each attempt.",
    )
    shared_with_team = models.BooleanField(
        default=False, help_text="A service: teammates may open it through the portal's proxy, not only its owner."
    )

    # --- where it stands ------------------------------------------------------------------------
    state = models.CharField(max_length=12, choices=State.choices, default=State.QUEUED)
    reason = models.CharField(max_length=64, blank=True, help_text="Machine-readable cause of the state.")
    message = models.TextField(blank=True, help_text="What a person should read about the state.")
    exit_code = models.IntegerField(null=True, blank=True)
    namespace = models.CharField(max_length=63, blank=True)
    k8s_name = models.CharField(max_length=63, blank=True)
    node_name = models.CharField(max_length=253, blank=True)
    pod_name = models.CharField(max_length=253, blank=True)
    pod_uid = models.CharField(max_length=64, blank=True)
    # --- sharing -----------------------------------------------------------------------------------
    borrowed = models.BooleanField(
        default=False, help_text="Admitted beyond the team's own quota, on GPUs its cohort left idle."
    )
    attempt = models.PositiveIntegerField(
        default=0, help_text="Times it was requeued after preemption; names its Kubernetes objects."
    )
    requeued_at = models.DateTimeField(null=True, blank=True, help_text="Last requeued after preemption.")
    retries = models.PositiveIntegerField(default=0, help_text="Automatic retries so far (faults, not preemptions).")
    retry_not_before = models.DateTimeField(
        null=True, blank=True, help_text="A retried job waits in the queue until then (backoff)."
    )
    last_checkpoint_at = models.DateTimeField(null=True, blank=True, help_text="Its newest reported checkpoint.")
    last_checkpoint_step = models.BigIntegerField(null=True, blank=True)
    lost_gpu_seconds = models.FloatField(
        default=0.0, help_text="GPU-seconds of work its stops threw away (since the last checkpoint, or start)."
    )
    estimated_start_at = models.DateTimeField(
        null=True, blank=True, help_text="While queued: when it should start, from a forecast of admission."
    )
    wait_reason = models.CharField(max_length=32, blank=True, help_text="While queued: what it waits for.")

    created_at = models.DateTimeField(default=timezone.now)
    admitted_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="Container start, from Kubernetes.")
    finished_at = models.DateTimeField(null=True, blank=True, help_text="Container end or deletion.")
    counted_from = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Usage of this run counts from here where it is later than the start: the stretch before "
        "is a RunSegment (its borrowed mark changed).",
    )
    state_changed_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    last_activity_at = models.DateTimeField(
        null=True, blank=True, help_text="A service: the last request through the portal's proxy (throttled)."
    )

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # Admission and queue position: queued work per team and GPU type, in order.
            models.Index(fields=["team", "gpu_type", "state", "-priority", "created_at"], name="wl_queue"),
            models.Index(fields=["team", "-created_at"], name="wl_team_recent"),
            models.Index(fields=["owner", "-created_at"], name="wl_owner_recent"),
            models.Index(fields=["state"], name="wl_state"),
            # Usage reports: intervals that overlap a range. Only started runs (every query of it says
            # started_at < end or started_at IS NOT NULL): a workload enters it when it starts, not at each
            # of its moves before (issue 41: the queue's rows wrote an entry here at intake, admission and
            # creation).
            models.Index(
                fields=["started_at", "finished_at"], condition=models.Q(started_at__isnull=False), name="wl_interval"
            ),
            # ... and the recent end of one (today, the days not rolled up yet): the runs that ended after a
            # moment or still run. Only started runs: the queue's rows have no end either.
            models.Index(fields=["finished_at"], condition=models.Q(started_at__isnull=False), name="wl_ended"),
            # GPU telemetry attributes each agent sample to a workload by its pod's UID.
            models.Index(fields=["pod_uid"], name="wl_pod_uid"),
            # Deleting a catalog image sets its workloads' image to NULL (catalog_image_id = ANY(...) implies
            # NOT NULL, so that lookup uses it); workloads with an image typed by hand never enter it.
            models.Index(
                fields=["catalog_image"], condition=models.Q(catalog_image__isnull=False), name="wl_catalog_image"
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["uid"], name="wl_uid"),
            # Accounting integrity: GPU time of a finished workload is always bounded.
            models.CheckConstraint(
                condition=~models.Q(state__in=FINAL_STATES, started_at__isnull=False, finished_at__isnull=True),
                name="wl_final_started_has_end",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.uid})"

    @property
    def is_final(self) -> bool:
        return self.state in State.final()

    @property
    def holds_quota(self) -> bool:
        return self.state in State.holding()

    @property
    def is_gang(self) -> bool:
        return self.nodes > 1

    @property
    def gpus_per_node(self) -> int:
        return self.gpu_count // max(1, self.nodes)

    def gpu_seconds(self, now: datetime | None = None) -> float:
        """GPU-seconds so far over every run it had: the runs a preemption ended before it was requeued
        (`earlier_gpu_seconds`) and the current one, whole once finished, live while running."""
        current = 0.0
        if self.started_at is not None:
            end = self.finished_at or (now or timezone.now())
            current = max(0.0, (end - self.started_at).total_seconds()) * self.gpu_count
        return current + self.earlier_gpu_seconds()

    def earlier_gpu_seconds(self) -> float:
        """GPU-seconds of its runs before the current attempt, kept as run segments (no query for work that
        was never requeued; `jobs.selectors.with_earlier_runs` reads a whole page's at once)."""
        if not self.attempt:
            return 0.0
        if not hasattr(self, "_earlier_gpu_seconds"):
            self._earlier_gpu_seconds = segment_gpu_seconds(
                self.segments.filter(attempt__lt=self.attempt).values_list("gpu_count", "started_at", "finished_at")
            )
        return self._earlier_gpu_seconds


class WorkloadEvent(models.Model):
    """One line of a workload's timeline: a state change or a notable Kubernetes event."""

    class Source(models.TextChoices):
        PORTAL = "portal", "Portal"
        KUBERNETES = "kubernetes", "Kubernetes"

    # No index of its own: wlevent_timeline begins with the workload.
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="events", db_index=False)
    at = models.DateTimeField(default=timezone.now)
    source = models.CharField(max_length=12, choices=Source.choices, default=Source.PORTAL)
    from_state = models.CharField(max_length=12, choices=State.choices, blank=True)
    to_state = models.CharField(max_length=12, choices=State.choices, blank=True)
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["workload", "at"], name="wlevent_timeline")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.from_state}->{self.to_state} {self.reason}"
