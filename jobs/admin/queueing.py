"""Admin: the queue's promises (reservations) and start estimates, read-only, and the estimates'
accuracy per GPU type over the last 30 days beside them."""

from __future__ import annotations

from django.contrib import admin

from jobs.models import EstimateRevision, QueueReservation
from jobs.services.queue import estimate_history
from jobs.templatetags.portal_ui import duration


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(QueueReservation)
class QueueReservationAdmin(ReadOnly):
    list_display = ["workload", "team", "gpu_type", "gpus", "made_at", "starts_by", "admitted_at", "kept"]
    list_filter = ["gpu_type", "team"]
    list_select_related = ["workload", "team", "gpu_type"]

    @admin.display(boolean=True, description="promise kept")
    def kept(self, obj: QueueReservation) -> bool | None:
        if obj.admitted_at is None:
            return None
        return obj.workload.admitted_at is None or obj.workload.admitted_at <= obj.starts_by


@admin.register(EstimateRevision)
class EstimateRevisionAdmin(ReadOnly):
    list_display = ["workload", "at", "estimated_start_at"]
    list_select_related = ["workload"]
    search_fields = ["workload__uid", "workload__name"]

    def changelist_view(self, request, extra_context=None):
        lines = []
        for row in estimate_history.accuracy_by_gpu_type():
            a = row.accuracy
            if a.p50_error_s is None:
                lines.append(f"{row.gpu_type.display_name}: no started workload with an estimate yet.")
            else:
                lines.append(
                    f"{row.gpu_type.display_name}: {a.started} started, median error {duration(a.p50_error_s)}, "
                    f"90 % within {duration(a.p90_error_s)}, {a.late} started late."
                )
        title = f"Start estimates (last {estimate_history.WINDOW_DAYS} days) — " + " ".join(lines)
        return super().changelist_view(request, extra_context={**(extra_context or {}), "title": title})
