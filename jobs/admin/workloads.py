from __future__ import annotations

from decimal import Decimal

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone
from django.utils.text import Truncator

from jobs import policy
from jobs.models import State, Team, Workload, WorkloadEvent
from jobs.services.cancel import workload_cancel
from jobs.services.errors import WorkloadStateError
from jobs.services.queue.admission import quota_admit
from jobs.services.usage import reports
from jobs.services.usage.csv_export import SafeCsvWriter

KUBERNETES_FIELDS = ["namespace", "k8s_name", "node_name", "pod_name", "pod_uid"]
STATE_FIELDS = ["state", "reason", "message", "exit_code"]
TIME_FIELDS = ["created_at", "admitted_at", "submitted_at", "started_at", "finished_at", "state_changed_at"]
SPEC_FIELDS = ["name", "team", "owner", "kind", "image", "catalog_image", "gpu_type", "gpu_count", "command", "args",
               "env", "port", "time_limit_seconds"]  # fmt: skip


class WorkloadEventInline(admin.TabularInline):
    model = WorkloadEvent
    extra = 0
    can_delete = False
    readonly_fields = ["at", "source", "from_state", "to_state", "reason", "message"]
    verbose_name_plural = "Timeline"

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Workload)
class WorkloadAdmin(admin.ModelAdmin):
    list_display = ["name", "uid", "team", "owner", "kind", "gpu_type", "gpu_count", "state", "why", "created_at"]
    list_filter = ["state", "team", "gpu_type", "kind"]
    # An admin asked "what is Vision running?" types the team's name; people are found by username or e-mail.
    search_fields = ["name", "uid", "team__name", "team__slug", "owner__username", "owner__email", "image"]
    search_help_text = "A workload's name or uid, its team's name or slug, its owner's username or e-mail, its image."
    date_hierarchy = "created_at"
    list_select_related = ["team", "owner", "gpu_type"]
    # What was asked for is history and what Kubernetes reports is the tracker's: only priority is editable.
    fieldsets = [
        (None, {"fields": ["uid", *SPEC_FIELDS, "priority"]}),
        ("State", {"fields": STATE_FIELDS}),
        ("Kubernetes", {"fields": KUBERNETES_FIELDS}),
        ("Times", {"fields": TIME_FIELDS}),
    ]
    readonly_fields = ["uid", *SPEC_FIELDS, *STATE_FIELDS, *KUBERNETES_FIELDS, *TIME_FIELDS]
    inlines = [WorkloadEventInline]
    actions = ["cancel_workloads", "rerun_admission"]
    show_full_result_count = False  # no COUNT(*) over every workload on each page

    def has_add_permission(self, request):
        return False  # submissions go through the portal or the API, which validate them

    @admin.display(description="Why (reason and message)", ordering="reason")
    def why(self, workload: Workload) -> str:
        """Who waits and why, on the list itself: the state's reason and what a person should read about it."""
        text = ": ".join(part for part in (workload.reason, workload.message) if part)
        return Truncator(text).chars(160) if text else "—"

    def get_queryset(self, request: HttpRequest):
        # Staff who are not superusers administer their own teams' workloads only (jobs.policy).
        return super().get_queryset(request).filter(id__in=policy.visible_workloads(request.user).values("id"))

    def get_readonly_fields(self, request: HttpRequest, obj: Workload | None = None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and not policy.may_set_priority(request.user, obj.team_id):
            fields.append("priority")
        return fields

    @admin.action(description="Cancel the selected workloads", permissions=["change"])
    def cancel_workloads(self, request: HttpRequest, queryset) -> None:
        cancelled, refused = 0, []
        for workload in queryset.select_related("team", "owner"):
            if not policy.may_cancel(request.user, workload):
                refused.append(f"You may not cancel {workload}: only its owner, a manager of its team or a superuser.")
                continue
            try:
                workload_cancel(workload=workload, by=request.user)
                cancelled += 1
            except WorkloadStateError as exc:
                refused.append(str(exc))
        if cancelled:
            messages.success(request, f"Cancelled {cancelled} workload(s).")
        for reason in refused:
            messages.warning(request, reason)

    @admin.action(description="Re-run admission for the selected workloads' queues", permissions=["change"])
    def rerun_admission(self, request: HttpRequest, queryset) -> None:
        pairs = queryset.filter(state=State.QUEUED).values_list("team_id", "gpu_type_id").distinct().order_by()
        admitted = sum(len(quota_admit(team_id=t, gpu_type_id=g)) for t, g in list(pairs))
        messages.info(request, f"Admission ran again: {admitted} queued workload(s) admitted.")

    def get_urls(self):
        report = path("usage-report/", self.admin_site.admin_view(self.usage_report_view), name="jobs_usage_report")
        return [report, *super().get_urls()]

    def usage_report_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            from django.core.exceptions import PermissionDenied

            raise PermissionDenied
        form = UsageReportForm(request.GET or None, user=request.user)
        report = None
        if form.is_valid():
            report = build_report(**form.cleaned_data)
            if request.GET.get("export") == "csv":
                return report_csv(report, form.cleaned_data)
        context = {
            **self.admin_site.each_context(request),
            "title": "GPU usage report",
            "opts": self.model._meta,
            "form": form,
            "report": report,
            "csv_query": (request.GET.copy().urlencode() + "&export=csv") if form.is_valid() else "",
        }
        return TemplateResponse(request, "admin/jobs/usage_report.html", context)


class UsageReportForm(forms.Form):
    start = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(widget=forms.DateInput(attrs={"type": "date"}), help_text="Inclusive.")
    teams = forms.ModelMultipleChoiceField(
        Team.objects.all(), required=False, help_text="None selected: every team.", widget=forms.CheckboxSelectMultiple
    )
    per = forms.ChoiceField(
        label="Lines",
        choices=[("team", "Per team and GPU type"), ("user", "Per person, team and GPU type")],
        required=False,
        initial="team",
        widget=forms.RadioSelect,
    )

    def __init__(self, data=None, *, user, **kwargs):
        if data is None:
            start, end = reports.month_to_date(timezone.localdate())
            kwargs.setdefault("initial", {"start": start, "end": end})
        super().__init__(data, **kwargs)
        # Staff who are not superusers see the teams they manage, as on the workload list and in the API.
        self.fields["teams"].queryset = policy.usage_teams(user)
        if not user.is_superuser:
            self.fields["teams"].help_text = "None selected: every team you manage."

    def clean_per(self) -> str:
        return self.cleaned_data.get("per") or "team"

    def clean(self):
        cleaned = super().clean()
        if not cleaned.get("teams"):
            cleaned["teams"] = self.fields["teams"].queryset  # every team this person may see, not every team
        start, end = cleaned.get("start"), cleaned.get("end")
        if start and end:
            try:
                cleaned["days"] = reports.day_range(start, end)
            except reports.RangeInvalid as exc:
                self.add_error(exc.field, exc.message)
        return cleaned


def build_report(*, days: reports.DayRange, teams, per: str = "team", **_ignored) -> dict:
    """Usage summed per team and GPU type (`per` "user": per person, team and GPU type), with the billing
    weight the hours were billed at, of `teams` (the ones picked, else every one the person may see: none is
    none, not all)."""
    report = reports.usage_build(days=days, team_ids=[t.id for t in teams])
    per_user = per == "user"
    grouped = report.group("team", "user", "gpu_type") if per_user else report.group("team", "gpu_type")

    def username(user_id) -> str:
        user = report.users.get(user_id)
        return user.get_username() if user is not None else "—"

    lines = [
        {
            "team": report.teams[key[0]].name,
            **({"user": username(key[1])} if per_user else {}),
            "gpu_type": report.gpu_types[key[-1]].display_name,
            "billing_weight": Decimal(f"{sums.billing_weight:.3f}"),
            "gpu_hours": round(sums.gpu_hours, 3),
            "weighted_gpu_hours": round(sums.weighted_gpu_hours, 3),
            "borrowed_gpu_hours": round(sums.borrowed_gpu_hours, 3),
            "gpu_equivalent_hours": round(sums.gpu_equivalent_hours, 3),
            "lost_gpu_hours": round(sums.lost_gpu_hours, 3),
        }
        for key, sums in grouped.items()
    ]
    lines.sort(key=lambda line: (str(line["team"]), line.get("user", ""), str(line["gpu_type"])))
    return {
        "per_user": per_user,
        "lines": lines,
        "total_gpu_hours": round(sum(line["gpu_hours"] for line in lines), 3),
        "total_weighted_gpu_hours": round(sum(line["weighted_gpu_hours"] for line in lines), 3),
        "total_borrowed_gpu_hours": round(sum(line["borrowed_gpu_hours"] for line in lines), 3),
        "total_gpu_equivalent_hours": round(sum(line["gpu_equivalent_hours"] for line in lines), 3),
        "total_lost_gpu_hours": round(sum(line["lost_gpu_hours"] for line in lines), 3),
    }


def report_csv(report: dict, params: dict) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="gpu-usage-{params["start"]}-{params["end"]}.csv"'
    writer = SafeCsvWriter(response)
    per_user = report.get("per_user", False)
    writer.writerow(
        [
            "team",
            *(["user"] if per_user else []),
            "gpu_type",
            "billing_weight",
            "gpu_hours",
            "weighted_gpu_hours",
            "borrowed_gpu_hours",
            "gpu_equivalent_hours",
            "lost_gpu_hours",
        ]
    )
    for line in report["lines"]:
        writer.writerow(
            [
                line["team"],
                *([line["user"]] if per_user else []),
                line["gpu_type"],
                line["billing_weight"],
                line["gpu_hours"],
                line["weighted_gpu_hours"],
                line["borrowed_gpu_hours"],
                line["gpu_equivalent_hours"],
                line["lost_gpu_hours"],
            ]
        )
    return response
