from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import IntegerField, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from identity.models import Membership
from identity.signals import changes_by
from identity.teams import membership_edited_by_hand
from jobs.models import Quota, QuotaChange, State, Team, Workload
from jobs.services.queue.settings_changes import quota_change_record, sharing_changed, stopped_by
from portal.admin_widgets import SafeAutocompleteAdmin


def _gpus(states) -> Coalesce:
    total = (
        Workload.objects.filter(team_id=OuterRef("team_id"), gpu_type_id=OuterRef("gpu_type_id"), state__in=states)
        .order_by()
        .values("team_id")
        .annotate(n=Sum("gpu_count"))
        .values("n")
    )
    return Coalesce(Subquery(total, output_field=IntegerField()), 0)


def quotas_with_use(queryset):
    """Quota rows annotated with GPUs held and GPUs queued, in the same query."""
    return queryset.annotate(gpus_used=_gpus(State.holding()), gpus_queued=_gpus([State.QUEUED]))


class MembershipInline(SafeAutocompleteAdmin, admin.TabularInline):
    """Members by hand, except in teams the identity provider keeps (shown read-only there)."""

    model = Membership
    extra = 0
    autocomplete_fields = ["user"]

    def _by_hand(self, obj) -> bool:
        return obj is None or membership_edited_by_hand(obj.pk)

    def has_add_permission(self, request, obj=None) -> bool:
        return self._by_hand(obj) and super().has_add_permission(request, obj)

    def has_change_permission(self, request, obj=None) -> bool:
        return self._by_hand(obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return self._by_hand(obj) and super().has_delete_permission(request, obj)


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0
    fields = ["gpu_type", "max_gpus", "borrowing_limit", "lending_limit", "user_max_gpus", "use"]
    readonly_fields = ["use"]

    def get_queryset(self, request):
        return quotas_with_use(super().get_queryset(request).select_related("gpu_type"))

    @admin.display(description="In use / queued (GPUs)")
    def use(self, quota: Quota) -> str:
        if quota.pk is None:
            return "—"
        return f"{quota.gpus_used} in use, {quota.gpus_queued} queued, of {quota.max_gpus}"


class QuotaChangeInline(admin.TabularInline):
    model = QuotaChange
    extra = 0
    can_delete = False
    fields = ["changed_at", "gpu_type", "old_max_gpus", "new_max_gpus", "changed_by", "admitted", "note"]
    readonly_fields = fields
    ordering = ["-changed_at", "-id"]
    verbose_name_plural = "Quota changes"

    def has_add_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("gpu_type", "changed_by")


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "cohort", "monthly_gpu_hour_budget", "fair_share"]
    list_filter = ["cohort", "fair_share"]
    # A person's team is asked after by their name: members' usernames and e-mail addresses match too.
    search_fields = ["name", "slug", "memberships__user__username", "memberships__user__email"]
    search_help_text = "A team's name or slug, or a member's username or e-mail address."
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, QuotaInline, QuotaChangeInline]

    def save_model(self, request, obj, form, change):
        # A team leaving a cohort takes its borrowing with it; the cohort it left is re-planned too.
        self._cohort_before = Team.objects.filter(id=obj.id).values_list("cohort_id", flat=True).first()
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        team = form.instance
        affected = {team.id}
        for cohort_id in {getattr(self, "_cohort_before", None), team.cohort_id} - {None}:
            affected |= set(Team.objects.filter(cohort_id=cohort_id).values_list("id", flat=True))
        admitted = sharing_changed(sorted(affected))
        if admitted:
            messages.info(request, f"Sharing settings applied; admission admitted {admitted} queued workload(s).")

    def save_formset(self, request, form, formset, change):
        if formset.model is Membership:
            with changes_by(request.user):  # the record of membership changes names the admin
                return super().save_formset(request, form, formset, change)
        if formset.model is not Quota:
            return super().save_formset(request, form, formset, change)
        team = form.instance
        before = dict(Quota.objects.filter(team=team).values_list("gpu_type_id", "max_gpus"))
        super().save_formset(request, form, formset, change)
        after = {q.gpu_type_id: q for q in Quota.objects.filter(team=team).select_related("gpu_type")}
        removed = {f.instance.gpu_type_id: f.instance.gpu_type for f in formset.deleted_forms if f.instance.gpu_type_id}
        for type_id in sorted(set(before) | set(after)):
            gpu_type = after[type_id].gpu_type if type_id in after else removed.get(type_id)
            if gpu_type is None:
                continue
            new = after[type_id].max_gpus if type_id in after else None
            recorded = quota_change_record(
                team=team, gpu_type=gpu_type, old=before.get(type_id), new=new, by=request.user
            )
            if recorded is not None:
                _tell(request, recorded)


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = [
        "team",
        "gpu_type",
        "max_gpus",
        "borrowing_limit",
        "lending_limit",
        "in_use",
        "queued",
        "updated_at",
    ]
    list_filter = ["gpu_type", "team"]
    list_select_related = ["team", "gpu_type"]
    search_fields = ["team__name", "team__slug"]

    def get_queryset(self, request):
        return quotas_with_use(super().get_queryset(request))

    @admin.display(description="GPUs in use", ordering="gpus_used")
    def in_use(self, quota: Quota) -> int:
        return quota.gpus_used

    @admin.display(description="GPUs queued", ordering="gpus_queued")
    def queued(self, quota: Quota) -> int:
        return quota.gpus_queued

    def save_model(self, request, obj, form, change):
        previous = Quota.objects.filter(id=obj.id).first() if obj.id else None
        super().save_model(request, obj, form, change)
        if previous is not None and (previous.team_id, previous.gpu_type_id) != (obj.team_id, obj.gpu_type_id):
            quota_change_record(
                team=previous.team, gpu_type=previous.gpu_type, old=previous.max_gpus, new=None, by=request.user
            )
            previous = None
        recorded = quota_change_record(
            team=obj.team,
            gpu_type=obj.gpu_type,
            old=previous.max_gpus if previous else None,
            new=obj.max_gpus,
            by=request.user,
        )
        if recorded is not None:
            _tell(request, recorded)
        sharing_changed([obj.team_id])

    def delete_model(self, request, obj):
        team, gpu_type, old = obj.team, obj.gpu_type, obj.max_gpus
        super().delete_model(request, obj)
        quota_change_record(team=team, gpu_type=gpu_type, old=old, new=None, by=request.user)

    def delete_queryset(self, request, queryset):
        for quota in queryset.select_related("team", "gpu_type"):
            self.delete_model(request, quota)


@admin.register(QuotaChange)
class QuotaChangeAdmin(admin.ModelAdmin):
    list_display = ["changed_at", "team", "gpu_type", "old_max_gpus", "new_max_gpus", "changed_by", "admitted", "note"]
    list_filter = ["team", "gpu_type"]
    list_select_related = ["team", "gpu_type", "changed_by"]
    date_hierarchy = "changed_at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


def _tell(request, change: QuotaChange) -> None:
    old = "no quota" if change.old_max_gpus is None else f"{change.old_max_gpus} GPUs"
    new = "no quota" if change.new_max_gpus is None else f"{change.new_max_gpus} GPUs"
    messages.info(
        request,
        f"{change.team} / {change.gpu_type}: {old} → {new}. Admission ran again and admitted "
        f"{change.admitted} queued workload(s).",
    )
    # A quota below what the team holds stops nothing of its own (admission only gates new work): say so, so
    # that an admin does not expect the lowered quota to free GPUs at once, nor wonder why the queue stalls.
    # In a cohort, borrowed work beyond what the cohort now lends is stopped at once: say how much.
    stopped = stopped_by(change)
    if stopped:
        messages.warning(
            request,
            f"{change.team} / {change.gpu_type}: {stopped} workload(s) running on borrowed GPUs were stopped, as "
            "the team may no longer borrow that much (restartable batch jobs are queued again; each owner is told).",
        )
    held = (
        Workload.objects.filter(team=change.team, gpu_type=change.gpu_type, state__in=State.holding()).aggregate(
            n=Sum("gpu_count")
        )["n"]
        or 0
    )
    limit = change.new_max_gpus or 0
    if held > limit:
        then = (
            f"new work of this team and type starts once fewer than {limit} are in use"
            if change.new_max_gpus
            else "queued work of this team and type waits until it has a quota again"
        )
        borrowing = (
            Quota.objects.filter(team=change.team, gpu_type=change.gpu_type)
            .values_list("borrowing_limit", flat=True)
            .first()
            if change.new_max_gpus and change.team.cohort_id
            else 0
        )
        if borrowing:
            then += f", or sooner on GPUs its cohort leaves idle (up to {borrowing} borrowed)"
        messages.warning(
            request,
            f"{change.team} / {change.gpu_type}: {held} GPUs are in use, more than the new quota: running work "
            f"keeps running (nothing {'more ' if stopped else ''}is stopped; cancel it from the workload list if it must "
            f"end), and {then}.",
        )
