"""Why my share: a member's decayed GPU-hours against their team's, the half-life, and what that means
for the order of their next workload; and why a preempted workload was the one chosen.

Managers see every member by name; a member sees their own row by name and the others' usage as an
unnamed distribution (the team's shape, nobody's identity).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from jobs.models import Team, Workload
from jobs.services.queue.cohort_facts import team_fair_share


@dataclass(frozen=True)
class ShareRow:
    """One member's decayed GPU-hours; `name` is empty where the viewer may not see who it is."""

    name: str
    gpu_hours: float
    mine: bool


@dataclass(frozen=True)
class MyShare:
    fair_share: bool
    half_life_hours: float
    mine: float
    rows: list[ShareRow]  # most used first
    ahead_of: int  # members whose next workload comes after mine (they used more)
    behind: int  # members whose next workload comes before mine (they used less)
    largest: float  # the largest usage, for bar widths

    @property
    def place(self) -> int:
        return self.behind + 1


def explain_share(
    usage: Mapping[int, float],
    *,
    me: int,
    names: Mapping[int, str],
    show_names: bool,
    fair_share: bool,
    half_life: float,
) -> MyShare:
    """The picture for one viewer (pure): every member of `names` with their usage (none: 0), sorted by
    usage, names kept only for the viewer's own row unless `show_names`; how many members' next
    workloads come before and after the viewer's within one priority (fair share orders by least used)."""
    mine = usage.get(me, 0.0)
    rows = sorted(
        (
            ShareRow(
                name=names[user] if show_names or user == me else "",
                gpu_hours=usage.get(user, 0.0),
                mine=user == me,
            )
            for user in names
        ),
        key=lambda r: (-r.gpu_hours, not r.mine, r.name),
    )
    others = [usage.get(user, 0.0) for user in names if user != me]
    return MyShare(
        fair_share=fair_share,
        half_life_hours=half_life,
        mine=mine,
        rows=rows,
        ahead_of=sum(1 for u in others if u > mine),
        behind=sum(1 for u in others if u < mine),
        largest=max([mine, *others], default=0.0),
    )


def my_share(team: Team, *, user, show_names: bool, usage: Mapping[int, float] | None = None) -> MyShare:
    """The share picture of `user` in `team` (one query for the team's recent runs, unless `usage`, each
    person's `cohort_facts.team_fair_share`, is given)."""
    members = dict(team.memberships.select_related("user").values_list("user_id", "user__username"))
    if usage is None:
        usage = team_fair_share(team, timezone.now())  # summed by PostgreSQL, not read run by run
    return explain_share(
        usage,
        me=user.id,
        names=members,
        show_names=show_names,
        fair_share=team.fair_share,
        half_life=float(team.fair_share_half_life_hours),
    )


def why_chosen(*, priority: int, admitted_at: datetime | None) -> str:
    """Why a borrowed workload was the one preempted, in words (the victims' order, sharing_plan)."""
    when = f"admitted {timezone.localtime(admitted_at):%H:%M}" if admitted_at else "not started yet"
    return (
        "Borrowed workloads are stopped lowest priority first, then the most recently admitted, and only as "
        f"many as the lender needs: this one had priority {priority} and was {when}."
    )


def why_chosen_for(workload: Workload) -> str:
    return why_chosen(priority=workload.priority, admitted_at=workload.admitted_at)
