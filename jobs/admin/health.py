"""Django admin: GPU health marks (the nodes' health history). Clearing goes through node_health.clear_mark."""

from __future__ import annotations

from django.contrib import admin, messages

from jobs.models import GpuHealthMark
from jobs.services.cluster.node_health import clear_mark


@admin.register(GpuHealthMark)
class GpuHealthMarkAdmin(admin.ModelAdmin):
    list_display = ["node_name", "gpu_index", "cause", "detail", "marked_at", "is_open", "cleared_at", "cleared_how"]
    list_filter = ["cause", "cleared_how", ("cleared_at", admin.EmptyFieldListFilter)]
    search_fields = ["node_name", "gpu_uuid", "detail"]
    readonly_fields = [f.name for f in GpuHealthMark._meta.fields]
    actions = ["clear_marks"]

    @admin.display(boolean=True, description="Keeps new work off the node")
    def is_open(self, obj: GpuHealthMark) -> bool:
        return obj.is_open

    @admin.action(description="Clear the selected marks (the GPU is fine again: new work may use the node)")
    def clear_marks(self, request, queryset) -> None:
        cleared = sum(clear_mark(mark, by=request.user) for mark in queryset.filter(cleared_at__isnull=True))
        self.message_user(request, f"Cleared {cleared} mark(s).", messages.SUCCESS)

    def has_add_permission(self, request) -> bool:
        return False  # marks come from the agents' reports
