"""The one CSV writer for every export (usage page, API, admin): cells a spreadsheet would read as a
formula are neutralized, so a name like `=HYPERLINK(...)` chosen by a user opens as text, not as code.

Following OWASP's advice on CSV injection: a text cell starting with =, +, -, @, a tab or a carriage
return is prefixed with a single quote. Numbers are written as numbers.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from decimal import Decimal
from typing import Any, Protocol

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class _Writable(Protocol):
    def write(self, text: str, /) -> Any: ...


def safe_cell(value: Any) -> Any:
    """The value as a spreadsheet should show it: text that could start a formula gets a leading quote."""
    if isinstance(value, bool | int | float | Decimal) or value is None:
        return value
    text = str(value)
    return f"'{text}" if text.startswith(FORMULA_STARTS) else text


class SafeCsvWriter:
    """csv.writer whose every row passes through safe_cell."""

    def __init__(self, stream: _Writable) -> None:
        self._writer = csv.writer(stream)

    def writerow(self, row: Iterable[Any]) -> None:
        self._writer.writerow([safe_cell(value) for value in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)
