"""GPU-hours by day and GPU type: a chart, totals and a CSV. Managers see their whole team; members
see their own usage and the team's total."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from jobs import policy
from jobs.forms import UsageRangeForm
from jobs.services.usage import reports
from jobs.services.usage.csv_export import SafeCsvWriter
from jobs.views.common import team_page

# Colours for the chart's GPU types, in order; chosen to stay distinct for colour-blind readers.
CHART_COLOURS = ["#2456d6", "#e08a00", "#1b9e77", "#c2185b", "#6a3d9a", "#7f7f00", "#00838f", "#5d4037"]


@team_page
def usage(request: HttpRequest) -> HttpResponse:
    acting = request.acting
    default_start, default_end = UsageRangeForm.default_range()
    form = UsageRangeForm({"start": default_start, "end": default_end, **request.GET.dict()})
    if not form.is_valid():
        return render(request, "jobs/usage.html", {"form": form, "has_usage": False}, status=400)
    days = form.cleaned_data["days"]
    team_report = reports.usage_build(days=days, team_ids=[acting.team.id])
    whose = policy.usage_user_ids(request.user, acting.team)  # None: every member's
    report = team_report.for_users(whose)

    if request.GET.get("format") == "csv":
        return _csv(report, acting.team.slug)

    by_type = report.group("gpu_type")
    by_user = report.group("user")
    by_day_type = report.group("day", "gpu_type")
    gpu_types = report.gpu_types
    chart = {
        "labels": [d.isoformat() for d in days.days()],
        "datasets": [
            {
                "label": gpu_types[type_id].display_name,
                "data": [round(by_day_type.get((d, type_id), reports.UsageSums()).gpu_hours, 4) for d in days.days()],
                "backgroundColor": CHART_COLOURS[i % len(CHART_COLOURS)],
            }
            for i, (type_id,) in enumerate(sorted(by_type, key=lambda key: gpu_types[key[0]].slug))
        ],
    }
    return render(
        request,
        "jobs/usage.html",
        {
            "form": form,
            "first_day": days.first,
            "last_day": days.last,
            "chart": chart,
            "has_usage": bool(report.rows),
            "whole_team": whose is None,
            "team_total": team_report.total(),
            "own_total": report.total(),
            "by_type": [
                (gpu_types[k], s.gpu_hours, s.gpu_equivalent_hours, s.weighted_gpu_hours) for (k,), s in by_type.items()
            ],
            "by_user": sorted(
                ((report.users[k], s.gpu_hours, s.weighted_gpu_hours) for (k,), s in by_user.items()),
                key=lambda item: -item[1],
            ),
        },
    )


def _csv(report: reports.UsageReport, team_slug: str) -> HttpResponse:
    days = report.days
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="usage-{team_slug}-{days.first}-{days.last}.csv"'
    writer = SafeCsvWriter(response)
    writer.writerow(
        [
            "day",
            "team",
            "user",
            "gpu_type",
            "gpu_hours",
            "weighted_gpu_hours",
            "borrowed_gpu_hours",
            "gpu_equivalent_hours",
            "lost_gpu_hours",
        ]
    )
    # lost_gpu_hours: of gpu_hours, the work preemptions and other stops threw away (since each run's last
    # checkpoint, jobs/services/usage/lost_work.py).
    for (day, user_id, type_id), sums in report.group("day", "user", "gpu_type").items():
        writer.writerow(
            [
                day.isoformat(),
                team_slug,
                report.users[user_id].get_username(),
                report.gpu_types[type_id].slug,
                f"{sums.gpu_hours:.4f}",
                f"{sums.weighted_gpu_hours:.4f}",
                f"{sums.borrowed_gpu_hours:.4f}",
                f"{sums.gpu_equivalent_hours:.4f}",
                f"{sums.lost_gpu_hours:.4f}",
            ]
        )
    return response
