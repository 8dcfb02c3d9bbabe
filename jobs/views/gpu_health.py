"""The GPU health marks on the nodes page: the history, and an admin's "clear" (the GPU is fine again)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from jobs.models import GpuHealthMark
from jobs.services.cluster.node_health import clear_mark

HISTORY_SHOWN = 30


def health_history() -> list[GpuHealthMark]:
    """Open marks first, then the most recent closed ones."""
    opened = list(GpuHealthMark.objects.filter(cleared_at__isnull=True).order_by("node_name", "gpu_index"))
    closed = list(GpuHealthMark.objects.filter(cleared_at__isnull=False).order_by("-cleared_at")[:HISTORY_SHOWN])
    return opened + closed


@staff_member_required
@require_POST
def gpu_health_clear(request: HttpRequest, mark_id: int) -> HttpResponse:
    mark = get_object_or_404(GpuHealthMark, id=mark_id)
    if clear_mark(mark, by=request.user):
        messages.success(request, f"Cleared: new work may use {mark.node_name} again.")
    else:
        messages.info(request, "That mark was already cleared.")
    return redirect("nodes")
