"""What the API reads and writes. Output serializers render engine objects; the one input serializer
describes a submission, for the schema and for `parse_submission`'s type checks alike; the rules about
its values live in jobs.services.validation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.errors import Invalid
from identity.models import Membership
from jobs.models import CatalogImage, Kind, State, Team, Workload, WorkloadEvent
from jobs.policy import may_open_as_member, visible_env
from jobs.selectors import mounts_with_use
from jobs.services import opening
from jobs.services.spec_fields import field_limits, item_limits, time_limit_limits
from jobs.services.storage.workspaces import DATASETS_ROOT
from spec_rules import SWEEP_AT_MOST


# --- errors ---------------------------------------------------------------------------------------
class ErrorDetailSerializer(serializers.Serializer):
    status = serializers.IntegerField()
    code = serializers.CharField()
    message = serializers.CharField()
    fields = serializers.DictField(child=serializers.ListField(child=serializers.CharField()))


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


# --- workloads ------------------------------------------------------------------------------------
class EnvVarSerializer(serializers.Serializer):
    name = serializers.CharField(**field_limits("env.name"))
    value = serializers.CharField(allow_blank=True, **field_limits("env.value"))


class EnvVarShownSerializer(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.CharField(
        allow_blank=True, allow_null=True, help_text="null unless you own the workload (teammates see names only)."
    )


class SecretRefSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="A stored secret's name (see /api/v1/secrets/).")
    env = serializers.CharField(
        required=False, allow_blank=True, help_text="Also set this environment variable to its value."
    )


class MountSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=["home", "team", "dataset"], help_text="home: the owner's; team: shared; dataset: read-only data."
    )
    name = serializers.CharField(required=False, help_text="A dataset's name.")
    mount_path = serializers.CharField(help_text="Where the container sees it.")
    claim = serializers.CharField(help_text="The PersistentVolumeClaim in the team namespace.")
    read_only = serializers.BooleanField()
    size_gib = serializers.IntegerField(min_value=1, allow_null=True, help_text="null for datasets.")
    used_bytes = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        help_text="Workspaces: bytes in use as a node agent last measured them; null until measured.",
    )
    used_measured_at = serializers.DateTimeField(
        required=False, allow_null=True, help_text="Workspaces: when used_bytes was measured."
    )


class WorkloadListSerializer(serializers.ListSerializer):
    """Many workloads: their workspaces' use is read in one query for the whole page."""

    def to_representation(self, data: Any) -> list[dict[str, Any]]:
        workloads = list(data.all() if hasattr(data, "all") else data)
        self.child.mounts_shown = mounts_with_use(workloads)
        try:
            return [self.child.to_representation(workload) for workload in workloads]
        finally:
            self.child.mounts_shown = None


class WorkloadSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    gpu_type = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    command = serializers.ListField(child=serializers.CharField(), read_only=True)
    args = serializers.ListField(child=serializers.CharField(), read_only=True)
    env = serializers.SerializerMethodField(help_text="Plain variables; values only for the workload's owner.")
    secrets = SecretRefSerializer(
        many=True, read_only=True, help_text="Secrets it uses, by name; each is a file in /var/run/secrets/gpuportal/."
    )
    mounts = MountSerializer(many=True, read_only=True, help_text="Persistent volumes mounted into it.")
    queue_position = serializers.SerializerMethodField(help_text="1 = next to be admitted; null unless queued.")
    gpu_hours = serializers.SerializerMethodField(help_text="GPU-hours so far (live while running).")
    last_checkpoint = serializers.SerializerMethodField(
        help_text="Its newest reported checkpoint: {at, step, age_seconds}; null if none."
    )
    lost_gpu_hours = serializers.SerializerMethodField(
        help_text="GPU-hours of work its stops threw away (since the last checkpoint, or since a start)."
    )
    retry_limit = serializers.SerializerMethodField(
        help_text="Automatic retries allowed after ends that are not its fault (its launch's, else its team's)."
    )
    retry_limit_from_launch = serializers.SerializerMethodField(
        help_text="Whether its launch chose retry_limit (false: its team's default, which follows the team's setting)."
    )
    gpu_count = serializers.SerializerMethodField(help_text="GPUs per node (all of its GPUs unless it is a gang job).")
    gpus_total = serializers.SerializerMethodField(help_text="GPUs it holds in all: nodes × gpu_count.")
    open_url = serializers.SerializerMethodField(
        help_text="A service: where to open it in a browser (the portal's proxy, signed in). Empty for batch jobs."
    )
    ssh = serializers.SerializerMethodField(
        help_text="Whether you can SSH into it (gpuportal ssh, scp, VS Code Remote-SSH) while it runs: a service "
        "you may open (yours, or a teammate's shared with the team) whose catalog image runs an SSH server."
    )
    ssh_origin = serializers.SerializerMethodField(
        help_text="Where its SSH tunnel (/w/_ssh/<uid>) is served when services have an origin of their own (the "
        "portal's host then has no /w/). Empty: on the portal's own address, the one this API is reached at."
    )

    mounts_shown: dict[int, list[dict[str, Any]]] | None = None

    class Meta:
        model = Workload
        list_serializer_class = WorkloadListSerializer
        fields = [
            "uid", "name", "team", "owner", "kind", "image", "catalog_image", "gpu_type", "gpu_count",
            "nodes", "gpus_total", "topology", "command", "args", "env", "secrets", "port", "mounts", "cpu_millicores", "memory_mib", "time_limit_seconds", "priority", "restartable",
            "borrowed", "attempt", "estimated_start_at", "wait_reason", "state", "reason", "message", "exit_code",
            "queue_position", "gpu_hours", "last_checkpoint", "lost_gpu_hours", "retries", "retry_limit",
            "retry_limit_from_launch", "retryable_exit_codes", "checkpoint_workspace",
            "namespace", "k8s_name", "node_name", "pod_name", "open_url", "ssh", "ssh_origin", "shared_with_team",
            "last_activity_at", "created_at", "admitted_at", "submitted_at", "started_at", "finished_at",
            "state_changed_at",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(EnvVarShownSerializer(many=True))
    def get_env(self, workload: Workload) -> list[dict[str, str | None]]:
        return visible_env(getattr(self.context.get("request"), "user", None), workload)

    @extend_schema_field(serializers.IntegerField(min_value=1))
    def get_gpu_count(self, workload: Workload) -> int:
        return workload.gpus_per_node

    @extend_schema_field(serializers.IntegerField(min_value=1))
    def get_gpus_total(self, workload: Workload) -> int:
        return workload.gpu_count

    @extend_schema_field(serializers.IntegerField(allow_null=True, min_value=1))
    def get_queue_position(self, workload: Workload) -> int | None:
        if workload.state != State.QUEUED:
            return None
        return getattr(workload, "queue_position", None)

    @extend_schema_field(serializers.FloatField(min_value=0))
    def get_gpu_hours(self, workload: Workload) -> float:
        now = self.context.get("now") or timezone.now()
        return round(workload.gpu_seconds(now) / 3600, 6)

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_last_checkpoint(self, workload: Workload) -> dict | None:
        if workload.last_checkpoint_at is None:
            return None
        now = self.context.get("now") or timezone.now()
        return {
            "at": _when(workload.last_checkpoint_at),
            "step": workload.last_checkpoint_step,
            "age_seconds": max(0, int((now - workload.last_checkpoint_at).total_seconds())),
        }

    @extend_schema_field(serializers.FloatField(min_value=0))
    def get_lost_gpu_hours(self, workload: Workload) -> float:
        return round(workload.lost_gpu_seconds / 3600, 6)

    @extend_schema_field(serializers.BooleanField())
    def get_retry_limit_from_launch(self, workload: Workload) -> bool:
        return workload.retry_limit is not None

    @extend_schema_field(serializers.IntegerField(min_value=0))
    def get_retry_limit(self, workload: Workload) -> int:
        if workload.retry_limit is not None:
            return workload.retry_limit
        listed = getattr(workload, "listed_team_retry_limit", None)  # a list page read it as a column
        return listed if listed is not None else workload.team.default_retry_limit

    @extend_schema_field(serializers.CharField(allow_blank=True))
    def get_open_url(self, workload: Workload) -> str:
        return opening.open_url(workload)

    @extend_schema_field(serializers.BooleanField())
    def get_ssh(self, workload: Workload) -> bool:
        if workload.kind != Kind.SERVICE or workload.catalog_image_id is None:
            return False
        user = getattr(self.context.get("request"), "user", None)
        if not hasattr(self, "_ssh_facts"):  # two queries per response, however many rows
            teams = set(Membership.objects.filter(user_id=getattr(user, "pk", None)).values_list("team_id", flat=True))
            images = set(CatalogImage.objects.filter(runs_sshd=True).values_list("id", flat=True))
            self._ssh_facts = (teams, images)
        teams, images = self._ssh_facts
        return (
            workload.catalog_image_id in images
            and workload.team_id in teams
            and may_open_as_member(user, workload)  # a former member keeps no door, as for Open
        )

    @extend_schema_field(serializers.CharField(allow_blank=True))
    def get_ssh_origin(self, workload: Workload) -> str:
        return opening.service_origin(workload.uid) if workload.kind == Kind.SERVICE else ""

    def to_representation(self, workload: Workload) -> dict[str, Any]:
        # The declared fields above are the contract (and the schema); this writes the same output
        # directly, since the generic per-field path was a third of a 50-row page's time.
        w = workload
        return {
            "uid": w.uid, "name": w.name, "team": w.team.slug, "owner": w.owner.get_username(), "kind": w.kind,
            "image": w.image, "catalog_image": w.catalog_image_id, "gpu_type": w.gpu_type.slug,
            "gpu_count": w.gpus_per_node, "nodes": w.nodes, "gpus_total": w.gpu_count, "topology": w.topology,
            "command": list(w.command or []), "args": list(w.args or []),
            "env": self.get_env(w),
            "secrets": [{"name": s["name"], "env": s.get("env", "")} for s in w.secrets or []], "port": w.port,
            "mounts": self._mounts(w),
            "time_limit_seconds": w.time_limit_seconds, "priority": w.priority, "restartable": w.restartable,
            "borrowed": w.borrowed, "attempt": w.attempt,
            "estimated_start_at": _when(w.estimated_start_at) if w.state == State.QUEUED else None,
            "wait_reason": w.wait_reason if w.state == State.QUEUED else "", "state": w.state,
            "reason": w.reason, "message": w.message, "exit_code": w.exit_code,
            "queue_position": self.get_queue_position(w), "gpu_hours": self.get_gpu_hours(w),
            "last_checkpoint": self.get_last_checkpoint(w), "lost_gpu_hours": self.get_lost_gpu_hours(w),
            "retries": w.retries, "retry_limit": self.get_retry_limit(w),
            "retry_limit_from_launch": self.get_retry_limit_from_launch(w),
            "retryable_exit_codes": list(w.retryable_exit_codes or []), "checkpoint_workspace": w.checkpoint_workspace,
            "namespace": w.namespace, "k8s_name": w.k8s_name, "node_name": w.node_name, "pod_name": w.pod_name,
            "open_url": opening.open_url(w), "ssh": self.get_ssh(w), "ssh_origin": self.get_ssh_origin(w),
            "shared_with_team": w.shared_with_team,
            "cpu_millicores": w.cpu_millicores, "memory_mib": w.memory_mib,
            "last_activity_at": _when(w.last_activity_at),
            "created_at": _when(w.created_at), "admitted_at": _when(w.admitted_at),
            "submitted_at": _when(w.submitted_at), "started_at": _when(w.started_at),
            "finished_at": _when(w.finished_at), "state_changed_at": _when(w.state_changed_at),
        }  # fmt: skip

    def _mounts(self, workload: Workload) -> list[dict[str, Any]]:
        shown = self.mounts_shown.get(workload.id) if self.mounts_shown is not None else None
        if shown is None:
            shown = mounts_with_use([workload])[workload.id]
        return [{k: _when(m[k]) if k == "used_measured_at" else m[k] for k in _MOUNT_KEYS if k in m} for m in shown]


_DATETIME = serializers.DateTimeField()
_MOUNT_KEYS = ("kind", "name", "mount_path", "claim", "read_only", "size_gib", "used_bytes", "used_measured_at")


def _when(value: datetime | None) -> str | None:
    return None if value is None else _DATETIME.to_representation(value)


class WorkloadCreateSerializer(serializers.Serializer):
    """A submission. Unknown fields are refused; only `gpu_type` and an image are required.

    The one description of the request: the schema shows it and `parse_submission` checks each field's
    JSON type by it. Its limits are jobs.services.spec_fields' (the launch form reads the same); the rules
    beyond them are jobs.services.validation's."""

    team = serializers.CharField(required=False, help_text="Team slug; may be left out if you are in one team.")
    name = serializers.CharField(
        required=False, **field_limits("name"), help_text="DNS label; made from the image if empty."
    )
    kind = serializers.ChoiceField(required=False, default=Kind.BATCH, **field_limits("kind"))
    image = serializers.CharField(required=False, **field_limits("image"), help_text="Custom image reference.")
    catalog_image = serializers.IntegerField(required=False, allow_null=True, help_text="Catalog image id.")
    gpu_type = serializers.CharField(help_text="GPU type slug, e.g. p100.")
    gpu_count = serializers.IntegerField(
        required=False, default=1, **field_limits("gpu_count"), help_text="GPUs per node (per rank of a gang job)."
    )
    nodes = serializers.IntegerField(
        required=False,
        default=1,
        **field_limits("nodes"),
        help_text="Batch jobs: nodes to run on, one rank each (a gang job, admitted and started all or nothing).",
    )
    topology = serializers.ChoiceField(
        required=False,
        default="",
        **field_limits("topology"),
        help_text="A gang job: whether its ranks must (required) or should (preferred) share one value of the "
        "site's topology label (a zone, a rack).",
    )
    command = serializers.ListField(
        child=serializers.CharField(allow_blank=True, **item_limits("command")),
        required=False,
        **field_limits("command"),
    )
    args = serializers.ListField(
        child=serializers.CharField(allow_blank=True, **item_limits("args")), required=False, **field_limits("args")
    )
    env = EnvVarSerializer(many=True, required=False, **field_limits("env"))
    secrets = SecretRefSerializer(many=True, required=False, **field_limits("secrets"))
    cpu_millicores = serializers.IntegerField(
        required=False,
        allow_null=True,
        **field_limits("cpu_millicores"),
        help_text="CPU for the pod, above the type's default up to its limit.",
    )
    memory_mib = serializers.IntegerField(
        required=False,
        allow_null=True,
        **field_limits("memory_mib"),
        help_text="Memory (MiB) for the pod, above the default up to the limit.",
    )
    datasets = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        **field_limits("datasets"),
        help_text="Datasets to mount read-only at /datasets/<name>.",
    )
    port = serializers.IntegerField(required=False, allow_null=True, **field_limits("port"))
    time_limit_seconds = serializers.IntegerField(
        required=False,
        allow_null=True,
        **time_limit_limits(settings.PORTAL_MIN_TIME_LIMIT, settings.PORTAL_MAX_TIME_LIMIT).kwargs(),
        help_text="Empty: the portal's default for the kind.",
    )
    priority = serializers.IntegerField(required=False, default=0, **field_limits("priority"))
    restartable = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Batch jobs: if preempted by a lender reclaiming its GPUs, requeue at the front instead of failing.",
    )
    shared_with_team = serializers.BooleanField(
        required=False, default=False, help_text="A service: teammates may open it too (its owner always can)."
    )
    retry_limit = serializers.IntegerField(
        required=False, allow_null=True, **field_limits("retry_limit"),
        help_text="Restartable batch jobs: automatic retries after ends that are not its fault (evicted, node "
        "lost, GPU fault, image pull timed out). Empty: the team's default.",
    )  # fmt: skip
    retryable_exit_codes = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=255), required=False, **field_limits("retryable_exit_codes"),
        help_text="Exit codes of its own that are retried like a fault (e.g. [75]); any other exit code is final.",
    )  # fmt: skip
    checkpoint_workspace = serializers.ChoiceField(
        required=False, **field_limits("checkpoint_workspace"),
        help_text="Where $GPUPORTAL_CHECKPOINT_DIR lies: home (default) or team (the shared space).",
    )  # fmt: skip


class WorkloadSpecSerializer(WorkloadCreateSerializer):
    """One workload of a batch: a submission without `team` (the batch names it once)."""

    team = None


class WorkloadBatchCreateSerializer(serializers.Serializer):
    """Several submissions to one team, stored all or none (a sweep: the same image, other arguments)."""

    team = serializers.CharField(required=False, help_text="Team slug; may be left out if you are in one team.")
    workloads = WorkloadSpecSerializer(
        many=True, help_text=f"1 to {SWEEP_AT_MOST} submissions, each as for a single one."
    )


class WorkloadBatchSerializer(serializers.Serializer):
    """The workloads a batch stored, in the order they were given."""

    workloads = WorkloadSerializer(many=True)


def parse_batch(payload: Any) -> tuple[str | None, list[dict[str, Any]]]:
    """Check a batch's JSON types as `parse_submission` checks one; returns (team slug, specs). Errors
    name each item's field as `workloads[i].field`."""
    if not isinstance(payload, dict):
        raise Invalid({"non_field_errors": ["Send a JSON object."]}, "Send a JSON object.")
    unknown = {name: ["Unknown field."] for name in payload if name not in ("team", "workloads")}
    if unknown:
        raise Invalid(unknown)
    items = payload.get("workloads")
    if not isinstance(items, list):
        raise Invalid({"workloads": ["Give a list of workloads, each as for a single submission."]})
    errors: dict[str, list[str]] = {}
    specs = []
    for index, item in enumerate(items):
        if isinstance(item, dict) and "team" in item:
            errors[f"workloads[{index}].team"] = ['Name the team once, beside "workloads".']
            continue
        try:
            specs.append(parse_submission(item)[1])
        except Invalid as invalid:
            for name, messages in invalid.detail.items():
                where = f"workloads[{index}]" if name == "non_field_errors" else f"workloads[{index}].{name}"
                errors[where] = [str(m) for m in messages]
    if errors:
        raise Invalid(errors)
    return payload.get("team"), specs


def parse_submission(payload: Any) -> tuple[str | None, dict[str, Any]]:
    """Check JSON types strictly (the engine judges the values); returns (team slug, spec). The types are
    read off WorkloadCreateSerializer, the one description of the request (the schema shows the same)."""
    if not isinstance(payload, dict):
        raise Invalid({"non_field_errors": ["Send a JSON object."]}, "Send a JSON object.")
    errors = {name: [problem] for name, value in payload.items() if (problem := _type_problem(name, value))}
    if errors:
        raise Invalid(errors)
    spec = dict(payload)
    return spec.pop("team", None), spec


def _type_problem(name: str, value: Any) -> str | None:
    if name not in _TYPE_CHECKS:
        return "Unknown field."
    check = _TYPE_CHECKS[name]
    if check is None or check.accepts(value):
        return None
    return check.message


@dataclass(frozen=True)
class _TypeCheck:
    accepts: Callable[[Any], bool]
    message: str


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_env_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(e, dict)
        and set(e) == {"name", "value"}
        and isinstance(e["name"], str)
        and isinstance(e["value"], str)
        for e in value
    )


def _type_check(field: serializers.Field) -> _TypeCheck | None:
    """The JSON type a submission's field must have, read off the serializer field that documents it; None
    for a field whose whole value the engine judges (secrets, retryable exit codes)."""
    if isinstance(field, serializers.BooleanField):
        return _TypeCheck(lambda v: isinstance(v, bool), "Must be true or false.")
    if isinstance(field, serializers.CharField | serializers.ChoiceField):
        return _TypeCheck(lambda v: isinstance(v, str), "Must be a string.")
    if isinstance(field, serializers.IntegerField) and field.allow_null:
        return _TypeCheck(lambda v: v is None or _is_integer(v), "Must be an integer or null.")
    if isinstance(field, serializers.IntegerField):
        return _TypeCheck(_is_integer, "Must be an integer.")
    if isinstance(field, serializers.ListField) and isinstance(field.child, serializers.CharField):
        return _TypeCheck(
            lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "Must be a list of strings."
        )
    if isinstance(field, serializers.ListSerializer) and isinstance(field.child, EnvVarSerializer):
        return _TypeCheck(_is_env_list, 'Must be a list of {"name": ..., "value": ...} objects with string values.')
    return None


# Every field a submission may have, and how its JSON type is checked (a field not here is unknown).
_TYPE_CHECKS: dict[str, _TypeCheck | None] = {
    name: _type_check(field) for name, field in WorkloadCreateSerializer().fields.items()
}


class TimelineEntrySerializer(serializers.ModelSerializer):
    from_state = serializers.CharField(allow_blank=True, help_text="Empty for the first entry.")
    to_state = serializers.CharField(allow_blank=True, help_text="Empty for an event that changed no state.")

    class Meta:
        model = WorkloadEvent
        fields = ["at", "source", "from_state", "to_state", "reason", "message"]
        read_only_fields = fields


class KubeEventSerializer(serializers.Serializer):
    at = serializers.DateTimeField(allow_null=True)
    type = serializers.CharField()
    reason = serializers.CharField(allow_blank=True)
    message = serializers.CharField(allow_blank=True)
    object = serializers.CharField()
    count = serializers.IntegerField()


class WorkloadEventsSerializer(serializers.Serializer):
    timeline = TimelineEntrySerializer(many=True, help_text="State changes recorded by the portal.")
    kubernetes = KubeEventSerializer(many=True, help_text="Kubernetes events about the workload's objects.")


# --- teams, GPU types, quotas ---------------------------------------------------------------------
class TeamSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["slug", "name", "monthly_gpu_hour_budget", "role"]
        read_only_fields = fields

    @extend_schema_field(serializers.ChoiceField(choices=["member", "manager", "admin"]))
    def get_role(self, team: Team) -> str:
        return self.context["roles"].get(team.id, "admin")


class QuotaUseSerializer(serializers.Serializer):
    gpu_type = serializers.CharField(source="gpu_type.slug")
    limit = serializers.IntegerField(min_value=0, help_text="Most GPUs the team may hold at once.")
    used = serializers.IntegerField(min_value=0, help_text="GPUs held now (submitting, pending, running).")
    queued = serializers.IntegerField(min_value=0, help_text="GPUs asked for by queued workloads.")
    free = serializers.IntegerField(min_value=0)


class CapacitySerializer(serializers.Serializer):
    total = serializers.IntegerField(min_value=0)
    free = serializers.IntegerField(min_value=0)
    largest_node = serializers.IntegerField(min_value=0)
    nodes = serializers.IntegerField(min_value=0)


class GpuTypeSerializer(serializers.Serializer):
    slug = serializers.CharField()
    display_name = serializers.CharField()
    enabled = serializers.BooleanField()
    billing_weight = serializers.DecimalField(max_digits=6, decimal_places=3, coerce_to_string=False)
    kind = serializers.ChoiceField(
        choices=["whole", "mig", "time_sliced"],
        help_text="whole: a GPU; mig: a MIG slice (its own memory and compute); time_sliced: a turn on a shared GPU.",
    )
    gpu_share = serializers.FloatField(help_text="How much of a physical GPU one device is (1/7 for mig-1g.10gb).")
    described = serializers.CharField(help_text='In words, e.g. "1/7 of an A100, 10 GB".')
    max_per_container = serializers.IntegerField(
        allow_null=True, help_text="Most devices one container may take (slices: 1 unless allowed more); null: no cap."
    )
    max_cuda_version = serializers.CharField(
        allow_blank=True,
        help_text="Highest CUDA version this type's drivers run (set by an admin, else learnt from the nodes); "
        "empty: unknown. A catalog image needing a newer one is refused on this type.",
    )
    cluster = CapacitySerializer(help_text="GPUs in the cluster, from the last inventory sync.")
    quota = QuotaUseSerializer(allow_null=True, help_text="Your team's quota and use; null: no quota for it.")


class WaitingExplainedSerializer(serializers.Serializer):
    uid = serializers.CharField(source="workload.uid")
    name = serializers.CharField(source="workload.name")
    owner = serializers.CharField(source="workload.owner.username")
    gpu_count = serializers.IntegerField(source="workload.gpu_count")
    position = serializers.IntegerField(help_text="1 = next to be admitted, in the team's queue order.")
    reason = serializers.CharField(help_text="team quota, borrowing limit, cohort, user cap, cluster capacity.")
    explanation = serializers.CharField()
    estimated_start_at = serializers.DateTimeField(allow_null=True)


class TypeQueueSerializer(serializers.Serializer):
    gpu_type = serializers.CharField(source="gpu_type.slug")
    quota = serializers.IntegerField(help_text="The team's own quota.")
    borrowing_limit = serializers.IntegerField()
    lending_limit = serializers.IntegerField(allow_null=True)
    in_cohort = serializers.BooleanField()
    held = serializers.IntegerField(help_text="GPUs the team holds now, borrowed ones included.")
    borrowed = serializers.IntegerField(help_text="GPUs held beyond the team's own quota.")
    lent = serializers.IntegerField(help_text="Of the team's idle quota, GPUs other teams of its cohort use now.")
    waiting_workloads = serializers.IntegerField()
    waiting_gpus = serializers.IntegerField()
    first_waiting = WaitingExplainedSerializer(many=True)


class QueueSerializer(serializers.Serializer):
    team = serializers.CharField()
    quotas = QuotaUseSerializer(many=True)
    queued = WorkloadSerializer(many=True, help_text="Queued workloads in admission order per GPU type.")
    sharing = TypeQueueSerializer(many=True, help_text="Per GPU type: own quota, borrowed, lent, waiting and why.")


# --- catalog and usage ----------------------------------------------------------------------------
class DatasetSerializer(serializers.Serializer):
    name = serializers.CharField(read_only=True, help_text="What a submission's `datasets` names.")
    description = serializers.CharField(read_only=True)
    mount_path = serializers.SerializerMethodField(help_text="Where it is mounted, read-only, in the container.")

    def get_mount_path(self, dataset) -> str:
        return f"{DATASETS_ROOT}/{dataset.name}"


class CatalogImageSerializer(serializers.ModelSerializer):
    default_command = serializers.ListField(child=serializers.CharField(), read_only=True)
    default_args = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = CatalogImage
        fields = [
            "id", "reference", "title", "description", "suits", "default_command", "default_args",
            "default_port", "cuda_version", "needs_root", "root_allowed",
        ]  # fmt: skip
        extra_kwargs = {
            "needs_root": {"help_text": "The image only works as root; its workloads run as root only if allowed."},
            "root_allowed": {"help_text": "An administrator allowed it to run as root; without that it is refused."},
        }
        read_only_fields = fields


class UsageEntrySerializer(serializers.Serializer):
    key = serializers.CharField(help_text="The day (YYYY-MM-DD), username or GPU type slug.")
    gpu_hours = serializers.FloatField(min_value=0)
    weighted_gpu_hours = serializers.FloatField(
        min_value=0, help_text="GPU-equivalent hours times the billing weight (what budgets count)."
    )
    borrowed_gpu_hours = serializers.FloatField(
        min_value=0, help_text="Of gpu_hours, those on GPUs borrowed from the team's cohort."
    )
    lost_gpu_hours = serializers.FloatField(
        min_value=0,
        help_text="Of gpu_hours, the work stops threw away (preemptions, retried faults): since each run's last "
        "checkpoint, or its start; counted on the day of the stop.",
    )
    gpu_equivalent_hours = serializers.FloatField(
        min_value=0, help_text="Whole-GPU hours: a MIG slice or time-sliced share counts its share of a GPU."
    )


class UsageSerializer(serializers.Serializer):
    team = serializers.CharField()
    start = serializers.DateField()
    end = serializers.DateField()
    group_by = serializers.ChoiceField(choices=["day", "user", "gpu_type"])
    rows = UsageEntrySerializer(many=True)
    total_gpu_hours = serializers.FloatField(min_value=0)
    total_weighted_gpu_hours = serializers.FloatField(min_value=0)
    total_borrowed_gpu_hours = serializers.FloatField(min_value=0)
    total_lost_gpu_hours = serializers.FloatField(min_value=0)
    total_gpu_equivalent_hours = serializers.FloatField(min_value=0)
