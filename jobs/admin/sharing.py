"""Cohorts in admin: which teams lend each other their idle GPUs."""

from __future__ import annotations

from django.contrib import admin

from jobs.models import Cohort, Team
from jobs.services.queue.settings_changes import sharing_changed


class CohortTeamInline(admin.TabularInline):
    model = Team
    fields = ["name", "slug"]
    readonly_fields = ["name", "slug"]
    extra = 0
    can_delete = False
    show_change_link = True
    verbose_name_plural = "Teams (add a team to a cohort on the team's page)"

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Cohort)
class CohortAdmin(admin.ModelAdmin):
    list_display = ["name", "fair_borrowing", "team_names"]
    search_fields = ["name"]
    inlines = [CohortTeamInline]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("teams")

    @admin.display(description="Teams")
    def team_names(self, cohort: Cohort) -> str:
        return ", ".join(t.name for t in cohort.teams.all()) or "—"

    def delete_model(self, request, obj):
        team_ids = list(obj.teams.values_list("id", flat=True))
        super().delete_model(request, obj)
        sharing_changed(team_ids)

    def delete_queryset(self, request, queryset):
        """The list's "Delete selected cohorts" as one delete each: its teams stop borrowing, admission runs
        again and their namespaces' ResourceQuota (quota + borrowing limit) is brought down at once. Django's
        bulk delete skipped `delete_model`, so the quota kept allowing the borrowing until something else
        synced it."""
        for cohort in queryset:
            self.delete_model(request, cohort)
