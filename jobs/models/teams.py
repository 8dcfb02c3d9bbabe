from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

DNS_LABEL = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
    "Lowercase letters, digits and '-', starting and ending with a letter or digit.",
)

# A manager's sharing rules (the team's sharing page) and an admin's (Django admin) are bounded alike:
# the model's validators refuse in admin what the page's form, built from the same bounds, refuses.
MAX_HALF_LIFE_HOURS = 24 * 90
MAX_PER_MEMBER = 10_000  # waiting workloads, or GPUs of one type held at once
HALF_LIFE_BOUNDS = (MinValueValidator(1), MaxValueValidator(MAX_HALF_LIFE_HOURS))
PER_MEMBER_BOUNDS = (MinValueValidator(1), MaxValueValidator(MAX_PER_MEMBER))


class Team(models.Model):
    """A group that shares GPU quotas; each team has its own Kubernetes namespace."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=40, unique=True, validators=[DNS_LABEL])
    monthly_gpu_hour_budget = models.DecimalField(
        max_digits=12,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(0))],
        help_text="GPU-hours the team may use per calendar month (billing weights applied). Empty: no budget.",
    )
    home_size_gib = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Size of each member's home workspace (/home/<user>) in GiB. Empty: the site default.",
    )
    shared_size_gib = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Size of the team's shared workspace (/team) in GiB. Empty: the site default.",
    )
    cohort = models.ForeignKey(
        "jobs.Cohort",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="teams",
        help_text="Teams in a cohort may borrow the GPUs the others leave idle.",
    )
    fair_share = models.BooleanField(
        default=False,
        help_text="Order the team's queue by each user's recent GPU-hours (least first) instead of FIFO; "
        "priorities still come first.",
    )
    fair_share_half_life_hours = models.PositiveIntegerField(
        default=24, validators=list(HALF_LIFE_BOUNDS), help_text="Past usage counts half after this many hours."
    )
    user_max_queued = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=list(PER_MEMBER_BOUNDS),
        help_text="Most workloads one member may have waiting at once. Empty: no cap.",
    )
    default_retry_limit = models.PositiveIntegerField(
        default=3,
        help_text="How many times a restartable batch job is retried after an end that is not its fault "
        "(evicted, node lost, GPU fault, image pull timed out), unless its launch says otherwise.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def namespace(self) -> str:
        return f"{settings.KUBE_NAMESPACE_PREFIX}{self.slug}"


class Quota(models.Model):
    """The most GPUs of one type a team may hold at once. No row: the team cannot use that type."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="quotas")
    gpu_type = models.ForeignKey("jobs.GpuType", on_delete=models.CASCADE, related_name="quotas")
    max_gpus = models.PositiveIntegerField()
    borrowing_limit = models.PositiveIntegerField(
        default=0, help_text="GPUs of this type the team may borrow beyond its quota from its cohort's idle ones."
    )
    lending_limit = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Most of this quota the cohort may borrow while the team leaves it idle. Empty: all of it.",
    )
    user_max_gpus = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=list(PER_MEMBER_BOUNDS),
        help_text="Most GPUs of this type one member may hold at once. Empty: no cap.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "gpu_type"], name="one_quota_per_team_and_type")]
        ordering = ["team__name", "gpu_type__slug"]

    def __str__(self) -> str:
        return f"{self.team}: {self.max_gpus} × {self.gpu_type}"
