"""GPU-hours by day and GPU type: a chart, totals and a CSV. Managers see their whole team; members
see their own usage and the team's total."""

from __future__ import annotations

from datetime import date, timedelta

from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from jobs import policy
from jobs.forms import UsageRangeForm
from jobs.models import GpuType
from jobs.services.accounting import UsageRow, borrowed_usage_days, totals, usage_report_days
from jobs.services.exports import SafeCsvWriter
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
    first_day, last_day = form.cleaned_data["start"], form.cleaned_data["end"]
    team_rows = usage_report_days(first_day=first_day, last_day=last_day, team_ids=[acting.team.id])
    whose = policy.usage_user_ids(request.user, acting.team)  # None: every member's
    rows = team_rows if whose is None else [r for r in team_rows if r.user_id in whose]
    gpu_types = {t.id: t for t in GpuType.objects.all()}
    users = {u.id: u for u in get_user_model().objects.filter(id__in={r.user_id for r in rows})}

    borrowed_rows = borrowed_usage_days(first_day=first_day, last_day=last_day, team_ids=[acting.team.id])
    if request.GET.get("format") == "csv":
        return _csv(rows, borrowed_rows, acting.team.slug, gpu_types, users, first_day, last_day)

    team_total = totals(team_rows, by="team_id").get(acting.team.id, (0.0, 0.0))
    team_borrowed = totals(borrowed_rows, by="team_id").get(acting.team.id, (0.0, 0.0))
    by_type = totals(rows, by="gpu_type_id")
    by_user = totals(rows, by="user_id")
    days = [first_day + timedelta(days=n) for n in range((last_day - first_day).days + 1)]
    by_day_type: dict[tuple[date, int], float] = {}
    for row in rows:
        by_day_type[(row.day, row.gpu_type_id)] = by_day_type.get((row.day, row.gpu_type_id), 0.0) + row.gpu_hours
    chart = {
        "labels": [d.isoformat() for d in days],
        "datasets": [
            {
                "label": gpu_types[type_id].display_name,
                "data": [round(by_day_type.get((d, type_id), 0.0), 4) for d in days],
                "backgroundColor": CHART_COLOURS[i % len(CHART_COLOURS)],
            }
            for i, type_id in enumerate(sorted(by_type, key=lambda t: gpu_types[t].slug))
        ],
    }
    return render(
        request,
        "jobs/usage.html",
        {
            "form": form,
            "first_day": first_day,
            "last_day": last_day,
            "chart": chart,
            "has_usage": bool(rows),
            "whole_team": whose is None,
            "team_total": team_total,
            "team_borrowed": team_borrowed,
            "own_total": (sum(v[0] for v in by_user.values()), sum(v[1] for v in by_user.values())),
            "by_type": [(gpu_types[k], hours, weighted) for k, (hours, weighted) in by_type.items()],
            "by_user": sorted(
                ((users[k], hours, weighted) for k, (hours, weighted) in by_user.items()),
                key=lambda item: -item[1],
            ),
        },
    )


def _csv(
    rows: list[UsageRow],
    borrowed_rows: list[UsageRow],
    team_slug: str,
    gpu_types,
    users,
    first_day: date,
    last_day: date,
) -> HttpResponse:
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="usage-{team_slug}-{first_day}-{last_day}.csv"'
    borrowed = {(r.day, r.team_id, r.user_id, r.gpu_type_id): r.gpu_hours for r in borrowed_rows}
    writer = SafeCsvWriter(response)
    writer.writerow(["day", "team", "user", "gpu_type", "gpu_hours", "weighted_gpu_hours", "borrowed_gpu_hours"])
    for row in rows:
        writer.writerow(
            [
                row.day.isoformat(),
                team_slug,
                users[row.user_id].get_username(),
                gpu_types[row.gpu_type_id].slug,
                f"{row.gpu_hours:.4f}",
                f"{row.weighted_gpu_hours:.4f}",
                f"{borrowed.get((row.day, row.team_id, row.user_id, row.gpu_type_id), 0.0):.4f}",
            ]
        )
    return response
