"""GPU-hour accounting: GPU count * (end - start), with Kubernetes' own start and end times.

Reports cover any range exactly: each workload's interval is clipped to the range and split at local
midnights. Closed days are read from a roll-up (UsageDaily) so a month's report stays fast with millions
of workloads; the rest (today, partial days at the edges, days not rolled up yet) is computed live, and
running workloads count up to now.
"""

from __future__ import annotations

import bisect
import zoneinfo
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from jobs.models import GpuType, Team, Workload
from jobs.models.usage import BillingWeight, RolledUpDay, RunSegment, UsageDaily

Key = tuple[date, int, int, int]  # day, team, user, gpu type


def local_tz() -> zoneinfo.ZoneInfo:
    return zoneinfo.ZoneInfo(settings.TIME_ZONE)


def day_start(day: date, tz: zoneinfo.ZoneInfo | None = None) -> datetime:
    return datetime.combine(day, time.min, tzinfo=tz or local_tz())


def split_by_day(start: datetime, end: datetime, tz: zoneinfo.ZoneInfo) -> Iterator[tuple[date, float]]:
    """Seconds of [start, end) falling on each local calendar day (pure)."""
    if end <= start:
        return
    day = start.astimezone(tz).date()
    while True:
        lo = max(start, day_start(day, tz))
        hi = min(end, day_start(day + timedelta(days=1), tz))
        if hi > lo:
            # Subtracted as instants: two datetimes sharing a tzinfo subtract as wall-clock times, which
            # would give a day when the clocks change 24 hours instead of 23 or 25.
            yield day, hi.timestamp() - lo.timestamp()
        if day_start(day + timedelta(days=1), tz) >= end:
            return
        day += timedelta(days=1)


def live_usage(start: datetime, end: datetime, *, now: datetime, filters: Q | None = None) -> dict[Key, float]:
    """GPU-seconds per (day, team, user, gpu type) from the workloads table and the closed run segments
    (runs preempted and requeued, stretches before a borrowed mark changed), clipped to [start, end).

    `filters` may name team_id, owner_id, gpu_type_id and borrowed: both tables have them. On PostgreSQL
    the split by day and the sums happen in the database (a month of a million workloads sends back a few
    thousand sums, not a million rows); elsewhere (SQLite, `make run`'s default) in Python, the same way.
    """
    end = min(end, now)
    if end <= start:
        return {}
    workloads, segments = _live_querysets(start, end, filters)
    if connection.vendor == "postgresql":
        return _live_usage_sql(workloads, segments, start=start, end=end, now=now)
    return _live_usage_python(workloads, segments, start=start, end=end, now=now)


def _live_querysets(start: datetime, end: datetime, filters: Q | None):
    """The workloads and run segments whose counted time overlaps [start, end), as value rows."""
    workloads = (
        Workload.objects.filter(started_at__lt=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .filter(filters or Q())
        .values_list("team_id", "owner_id", "gpu_type_id", "gpu_count", "started_at", "finished_at", "counted_from")
        .order_by()  # sums need no order: not the models' default one either
    )
    segments = (
        RunSegment.objects.filter(started_at__lt=end, finished_at__gt=start)
        .filter(filters or Q())
        .values_list("team_id", "owner_id", "gpu_type_id", "gpu_count", "started_at", "finished_at")
        .order_by()
    )
    return workloads, segments


def _live_usage_python(workloads, segments, *, start: datetime, end: datetime, now: datetime) -> dict[Key, float]:
    tz = local_tz()
    usage: dict[Key, float] = defaultdict(float)

    def add(team_id: int, user_id: int, type_id: int, gpus: int, lo: datetime, hi: datetime) -> None:
        for day, seconds in split_by_day(lo, hi, tz):
            usage[(day, team_id, user_id, type_id)] += seconds * gpus

    for team_id, user_id, type_id, gpus, started, finished, counted_from in workloads.iterator(chunk_size=5000):
        add(
            team_id, user_id, type_id, gpus, max(counted_start(started, counted_from), start), min(finished or now, end)
        )
    for team_id, user_id, type_id, gpus, started, finished in segments.iterator(chunk_size=5000):
        add(team_id, user_id, type_id, gpus, max(started, start), min(finished, end))
    return usage


# Each interval clipped to the range, then cut at local midnights by generate_series over local
# timestamps (so a day with a DST change has its 23 or 25 hours), each piece's GPU-seconds summed per day,
# team, user and type. {workloads} and {segments} are the filtered selects live_usage builds with the ORM;
# the placeholders, in text order: start, now, end and the time zone, the workloads' select's own, then
# start, end and the time zone, the segments' select's own.
_LIVE_USAGE_SQL = """
SELECT (d.local_day)::date, i.team_id, i.owner_id, i.gpu_type_id,
       sum(i.gpu_count * extract(epoch FROM
           least(i.hi, (d.local_day + interval '1 day') AT TIME ZONE i.tz) - greatest(i.lo, d.local_day AT TIME ZONE i.tz)
       ))
FROM (
    SELECT w.team_id, w.owner_id, w.gpu_type_id, w.gpu_count,
           greatest(w.started_at, coalesce(w.counted_from, w.started_at), %s) AS lo,
           least(coalesce(w.finished_at, %s), %s) AS hi, %s::text AS tz
    FROM ({workloads}) AS w
    UNION ALL
    SELECT s.team_id, s.owner_id, s.gpu_type_id, s.gpu_count,
           greatest(s.started_at, %s), least(s.finished_at, %s), %s::text
    FROM ({segments}) AS s
) AS i
CROSS JOIN LATERAL generate_series(
    date_trunc('day', i.lo AT TIME ZONE i.tz), i.hi AT TIME ZONE i.tz, interval '1 day'
) AS d(local_day)
WHERE i.hi > i.lo AND d.local_day AT TIME ZONE i.tz < i.hi
GROUP BY 1, 2, 3, 4
"""


def _live_usage_sql(workloads, segments, *, start: datetime, end: datetime, now: datetime) -> dict[Key, float]:
    try:
        workloads_sql, workloads_params = workloads.query.sql_with_params()
        segments_sql, segments_params = segments.query.sql_with_params()
    except EmptyResultSet:  # the filters can match nothing (an empty list of teams or people)
        return {}
    tz = settings.TIME_ZONE
    sql = _LIVE_USAGE_SQL.replace("{workloads}", workloads_sql).replace("{segments}", segments_sql)
    # The placeholders in text order: the workloads' lo/hi/tz, their select, the segments' lo/hi/tz, theirs.
    params = (start, now, end, tz, *workloads_params, start, end, tz, *segments_params)
    usage: dict[Key, float] = {}
    with transaction.atomic(), connection.cursor() as cursor:
        # The planner cannot know that most runs fall on one day: it expects hundreds of days per run from
        # generate_series, and a month of a million rows then looks costly enough to JIT-compile, which
        # took longer than the query (2.9 s of 2.9 s; 1.9 s in all without). Off for this statement only.
        cursor.execute("SELECT current_setting('jit'), set_config('jit', 'off', true)")
        (jit,) = cursor.fetchone()[:1]
        cursor.execute(sql, params)
        for day, team_id, user_id, type_id, seconds in cursor.fetchall():
            usage[(day, team_id, user_id, type_id)] = float(seconds)
        cursor.execute("SELECT set_config('jit', %s, true)", [jit])
    return usage


def gpu_shares_by_type() -> dict[int, float]:
    """Each GPU type's share of a physical GPU (1 for whole GPUs, 1/7 for a 1g.10gb MIG slice)."""
    return {t.id: float(t.share.fraction) for t in GpuType.objects.all()}


def weights_by_day() -> Callable[[int, date], float]:
    """weight(gpu type id, day): what one device-hour of the type counts on that local day: its share of
    a GPU (GPU-equivalents, issue 40) times the billing weight then in force (its history, read once).

    Days before a type's first recorded weight use that first weight; a type without history (rows
    written around the model, e.g. by a bulk update) uses its current weight.
    """
    types = list(GpuType.objects.all())
    shares = {t.id: float(t.share.fraction) for t in types}
    billing = _billing_weights_by_day(types)

    def weight(type_id: int, day: date) -> float:
        return shares.get(type_id, 1.0) * billing(type_id, day)

    return weight


def _billing_weights_by_day(types: list[GpuType]) -> Callable[[int, date], float]:
    current = {t.id: float(t.billing_weight) for t in types}
    history: dict[int, tuple[list[date], list[float]]] = {}
    for type_id, valid_from, value in BillingWeight.objects.order_by("gpu_type_id", "valid_from").values_list(
        "gpu_type_id", "valid_from", "weight"
    ):
        days, values = history.setdefault(type_id, ([], []))
        days.append(valid_from)
        values.append(float(value))

    def weight(type_id: int, day: date) -> float:
        if type_id not in history:
            return current.get(type_id, 1.0)
        days, values = history[type_id]
        return values[max(0, bisect.bisect_right(days, day) - 1)]

    return weight


@dataclass(frozen=True)
class UsageRow:
    day: date
    team_id: int
    user_id: int
    gpu_type_id: int
    gpu_seconds: float
    weighted_gpu_hours: float
    gpu_share: float = 1.0  # of a physical GPU, per device of the type

    @property
    def gpu_hours(self) -> float:
        """Device-hours of the type, as quotas count them (a slice-hour is one)."""
        return self.gpu_seconds / 3600

    @property
    def gpu_equivalent_hours(self) -> float:
        """Whole-GPU hours: a 1g.10gb MIG slice-hour is 1/7."""
        return self.gpu_hours * self.gpu_share


def usage_report(
    *,
    start: datetime,
    end: datetime,
    team_ids: Iterable[int] | None = None,
    user_ids: Iterable[int] | None = None,
    now: datetime | None = None,
) -> list[UsageRow]:
    """Usage over [start, end) per day, team, user and GPU type, with billing weights applied."""
    now = now or timezone.now()
    tz = local_tz()
    team_ids = list(team_ids) if team_ids is not None else None
    user_ids = list(user_ids) if user_ids is not None else None
    live_filter = Q()
    rollup_filter = Q()
    if team_ids is not None:
        live_filter &= Q(team_id__in=team_ids)
        rollup_filter &= Q(team_id__in=team_ids)
    if user_ids is not None:
        live_filter &= Q(owner_id__in=user_ids)
        rollup_filter &= Q(user_id__in=user_ids)

    # Whole local days inside the range that are closed and rolled up come from the roll-up.
    first_full = start.astimezone(tz).date()
    if day_start(first_full, tz) < start:
        first_full += timedelta(days=1)
    last_full = end.astimezone(tz).date() - timedelta(days=1)
    today = now.astimezone(tz).date()
    rolled = set(
        RolledUpDay.objects.filter(day__gte=first_full, day__lte=min(last_full, today - timedelta(days=1))).values_list(
            "day", flat=True
        )
    )
    usage: dict[Key, float] = defaultdict(float)
    if rolled:
        for day, team_id, user_id, type_id, seconds in (
            UsageDaily.objects.filter(rollup_filter, day__in=rolled)
            .values_list("day", "team_id", "user_id", "gpu_type_id", "gpu_seconds")
            .iterator(chunk_size=5000)
        ):
            usage[(day, team_id, user_id, type_id)] += seconds
    # Everything else, live: the stretches of the range between rolled-up days.
    cursor = start
    for day in sorted(rolled):
        lo = day_start(day, tz)
        if cursor < lo:
            for key, value in live_usage(cursor, lo, now=now, filters=live_filter).items():
                usage[key] += value
        cursor = max(cursor, day_start(day + timedelta(days=1), tz))
    if cursor < end:
        for key, value in live_usage(cursor, end, now=now, filters=live_filter).items():
            usage[key] += value

    weight, shares = weights_by_day(), gpu_shares_by_type()
    return [
        UsageRow(
            day, team_id, user_id, type_id, seconds, seconds / 3600 * weight(type_id, day), shares.get(type_id, 1.0)
        )
        for (day, team_id, user_id, type_id), seconds in sorted(usage.items())
        if seconds > 0
    ]


def usage_report_days(*, first_day: date, last_day: date, **kwargs) -> list[UsageRow]:
    """Usage for whole local days first_day..last_day inclusive."""
    tz = local_tz()
    return usage_report(start=day_start(first_day, tz), end=day_start(last_day + timedelta(days=1), tz), **kwargs)


def borrowed_usage_days(
    *, first_day: date, last_day: date, team_ids: list[int] | None, user_ids: list[int] | None = None
) -> list[UsageRow]:
    """The part of the usage that ran on GPUs borrowed from the cohort (beyond the team's quota), counted
    apart from the team's own: workloads while marked borrowed, and borrowed segments of earlier runs
    (computed live, clipped to the days). team_ids None: every team's."""
    tz = local_tz()
    weight, shares = weights_by_day(), gpu_shares_by_type()
    filters = Q(borrowed=True)
    if team_ids is not None:
        filters &= Q(team_id__in=team_ids)
    if user_ids is not None:
        filters &= Q(owner_id__in=user_ids)
    usage = live_usage(
        day_start(first_day, tz), day_start(last_day + timedelta(days=1), tz), now=timezone.now(), filters=filters
    )
    return [
        UsageRow(
            day, team_id, user_id, type_id, seconds, seconds / 3600 * weight(type_id, day), shares.get(type_id, 1.0)
        )
        for (day, team_id, user_id, type_id), seconds in sorted(usage.items())
    ]


def totals(rows: Iterable[UsageRow], by: str) -> dict:
    """Sum GPU-hours and weighted GPU-hours by one of: day, team_id, user_id, gpu_type_id."""
    result: dict = defaultdict(lambda: [0.0, 0.0])
    for row in rows:
        entry = result[getattr(row, by)]
        entry[0] += row.gpu_hours
        entry[1] += row.weighted_gpu_hours
    return {key: (round(hours, 6), round(weighted, 6)) for key, (hours, weighted) in sorted(result.items())}


# --- the daily roll-up ----------------------------------------------------------------------------
def usage_rollup_day(day: date, *, now: datetime | None = None) -> int:
    """Recompute the roll-up rows of one closed local day; returns the number of rows written."""
    now = now or timezone.now()
    tz = local_tz()
    if day >= now.astimezone(tz).date():
        return 0  # only closed days: today is always computed live
    usage = live_usage(day_start(day, tz), day_start(day + timedelta(days=1), tz), now=now)
    with transaction.atomic():
        UsageDaily.objects.filter(day=day).delete()
        UsageDaily.objects.bulk_create(
            UsageDaily(day=d, team_id=t, user_id=u, gpu_type_id=g, gpu_seconds=s)
            for (d, t, u, g), s in usage.items()
            if s > 0
        )
        RolledUpDay.objects.update_or_create(day=day)
    return len(usage)


def rollup_pending(*, now: datetime | None = None, max_days: int = 400) -> int:
    """Roll up every closed day that has usage and no roll-up yet (the beat task)."""
    now = now or timezone.now()
    tz = local_tz()
    first = (
        Workload.objects.exclude(started_at=None).order_by("started_at").values_list("started_at", flat=True).first()
    )
    if first is None:
        return 0
    day = max(first.astimezone(tz).date(), now.astimezone(tz).date() - timedelta(days=max_days))
    done = set(RolledUpDay.objects.filter(day__gte=day).values_list("day", flat=True))
    count = 0
    yesterday = now.astimezone(tz).date() - timedelta(days=1)
    while day <= yesterday:
        if day not in done:
            usage_rollup_day(day, now=now)
            count += 1
        day += timedelta(days=1)
    return count


Interval = tuple[datetime, datetime | None]  # counted from, finished (None while it runs)


def counted_start(started_at: datetime, counted_from: datetime | None) -> datetime:
    """Where usage starts counting a run (pure): when it started, or later where a part of it before
    `counted_from` is kept apart as a run segment (a borrowed mark that changed)."""
    return max(started_at, counted_from) if counted_from else started_at


def counted_interval(workload: Workload) -> Interval | None:
    """The stretch of a workload's current run that usage counts, as the workloads table has it."""
    if workload.started_at is None:
        return None
    return counted_start(workload.started_at, workload.counted_from), workload.finished_at


def changed_since(before: Interval | None, after: Interval | None) -> datetime | None:
    """The earliest moment whose GPU time differs between two records of one workload's counted run, or
    None when they count the same (pure).

    A run that ends as it was recorded (running until now, then finished now) changes nothing before its
    end: a closed day rolled up while it ran already counted it through that day's midnight. A run that is
    no longer counted (`after` None, a requeue) changes nothing either: whoever ends it that way keeps
    the run as a segment (preemption.close_segment)."""
    if after is None:
        return None
    if before is None:
        return after[0]
    points = []
    if before[0] != after[0]:
        points.append(min(before[0], after[0]))
    if before[1] != after[1]:
        points.append(min(t for t in (before[1], after[1]) if t is not None))
    return min(points, default=None)


def note_interval_changed(workload: Workload, *, before: Interval | None, now: datetime | None = None) -> None:
    """A workload's counted run was (re)recorded, `before` being what the table said until now: roll-ups
    of the closed days whose GPU time that changes must be redone. A finish recorded as it happens resets
    nothing (today is never rolled up); one recorded days late, or a start learned late, resets the days
    from that moment on."""
    since = changed_since(before, counted_interval(workload))
    if since is None:
        return
    tz = local_tz()
    first = since.astimezone(tz).date()
    today = (now or timezone.now()).astimezone(tz).date()
    if first >= today:
        return
    stale = list(RolledUpDay.objects.filter(day__gte=first, day__lt=today).values_list("day", flat=True))
    if not stale:
        return
    RolledUpDay.objects.filter(day__in=stale).delete()  # reports compute these live until redone
    from jobs.services.dispatch import enqueue_rollup

    for day in stale:
        enqueue_rollup(day.isoformat())


# --- budgets ----------------------------------------------------------------------------------------
# An upper bound of weighted GPU-hours, from sums in PostgreSQL: the roll-up's rows of the range's days
# plus every workload and run segment live over the whole range (so a rolled-up day counts twice), each
# GPU type at its highest weight of the range. All terms are >= 0, and `usage_report` counts each GPU-
# second once (the roll-up on its days, live elsewhere), at most at that weight: so this is never less.
# Parameters: teams, start, end (clipped to now), now, first day, last day.
_USAGE_AT_MOST_SQL = """
SELECT team_id, gpu_type_id, sum(gpu_seconds) FROM (
    SELECT team_id, gpu_type_id, greatest(0, extract(epoch FROM
               least(coalesce(finished_at, %(now)s), %(end)s) - greatest(started_at, counted_from, %(start)s)
           )) * gpu_count AS gpu_seconds
    FROM {workload}
    WHERE team_id = ANY(%(teams)s) AND started_at < %(end)s AND (finished_at IS NULL OR finished_at > %(start)s)
    UNION ALL
    SELECT team_id, gpu_type_id, greatest(0, extract(epoch FROM
               least(finished_at, %(end)s) - greatest(started_at, %(start)s)
           )) * gpu_count
    FROM {segment}
    WHERE team_id = ANY(%(teams)s) AND started_at < %(end)s AND finished_at > %(start)s
    UNION ALL
    SELECT team_id, gpu_type_id, gpu_seconds FROM {daily}
    WHERE team_id = ANY(%(teams)s) AND day >= %(first_day)s AND day <= %(last_day)s
) used
GROUP BY team_id, gpu_type_id
"""


def weighted_hours_at_most(*, team_ids: list[int], start: datetime, end: datetime, now: datetime) -> dict[int, float]:
    """Per team, a bound that its weighted GPU-hours over [start, end) never exceed (one query); {} where
    the database cannot sum intervals (then only `usage_report` says)."""
    from django.db import connection

    if connection.vendor != "postgresql" or not team_ids:
        return {}
    tz = local_tz()
    end = min(end, now)
    first_day, last_day = start.astimezone(tz).date(), end.astimezone(tz).date()
    sql = _USAGE_AT_MOST_SQL.format(
        workload=Workload._meta.db_table, segment=RunSegment._meta.db_table, daily=UsageDaily._meta.db_table
    )
    params = {"teams": team_ids, "start": start, "end": end, "now": now, "first_day": first_day, "last_day": last_day}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    weight = weights_by_day()
    days = [first_day + timedelta(days=n) for n in range((last_day - first_day).days + 1)]
    highest: dict[int, float] = {}
    bound = dict.fromkeys(team_ids, 0.0)
    for team_id, type_id, seconds in rows:
        if type_id not in highest:
            highest[type_id] = max(weight(type_id, day) for day in days)
        bound[team_id] += float(seconds or 0) / 3600 * highest[type_id]
    return bound


def budgets_spent(teams: Iterable[Team], *, now: datetime | None = None) -> set[int]:
    """Ids of the teams whose monthly GPU-hour budget is used up this local month. One cheap bound for
    all of them (`weighted_hours_at_most`); the exact report only for those the bound cannot clear."""
    budgets = {t.id: t.monthly_gpu_hour_budget for t in teams if t.monthly_gpu_hour_budget is not None}
    if not budgets:
        return set()
    now = now or timezone.now()
    tz = local_tz()
    month_start = day_start(now.astimezone(tz).date().replace(day=1), tz)
    bound = weighted_hours_at_most(team_ids=list(budgets), start=month_start, end=now, now=now)
    near = [t for t, budget in budgets.items() if t not in bound or Decimal(str(bound[t])) >= budget]
    if not near:
        return set()
    used: dict[int, float] = dict.fromkeys(near, 0.0)
    for row in usage_report(start=month_start, end=now, team_ids=near, now=now):
        used[row.team_id] += row.weighted_gpu_hours
    return {t for t in near if Decimal(str(used[t])) >= budgets[t]}


def month_to_date_hours(team: Team, *, now: datetime | None = None) -> float:
    """Weighted GPU-hours the team used since the start of this local month."""
    now = now or timezone.now()
    tz = local_tz()
    month_start = day_start(now.astimezone(tz).date().replace(day=1), tz)
    rows = usage_report(start=month_start, end=now, team_ids=[team.id], now=now)
    return sum(row.weighted_gpu_hours for row in rows)


@dataclass(frozen=True)
class BudgetUse:
    """A team's monthly GPU-hour budget as the pages show it: weighted hours used this month, and left."""

    budget: float
    used: float

    @property
    def left(self) -> float:
        return max(0.0, self.budget - self.used)

    @property
    def exhausted(self) -> bool:
        return self.used >= self.budget


def budget_use(team: Team, *, now: datetime | None = None) -> BudgetUse | None:
    """None when the team has no budget (only quotas limit it)."""
    if team.monthly_gpu_hour_budget is None:
        return None
    return BudgetUse(budget=float(team.monthly_gpu_hour_budget), used=month_to_date_hours(team, now=now))


def budget_exhausted(team: Team, *, now: datetime | None = None) -> bool:
    return team.id in budgets_spent([team], now=now)
