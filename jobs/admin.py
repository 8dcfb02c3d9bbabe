from __future__ import annotations

from django.contrib import admin

from jobs.models import (
    AllowedRegistry,
    CatalogImage,
    GpuNode,
    GpuType,
    Membership,
    Quota,
    Team,
    Workload,
    WorkloadEvent,
)


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "monthly_gpu_hour_budget"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, QuotaInline]


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):
    list_display = [
        "slug",
        "display_name",
        "node_label_key",
        "node_label_value",
        "resource_name",
        "billing_weight",
        "enabled",
    ]
    list_editable = ["enabled"]


@admin.register(GpuNode)
class GpuNodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "gpu_type",
        "gpus_allocatable",
        "gpus_in_use",
        "ready",
        "cuda_driver_version",
        "last_seen_at",
    ]
    list_filter = ["gpu_type", "ready"]
    readonly_fields = [f.name for f in GpuNode._meta.fields]


@admin.register(CatalogImage)
class CatalogImageAdmin(admin.ModelAdmin):
    list_display = ["title", "reference", "suits", "cuda_version", "enabled"]
    search_fields = ["title", "reference"]


admin.site.register(AllowedRegistry)


class WorkloadEventInline(admin.TabularInline):
    model = WorkloadEvent
    extra = 0
    can_delete = False
    readonly_fields = ["at", "source", "from_state", "to_state", "reason", "message"]

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Workload)
class WorkloadAdmin(admin.ModelAdmin):
    list_display = ["name", "uid", "team", "owner", "kind", "gpu_type", "gpu_count", "state", "created_at"]
    list_filter = ["state", "team", "gpu_type", "kind"]
    search_fields = ["name", "uid", "owner__username", "image"]
    readonly_fields = [
        "uid", "state", "reason", "message", "exit_code", "namespace", "k8s_name", "node_name", "pod_name",
        "pod_uid", "admitted_at", "submitted_at", "started_at", "finished_at", "state_changed_at",
    ]  # fmt: skip
    inlines = [WorkloadEventInline]
    list_select_related = ["team", "owner", "gpu_type"]
