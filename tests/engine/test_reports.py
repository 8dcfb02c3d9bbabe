"""The usage reports' pure parts: the one date-range rule (both ends inclusive) and the grouping."""

from __future__ import annotations

from datetime import date

import pytest

from jobs.services.usage.accounting import UsageRow
from jobs.services.usage.reports import DAY_BEFORE_START, DayRange, RangeInvalid, UsageReport, UsageSums, day_range


@pytest.mark.parametrize(
    ("first", "last", "days"),
    [
        (date(2026, 5, 1), date(2026, 5, 1), 1),  # one whole day: the end is inclusive
        (date(2026, 5, 1), date(2026, 5, 14), 14),
        (date(2025, 1, 1), date(2026, 1, 1), 366),  # the longest range: 366 days, both ends counted
        (date(2024, 1, 1), date(2024, 12, 31), 366),  # a leap year, whole
    ],
)
def test_ranges_within_the_rule_count_both_ends(first, last, days):
    span = day_range(first, last)
    assert span == DayRange(first, last)
    assert span.day_count == days
    assert span.days()[0] == first
    assert span.days()[-1] == last
    assert len(span.days()) == days


@pytest.mark.parametrize(
    ("first", "last", "message"),
    [
        (date(2025, 1, 1), date(2026, 1, 2), "At most 366 days at once (both ends count)."),  # 367 days
        (date(2026, 5, 2), date(2026, 5, 1), DAY_BEFORE_START),
    ],
)
def test_ranges_outside_the_rule_name_the_end(first, last, message):
    with pytest.raises(RangeInvalid) as refused:
        day_range(first, last)
    assert refused.value.field == "end"
    assert refused.value.message == message


def test_the_limit_is_one_setting(settings):
    settings.USAGE_MAX_DAYS = 7
    assert day_range(date(2026, 5, 1), date(2026, 5, 7)).day_count == 7
    with pytest.raises(RangeInvalid):
        day_range(date(2026, 5, 1), date(2026, 5, 8))


DAY1, DAY2 = date(2026, 5, 1), date(2026, 5, 2)


def _row(day, team, user, gpu_type, hours, weight=1.0) -> UsageRow:
    return UsageRow(day, team, user, gpu_type, hours * 3600, hours * weight)


REPORT = UsageReport(
    days=DayRange(DAY1, DAY2),
    rows=[
        _row(DAY1, 1, 10, 100, 2.0),
        _row(DAY1, 1, 11, 100, 1.0),
        _row(DAY2, 1, 10, 200, 4.0, weight=0.5),
        _row(DAY2, 2, 20, 100, 3.0),
    ],
    borrowed=[_row(DAY2, 1, 10, 200, 1.5, weight=0.5)],
)


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        ((), {(): UsageSums(10.0, 8.0, 1.5, gpu_equivalent_hours=10.0)}),
        (
            ("team",),
            {
                (1,): UsageSums(7.0, 5.0, 1.5, gpu_equivalent_hours=7.0),
                (2,): UsageSums(3.0, 3.0, 0.0, gpu_equivalent_hours=3.0),
            },
        ),
        (
            ("user",),
            {
                (10,): UsageSums(6.0, 4.0, 1.5, gpu_equivalent_hours=6.0),
                (11,): UsageSums(1.0, 1.0, 0.0, gpu_equivalent_hours=1.0),
                (20,): UsageSums(3.0, 3.0, 0.0, gpu_equivalent_hours=3.0),
            },
        ),
        (
            ("day", "gpu_type"),
            {
                (DAY1, 100): UsageSums(3.0, 3.0, 0.0, gpu_equivalent_hours=3.0),
                (DAY2, 100): UsageSums(3.0, 3.0, 0.0, gpu_equivalent_hours=3.0),
                (DAY2, 200): UsageSums(4.0, 2.0, 1.5, gpu_equivalent_hours=4.0),
            },
        ),
        (
            ("team", "gpu_type"),
            {
                (1, 100): UsageSums(3.0, 3.0, 0.0, gpu_equivalent_hours=3.0),
                (1, 200): UsageSums(4.0, 2.0, 1.5, gpu_equivalent_hours=4.0),
                (2, 100): UsageSums(3.0, 3.0, 0.0, gpu_equivalent_hours=3.0),
            },
        ),
    ],
)
def test_grouping(by, expected):
    assert REPORT.group(*by) == expected


def test_narrowed_to_members_and_billed_weight():
    mine = REPORT.for_users([10])
    assert mine.total() == UsageSums(6.0, 4.0, 1.5, gpu_equivalent_hours=6.0)
    assert REPORT.for_users(None) is REPORT
    assert mine.group("gpu_type")[(200,)].billing_weight == 0.5
    assert UsageSums().billing_weight == 1.0
