"""Cohorts: teams that lend each other the GPUs they leave idle. How lending, borrowing and reclaiming
work is told in jobs/services/queue/sharing_plan.py (the plan) and jobs/services/queue/admission.py (carrying it out)."""

from __future__ import annotations

from django.db import models


class Cohort(models.Model):
    """A group of teams whose idle quota the others may borrow, up to each quota's borrowing limit.

    A team's quota row says how much of it may be lent (`lending_limit`) and how much beyond it the team
    may borrow (`borrowing_limit`). Lenders reclaim borrowed GPUs by preemption when they need them.
    """

    name = models.CharField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    min_runtime_seconds = models.PositiveIntegerField(
        default=0,
        help_text="How long borrowed work in this cohort runs before a lender may preempt it; the larger of "
        "this and the GPU type's own minimum applies.",
    )
    fair_borrowing = models.BooleanField(
        default=False,
        help_text="Borrowed GPUs go first to the team that has borrowed least recently (its borrowed "
        "GPU-hours, halved every day), not to whichever team's workload came first.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
