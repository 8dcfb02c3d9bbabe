from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from jobs import gpu_shares
from jobs.kube import names

CUDA_VERSION = RegexValidator(r"^\d{1,2}\.\d{1,2}$", "A CUDA version such as 12.2.")
LABEL_VALUE = RegexValidator(
    r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
    "A Kubernetes label value (letters, digits, '-', '_', '.').",
)
QUALIFIED_NAME = RegexValidator(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
    "A Kubernetes qualified name such as gputype or nvidia.com/gpu.",
)


class GpuType(models.Model):
    """A kind of GPU node, selected by a node label (gputype=p100) and requested as a resource."""

    slug = models.SlugField(max_length=40, unique=True)
    display_name = models.CharField(max_length=100)
    node_label_key = models.CharField(max_length=253, default="gputype", validators=[QUALIFIED_NAME])
    node_label_value = models.CharField(max_length=63, validators=[LABEL_VALUE])
    resource_name = models.CharField(max_length=253, default="nvidia.com/gpu", validators=[QUALIFIED_NAME])
    cpu_per_gpu_millicores = models.PositiveIntegerField(default=4000)
    memory_per_gpu_mib = models.PositiveIntegerField(default=16384)
    max_cpu_per_gpu_millicores = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Most CPU (millicores per GPU) a workload may ask for. Empty: only the default.",
    )  # fmt: skip
    max_memory_per_gpu_mib = models.PositiveIntegerField(
        null=True, blank=True, help_text="Most memory (MiB per GPU) a workload may ask for. Empty: only the default."
    )  # fmt: skip
    billing_weight = models.DecimalField(
        max_digits=6, decimal_places=3, default=Decimal(1), validators=[MinValueValidator(Decimal(0))]
    )
    max_cuda_version = models.CharField(
        max_length=8,
        blank=True,
        validators=[CUDA_VERSION],
        help_text="Highest CUDA version the drivers on these nodes support. Empty: learnt from the nodes.",
    )
    # Every workload container's scratch space (writable layer, /tmp, logs) is requested and capped per
    # type: the team namespace's LimitRange (TEAM_EPHEMERAL_STORAGE_DEFAULT) refuses a limit above its max.
    ephemeral_storage_request_mib = models.PositiveIntegerField(
        default=1024, help_text="Local scratch disk each workload container reserves (MiB)."
    )
    ephemeral_storage_limit_mib = models.PositiveIntegerField(
        default=20480,
        help_text="Most local scratch disk a workload container may use before it is evicted (MiB). At most the "
        "team namespaces' LimitRange maximum (TEAM_EPHEMERAL_STORAGE_DEFAULT).",
    )
    min_runtime_seconds = models.PositiveIntegerField(
        default=0,
        help_text="How long a workload on borrowed GPUs of this type runs before a lender may preempt it "
        "(0: at once). A cohort's own minimum, when larger, wins.",
    )
    reserve_after_seconds = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="The longest a queued workload that does not fit its team's quota waits before GPUs are "
        "reserved for it as they free up (smaller work then passes it only where it ends before they are "
        "due). 0: reserve for the head of each team's queue at once. Empty: no reservations, smaller work "
        "always passes larger work that does not fit.",
    )
    # Beyond the head of a team's queue, a reservation waits this long (issue 38): a promise stands whatever
    # comes later, so one made at once for a small job held its GPUs against a large job that came ahead of
    # it minutes later. The default is reservation_plan.RESERVE_DEEPER_AFTER_SECONDS (tuned on the replay).
    reserve_deeper_after_seconds = models.PositiveIntegerField(
        default=4 * 3600,
        help_text="Where reservations are on: how long a queued workload behind the head of its team's queue "
        "(the next few that do not fit) waits before GPUs are promised to it too, or the wait above when "
        "longer. 0: promise them at once, in queue order. A promise stands whatever comes later, so a short "
        "wait lets small work promised first hold GPUs against a larger workload that comes ahead of it. "
        "Default 14400 (4 h).",
    )
    queue_aging = models.BooleanField(
        default=False,
        help_text="Aging: each team's queue of this type goes, after priority and fair share, by GPUs × time "
        "waited (most first) instead of by submission time, so a large workload overtakes smaller ones "
        "after it has waited a while (and becomes the one reserved for). Off: first come, first served.",
    )
    enabled = models.BooleanField(default=True)
    # What one device of the resource is (issue 40): a whole GPU, a MIG slice or a time-sliced share, and
    # how much of a physical GPU that is. Quotas count devices; budgets and billing count GPU-equivalents.
    kind = models.CharField(max_length=12, choices=gpu_shares.KIND_CHOICES, default=gpu_shares.WHOLE)
    share_parts = models.PositiveSmallIntegerField(
        default=1,
        help_text="Parts of the GPU one device has: 1 for mig-1g.10gb, 3 for mig-3g.40gb, 1 when time-sliced.",
    )
    share_of = models.PositiveSmallIntegerField(
        default=1,
        help_text="Parts the whole GPU is cut into: 1 for a whole GPU, 7 for A100/H100 MIG slices, N for a GPU "
        "the device plugin advertises N times (time slicing).",
    )
    physical_gpu = models.CharField(
        max_length=60, blank=True, help_text="The physical GPU, as people say it (A100 80GB). Empty: the display name."
    )
    device_memory_mib = models.PositiveIntegerField(
        null=True, blank=True, help_text="GPU memory one device has (MiB): a MIG slice's own, a shared GPU's whole."
    )
    max_per_container = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Most devices of this type one container may ask for. Empty: slices one, whole GPUs a node's worth.",
    )

    class Meta:
        ordering = ["slug"]
        verbose_name = "GPU type"
        constraints = [
            # The inventory files each node under the one type its label selects: a second type with the
            # same label would never have a node (see GpuType.clean for the message people see).
            models.UniqueConstraint(fields=["node_label_key", "node_label_value"], name="gpu_type_node_label_unique")
        ]

    def __str__(self) -> str:
        return self.display_name

    def save(self, *args, **kwargs) -> None:
        super().save(*args, **kwargs)
        # Whoever edits the weight (admin, seed, shell), its history is kept for billing past days.
        from jobs.models.usage import BillingWeight

        latest = BillingWeight.objects.filter(gpu_type=self).order_by("-valid_from").first()
        if latest is None or latest.weight != Decimal(self.billing_weight):
            BillingWeight.objects.update_or_create(
                gpu_type=self, valid_from=timezone.localdate(), defaults={"weight": self.billing_weight}
            )

    @property
    def share(self) -> gpu_shares.GpuShare:
        return gpu_shares.GpuShare(
            kind=self.kind,
            parts=self.share_parts,
            of=self.share_of,
            physical=self.physical_gpu,
            memory_mib=self.device_memory_mib,
            most_per_container=self.max_per_container,
        )

    @property
    def described(self) -> str:
        """In words, for the Launch page: "1/7 of an A100, 10 GB (a MIG slice: ...)"."""
        return gpu_shares.describe(self.share, display_name=self.display_name)

    def clean(self) -> None:
        super().clean()
        problems = gpu_shares.share_problems(self.share)
        if problems:
            raise ValidationError(problems)
        other = node_label_owner(self.node_label_key, self.node_label_value, excluding=self.pk)
        if other is not None:
            raise ValidationError({"node_label_value": node_label_taken_message(self, other)})
        # Every container of the type asks for this much scratch disk: the team namespaces' LimitRange refuses
        # a pod above its maximum, so a larger size would leave every launch of the type waiting for ever.
        most = scratch_most_mib()
        too_large = {
            field: f"At most {most} MiB: the team namespaces' LimitRange allows no more per container "
            f"(TEAM_EPHEMERAL_STORAGE_DEFAULT = {settings.TEAM_EPHEMERAL_STORAGE_DEFAULT}), so Kubernetes "
            "would refuse every workload of this type."
            for field in ("ephemeral_storage_request_mib", "ephemeral_storage_limit_mib")
            if most is not None and (getattr(self, field) or 0) > most
        }
        if too_large:
            raise ValidationError(too_large)


def scratch_most_mib() -> int | None:
    """The most scratch disk (MiB) one container may have in a team namespace (the LimitRange's maximum,
    TEAM_EPHEMERAL_STORAGE_DEFAULT); None where that setting is no quantity Kubernetes reads."""
    from kubernetes.utils import parse_quantity

    try:
        return int(parse_quantity(settings.TEAM_EPHEMERAL_STORAGE_DEFAULT) // (1024 * 1024))
    except (ValueError, TypeError, ArithmeticError):
        return None


def node_label_owner(key: str, value: str, *, excluding: int | None = None) -> GpuType | None:
    """The GPU type that already selects nodes by `key=value`, if any (other than `excluding`)."""
    return GpuType.objects.filter(node_label_key=key, node_label_value=value).exclude(pk=excluding).first()


def node_label_taken_message(gpu_type: GpuType, other: GpuType) -> str:
    return (
        f"GPU type {other.slug!r} already selects nodes labelled "
        f"{gpu_type.node_label_key}={gpu_type.node_label_value}; each GPU type needs a label of its own "
        "(a node is counted under one type only)."
    )


class GpuNode(models.Model):
    """The portal's picture of a GPU node, refreshed from the cluster by one list call per resync."""

    name = models.CharField(max_length=253, unique=True)
    gpu_type = models.ForeignKey(GpuType, null=True, blank=True, on_delete=models.SET_NULL, related_name="nodes")
    gpus_capacity = models.PositiveIntegerField(default=0)
    gpus_allocatable = models.PositiveIntegerField(default=0)
    gpus_in_use = models.PositiveIntegerField(default=0)
    ready = models.BooleanField(default=False)
    schedulable = models.BooleanField(default=True)
    cuda_driver_version = models.CharField(max_length=8, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    # False where the node is labelled gpuportal.io/pulls-images=false: it reaches no registry (the local
    # cluster's real nodes, an air-gapped site), so only the images it already has run there.
    pulls_images = models.BooleanField(default=True)
    # The images such a node has (its kubelet's `.status.images`, canonical references); empty for a node
    # that pulls, whose images matter to nobody.
    images = models.JSONField(default=list, blank=True)
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU node"

    def __str__(self) -> str:
        return self.name


class CatalogImage(models.Model):
    """An image researchers can pick without typing a reference, with sensible defaults."""

    class Suits(models.TextChoices):
        BATCH = "batch", "Batch jobs"
        SERVICE = "service", "Services"
        ANY = "any", "Batch jobs and services"

    reference = models.CharField(max_length=255, unique=True)
    title = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    suits = models.CharField(max_length=10, choices=Suits.choices, default=Suits.ANY)
    default_command = models.JSONField(default=list, blank=True)
    default_args = models.JSONField(default=list, blank=True)
    default_port = models.PositiveIntegerField(null=True, blank=True)
    cuda_version = models.CharField(max_length=8, blank=True, validators=[CUDA_VERSION])
    enabled = models.BooleanField(default=True)
    # How a service learns the path the portal serves it under (/w/<uid>/): arguments appended to its
    # own, and environment variables, where "{base_url}" becomes "/w/<uid>/" and "{base_path}" the same
    # without the trailing slash (TensorBoard and DIGITS want that form). Every service also gets
    # GPUPORTAL_BASE_URL. "{home}" becomes the owner's home workspace (/home/<username>); an argument or
    # variable that names it is left out when workspaces are off.
    base_url_args = models.JSONField(
        default=list,
        blank=True,
        help_text='e.g. ["--ServerApp.base_url={base_url}"] or ["--path_prefix={base_path}"]; '
        '{home} is the owner\'s home workspace, e.g. "--ServerApp.root_dir={home}"',
    )
    base_url_env = models.JSONField(default=dict, blank=True, help_text='e.g. {"DIGITS_URL_PREFIX": "{base_path}"}')
    # User pods run as a fixed non-root uid. An image that cannot (it writes to /root, installs packages at
    # start) says so here, and runs as root only once an admin has approved this entry: both are needed.
    needs_root = models.BooleanField(default=False, help_text="The image only works when its container runs as root.")
    root_allowed = models.BooleanField(
        default=False, help_text="An admin's approval for this entry to run as root (only used if it needs root)."
    )
    read_only_root = models.BooleanField(
        default=False,
        help_text="The image works with a read-only root filesystem (it writes only to /tmp, home and mounts).",
    )
    runs_sshd = models.BooleanField(
        default=False,
        help_text="The image runs an SSH server on GPUPORTAL_SSH_PORT with GPUPORTAL_SSH_AUTHORIZED_KEYS (the "
        "portal's dev environment does): `gpuportal ssh-config` lists its running services, and their pages "
        "offer SSH and the Terminal.",
    )

    class Meta:
        ordering = ["title"]

    def __str__(self) -> str:
        return self.title

    @property
    def runs_as_root(self) -> bool:
        """Whether its workloads render without runAsNonRoot: it needs root and an admin allowed that."""
        return self.needs_root and self.root_allowed


class AllowedRegistry(models.Model):
    """A registry host custom images may come from (catalog images are always allowed)."""

    host = models.CharField(max_length=255, unique=True, help_text="e.g. docker.io, nvcr.io, registry.lab:5000")
    note = models.CharField(max_length=200, blank=True)
    pull_username = models.CharField(
        max_length=255, blank=True, help_text="Pull credentials for a private registry (both, or neither)."
    )
    # Sealed to the engine's public key (portal/sealing.py) by admin: only the engine's worker, which
    # writes the pull Secrets, can open it. Never shown back.
    pull_password_sealed = models.TextField(blank=True, editable=False)

    class Meta:
        ordering = ["host"]
        verbose_name_plural = "allowed registries"

    def __str__(self) -> str:
        return self.host

    @property
    def pull_secret_name(self) -> str:
        """The image pull Secret the portal keeps in every team namespace; empty without credentials."""
        return names.pull_secret_name(self.host) if self.has_credentials else ""

    @property
    def has_credentials(self) -> bool:
        return bool(self.pull_username and self.pull_password_sealed)
