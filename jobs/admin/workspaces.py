"""Admin for workspaces: every claim with its size, how much of it is used (as node agents measure it,
telemetry.services.ingest), what Kubernetes says of it, and the one way to delete a workspace's data (an
explicit action, recorded as a WorkspaceDeletion).

An admin keeping a few dozen people inside their storage wants the full ones first: the list sorts by
use (fullest first from the column header), filters on 75 % / 90 % / not measured, and warns above the
list when any workspace has reached 90 % of its size."""

from __future__ import annotations

import logging

from django.contrib import admin, messages
from django.db.models import ExpressionWrapper, F, FloatField, QuerySet
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.html import format_html
from django.utils.timesince import timesince
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from jobs.kube import client as kube
from jobs.models import Dataset, Workspace, WorkspaceDeletion
from jobs.services import dispatch
from jobs.templatetags.portal_ui import binary_size

log = logging.getLogger(__name__)


def _claim_status(namespaces: set[str]) -> dict[tuple[str, str], str]:
    """Phase and bound capacity of the portal's claims, one list call per namespace; best effort."""
    found: dict[tuple[str, str], str] = {}
    for namespace in sorted(namespaces):
        try:
            claims = kube.core().list_namespaced_persistent_volume_claim(namespace, _request_timeout=kube.timeout())
        except (ApiException, OSError, HTTPError, kube.KubeConfigError) as exc:
            log.warning("workspace admin: cannot list claims in %s: %s", namespace, exc)
            continue
        for claim in claims.items:
            capacity = ((claim.status.capacity or {}) if claim.status else {}).get("storage", "")
            phase = claim.status.phase if claim.status else ""
            found[(namespace, claim.metadata.name)] = f"{phase}{f', {capacity}' if capacity else ''}"
    return found


GIB = 1024**3
WARN_FRACTION = 0.9  # at or above this share of its size a workspace is flagged


class UseFilter(admin.SimpleListFilter):
    title = "use"
    parameter_name = "use"

    def lookups(self, request, model_admin):
        return [("90", "90 % of its size or more"), ("75", "75 % or more"), ("none", "not measured yet")]

    def queryset(self, request, queryset):
        if self.value() == "none":
            return queryset.filter(used_bytes__isnull=True)
        if self.value() in ("90", "75"):
            return queryset.filter(use_ratio__gte=int(self.value()) / 100)
        return queryset


def with_use_ratio(queryset: QuerySet[Workspace]) -> QuerySet[Workspace]:
    """Annotates used bytes over the claim's size (null until measured), for sorting and filtering."""
    # In floating point from the start: size_gib * 2**30 overflows a 32-bit integer from 2 GiB on.
    ratio = Cast(F("used_bytes"), FloatField()) / (Cast(F("size_gib"), FloatField()) * float(GIB))
    return queryset.annotate(use_ratio=ExpressionWrapper(ratio, output_field=FloatField()))


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = [
        "claim_name",
        "team",
        "owner",
        "mount_path",
        "use",
        "measured",
        "kubernetes",
        "storage_class",
        "created_at",
    ]
    list_filter = [UseFilter, "team"]
    search_fields = ["claim_name", "owner__username", "team__name"]
    readonly_fields = [
        "team",
        "owner",
        "namespace",
        "claim_name",
        "mount_path",
        "size_gib",
        "storage_class",
        "created_at",
        "volume_name",
        "use",
        "measured",
        "capacity_bytes",
    ]
    actions = ["delete_data"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # only through "delete_data", which deletes the claim too and records it

    def get_queryset(self, request):
        return with_use_ratio(super().get_queryset(request).select_related("team", "owner"))

    def changelist_view(self, request, extra_context=None):
        self._status = _claim_status(set(Workspace.objects.values_list("namespace", flat=True)))
        full = with_use_ratio(Workspace.objects.all()).filter(use_ratio__gte=WARN_FRACTION).count()
        if full and request.method == "GET":
            self.message_user(
                request,
                f"{full} workspace{'s are' if full != 1 else ' is'} at {WARN_FRACTION * 100:.0f} % of "
                f"{'their' if full != 1 else 'its'} size or more (filter by use to see which).",
                messages.WARNING,
            )
        return super().changelist_view(request, extra_context)

    @admin.display(description="Used / size", ordering=F("use_ratio").asc(nulls_first=True))
    def use(self, workspace: Workspace) -> str:
        size = binary_size(workspace.size_bytes)
        if workspace.used_bytes is None:
            return format_html('not measured yet <span class="quiet">/ {}</span>', size)
        fraction = workspace.used_fraction or 0.0
        warn = fraction >= WARN_FRACTION
        return format_html(
            '<meter min="0" max="1" low="0.75" high="{}" optimum="0" value="{}" title="{}"></meter> {}{} / {} ({} %)',
            WARN_FRACTION,
            f"{min(fraction, 1.0):.4f}",
            f"{fraction * 100:.0f} % used",
            "\u26a0 " if warn else "",
            binary_size(workspace.used_bytes),
            size,
            f"{fraction * 100:.0f}",
        )

    @admin.display(description="Measured", ordering="used_measured_at")
    def measured(self, workspace: Workspace) -> str:
        if workspace.used_measured_at is None:
            return "—"
        ago = timesince(workspace.used_measured_at, timezone.now())
        return f"{ago} ago on {workspace.used_measured_on}" if workspace.used_measured_on else f"{ago} ago"

    @admin.display(description="In Kubernetes (phase, capacity)")
    def kubernetes(self, workspace: Workspace) -> str:
        return getattr(self, "_status", {}).get((workspace.namespace, workspace.claim_name), "not found")

    @admin.action(description="Delete the data of the selected workspaces (cannot be undone)")
    def delete_data(self, request, queryset):
        if not request.user.is_superuser:
            self.message_user(request, "Only superusers may delete workspace data.", messages.ERROR)
            return
        # The engine deletes the claims: the web's identity holds no write rights on them.
        for workspace in queryset:
            dispatch.enqueue_workspace_data_delete(
                workspace_id=workspace.id,
                by_user_id=request.user.id,
                claim=f"{workspace.namespace}/{workspace.claim_name}",
            )
            self.message_user(
                request,
                f"The data of {workspace} will be deleted by the engine; Workspace deletions records it when done.",
                messages.SUCCESS,
            )


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "description", "claim_name", "nfs_server", "nfs_path", "enabled"]
    list_filter = ["enabled"]
    search_fields = ["name", "description"]
    filter_horizontal = ["teams"]


@admin.register(WorkspaceDeletion)
class WorkspaceDeletionAdmin(admin.ModelAdmin):
    list_display = ["claim_name", "namespace", "team_name", "owner_username", "size_gib", "deleted_by", "deleted_at"]
    readonly_fields = list_display

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
