"""Page lists of any length without counting every row.

A team with 100,000 workloads made the list page count all of them on every view (the count is most of
the page's time at that size). `CappedPaginator` counts only as far as it needs: up to `cap` rows past
the page asked for. Below that the page says "Page 3 of 12 · 290 workloads" as before; beyond it, "Page
3 of 43+ · more than 1,075 workloads", and "Older →" keeps going as far as the rows go.
"""

from __future__ import annotations

from functools import cached_property

from django.core.paginator import Paginator
from django.db.models import QuerySet

_FURTHEST_PAGE_ROWS = 2**40  # far beyond any list, far within a 64-bit LIMIT


class CappedPaginator(Paginator):
    """A Paginator whose count stops `cap` rows past the requested page (`exact` says whether it did)."""

    def __init__(self, object_list: QuerySet, per_page: int, *, count_queryset: QuerySet, cap: int = 1000) -> None:
        super().__init__(object_list, per_page)
        self.count_queryset = count_queryset.order_by()
        self.cap = cap
        self.wanted_page = 1

    def get_page(self, number):
        try:
            self.wanted_page = max(1, int(number))
        except (TypeError, ValueError):
            self.wanted_page = 1
        # A hand-typed ?page=99999999999999999999 would make the count's LIMIT overflow the database's
        # integers (a 500); no count reaches this far, so the page shown is the last one all the same.
        self.wanted_page = min(self.wanted_page, _FURTHEST_PAGE_ROWS // self.per_page)
        return super().get_page(number)

    @cached_property
    def count(self) -> int:
        limit = self.wanted_page * self.per_page + self.cap
        # SELECT COUNT(*) FROM (SELECT id ... LIMIT limit + 1): an index walk that stops early.
        return self.count_queryset.values("id")[: limit + 1].count()

    @cached_property
    def exact(self) -> bool:
        return self.count <= self.wanted_page * self.per_page + self.cap

    @property
    def at_least(self) -> int:
        """Rows known to exist: the count, or one fewer than it when the count stopped early."""
        return self.count if self.exact else self.count - 1
