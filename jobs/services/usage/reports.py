"""Usage reports: one date-range rule and one builder behind the usage page, the usage API (JSON and
CSV) and the admin usage report.

The pages, the API and admin differ only in what they show (grouping, names, rounding); the hours come
from `usage_build`, which reads `jobs.services.usage.accounting` once for the rows and once for the part that
ran on borrowed GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from functools import cached_property

from django.conf import settings
from django.contrib.auth import get_user_model

from jobs.models import GpuType, Team
from jobs.services.usage.accounting import UsageRow, borrowed_usage_days, usage_report_days
from jobs.services.usage.lost_work import lost_usage_days

DAY_BEFORE_START = "The end comes before the start."


class RangeInvalid(ValueError):
    """A date range that breaks the rule; `field` is the parameter to blame ("start" or "end")."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class DayRange:
    """Whole local days from `first` to `last`, both included."""

    first: date
    last: date

    @property
    def day_count(self) -> int:
        return (self.last - self.first).days + 1

    def days(self) -> list[date]:
        return [self.first + timedelta(days=n) for n in range(self.day_count)]


def max_days() -> int:
    """The most days one report covers (settings.USAGE_MAX_DAYS), the same for the page, API and admin."""
    return settings.USAGE_MAX_DAYS


def day_range(first: date, last: date) -> DayRange:
    """The one date-range rule of every usage report.

    Both ends are inclusive: `last` is the last local day counted, so first == last is one whole day.
    The range may span at most `max_days()` days counting both ends (with 366: 2025-01-01..2026-01-01 is
    accepted, 2025-01-01..2026-01-02 is refused), and end before the calendar's last day (9999-12-31, which
    has no midnight after it). Raises RangeInvalid naming "end" otherwise.
    """
    if last < first:
        raise RangeInvalid("end", DAY_BEFORE_START)
    if last >= date.max:  # the range ends at the midnight after `last`: the calendar has none after its last day
        raise RangeInvalid("end", f"A day before {date.max.isoformat()}.")
    limit = max_days()
    if (last - first).days + 1 > limit:
        raise RangeInvalid("end", f"At most {limit} days at once (both ends count).")
    return DayRange(first, last)


def month_to_date(today: date) -> tuple[date, date]:
    """The default range of the API and the admin report: the first of this month through today."""
    return today.replace(day=1), today


def recent_days(today: date, days: int = 14) -> tuple[date, date]:
    """The default range of the usage page: the last `days` days through today."""
    return today - timedelta(days=days - 1), today


# --- the builder ------------------------------------------------------------------------------------
GROUP_KEYS = {"day": "day", "team": "team_id", "user": "user_id", "gpu_type": "gpu_type_id"}


@dataclass(frozen=True)
class UsageSums:
    """GPU-hours of one group: as run, times the billing weight, and the part on borrowed GPUs."""

    gpu_hours: float = 0.0
    weighted_gpu_hours: float = 0.0
    borrowed_gpu_hours: float = 0.0
    lost_gpu_hours: float = 0.0  # of gpu_hours, the work stops threw away (jobs/services/usage/lost_work.py)
    gpu_equivalent_hours: float = 0.0  # whole-GPU hours: slices count their share (issue 40)

    @property
    def billing_weight(self) -> float:
        """The weight the GPU-equivalent hours were billed at (weights have a history, so it can differ
        from today's)."""
        equivalent = self.gpu_equivalent_hours or self.gpu_hours
        return self.weighted_gpu_hours / equivalent if equivalent else 1.0


@dataclass
class UsageReport:
    """Usage rows over a day range for some teams (and optionally some of their members)."""

    days: DayRange
    rows: list[UsageRow]
    borrowed: list[UsageRow]
    lost: list[UsageRow] = field(default_factory=list)

    def for_users(self, user_ids: Iterable[int] | None) -> UsageReport:
        """The same report narrowed to these members (None: everyone's)."""
        if user_ids is None:
            return self
        wanted = set(user_ids)
        return UsageReport(
            days=self.days,
            rows=[r for r in self.rows if r.user_id in wanted],
            borrowed=[r for r in self.borrowed if r.user_id in wanted],
            lost=[r for r in self.lost if r.user_id in wanted],
        )

    def group(self, *by: str, places: int = 6) -> dict[tuple, UsageSums]:
        """Sums per group, keyed by a tuple of ids (and days) in the order of `by`, sorted by key.

        `by` names from GROUP_KEYS: "day", "team", "user", "gpu_type"; none gives one total under ().
        """
        attrs = [GROUP_KEYS[name] for name in by]
        sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
        for row in self.rows:
            entry = sums[tuple(getattr(row, a) for a in attrs)]
            entry[0] += row.gpu_hours
            entry[1] += row.weighted_gpu_hours
            entry[3] += row.gpu_equivalent_hours
        for row in self.borrowed:
            sums[tuple(getattr(row, a) for a in attrs)][2] += row.gpu_hours
        for row in self.lost:
            sums[tuple(getattr(row, a) for a in attrs)][4] += row.gpu_hours
        return {
            key: UsageSums(
                gpu_hours=round(hours, places),
                weighted_gpu_hours=round(weighted, places),
                borrowed_gpu_hours=round(borrowed, places),
                lost_gpu_hours=round(lost, places),
                gpu_equivalent_hours=round(equivalent, places),
            )
            for key, (hours, weighted, borrowed, equivalent, lost) in sorted(sums.items())
        }

    def total(self, places: int = 6) -> UsageSums:
        return self.group(places=places).get((), UsageSums())

    # Names for the ids in the rows, one query per kind, on first use.
    @cached_property
    def gpu_types(self) -> dict[int, GpuType]:
        return GpuType.objects.in_bulk({r.gpu_type_id for r in [*self.rows, *self.borrowed, *self.lost]})

    @cached_property
    def users(self) -> dict[int, object]:
        return get_user_model().objects.in_bulk({r.user_id for r in [*self.rows, *self.borrowed, *self.lost]})

    @cached_property
    def teams(self) -> dict[int, Team]:
        return Team.objects.in_bulk({r.team_id for r in [*self.rows, *self.borrowed, *self.lost]})


def usage_build(
    *, days: DayRange, team_ids: Iterable[int] | None, user_ids: Iterable[int] | None = None
) -> UsageReport:
    """The usage of these teams (None: every team) and members (None: all of them) over the days."""
    team_ids = list(team_ids) if team_ids is not None else None
    user_ids = list(user_ids) if user_ids is not None else None
    rows = usage_report_days(first_day=days.first, last_day=days.last, team_ids=team_ids, user_ids=user_ids)
    borrowed = borrowed_usage_days(first_day=days.first, last_day=days.last, team_ids=team_ids, user_ids=user_ids)
    lost = lost_usage_days(first_day=days.first, last_day=days.last, team_ids=team_ids, user_ids=user_ids)
    return UsageReport(days=days, rows=rows, borrowed=borrowed, lost=lost)
