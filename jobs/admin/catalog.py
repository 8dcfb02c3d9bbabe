from __future__ import annotations

from django.contrib import admin

from jobs.models import AllowedRegistry, CatalogImage, GpuNode, GpuType


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
    search_fields = ["slug", "display_name"]


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

    def has_add_permission(self, request):
        return False  # nodes come from the cluster's inventory sync


@admin.register(CatalogImage)
class CatalogImageAdmin(admin.ModelAdmin):
    list_display = ["title", "reference", "suits", "cuda_version", "enabled"]
    list_filter = ["suits", "enabled"]
    search_fields = ["title", "reference"]


@admin.register(AllowedRegistry)
class AllowedRegistryAdmin(admin.ModelAdmin):
    list_display = ["host", "note"]
    search_fields = ["host"]
