"""Admin for workspaces: every claim with its size and what Kubernetes says of it, and the one way to
delete a workspace's data (an explicit action, recorded as a WorkspaceDeletion)."""

from __future__ import annotations

import logging
from functools import partial

from django.contrib import admin, messages
from django.db import transaction
from kubernetes.client.exceptions import ApiException

from jobs import tasks
from jobs.kube import client as kube
from jobs.models import Dataset, Workspace, WorkspaceDeletion

log = logging.getLogger(__name__)


def _claim_status(namespaces: set[str]) -> dict[tuple[str, str], str]:
    """Phase and bound capacity of the portal's claims, one list call per namespace; best effort."""
    found: dict[tuple[str, str], str] = {}
    for namespace in sorted(namespaces):
        try:
            claims = kube.core().list_namespaced_persistent_volume_claim(namespace, _request_timeout=kube.timeout())
        except (ApiException, OSError) as exc:
            log.warning("workspace admin: cannot list claims in %s: %s", namespace, exc)
            continue
        for claim in claims.items:
            capacity = ((claim.status.capacity or {}) if claim.status else {}).get("storage", "")
            phase = claim.status.phase if claim.status else ""
            found[(namespace, claim.metadata.name)] = f"{phase}{f', {capacity}' if capacity else ''}"
    return found


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin):
    list_display = [
        "claim_name",
        "team",
        "owner",
        "mount_path",
        "size_gib",
        "kubernetes",
        "storage_class",
        "created_at",
    ]
    list_filter = ["team"]
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
    ]
    actions = ["delete_data"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # only through "delete_data", which deletes the claim too and records it

    def changelist_view(self, request, extra_context=None):
        self._status = _claim_status(set(Workspace.objects.values_list("namespace", flat=True)))
        return super().changelist_view(request, extra_context)

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
            transaction.on_commit(
                partial(tasks.delete_workspace_data.delay, workspace.id, request.user.id), robust=True
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
