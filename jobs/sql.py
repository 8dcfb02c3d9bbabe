"""Rows read with fixed SQL on the hottest paths, turned into model instances without the ORM's compiler.

The ORM builds and compiles a query anew on every call: about a millisecond of CPU for a filtered join
with an annotation, several times per REST submission (the token, the team with its facts). The few
statements on that path are written once, as plain SQL with parameters, and their rows become ordinary
model instances (`Model.from_db`, as the ORM itself makes them), with the same conversions from database
values that the ORM applies (none on PostgreSQL for the models read this way; dates and decimals on SQLite).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


@functools.cache
def _columns(model: type[models.Model]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    fields = model._meta.concrete_fields
    return tuple(f.column for f in fields), tuple(f.attname for f in fields)


@functools.cache
def _converters(model: type[models.Model], vendor: str) -> tuple[tuple[int, Any, tuple[Callable, ...]], ...]:
    """Per column that needs it: its index, its expression and the ORM's converters for this database."""
    found = []
    for index, field in enumerate(model._meta.concrete_fields):
        column = field.get_col(model._meta.db_table)
        converters = tuple(connection.ops.get_db_converters(column) + column.get_db_converters(connection))
        if converters:
            found.append((index, column, converters))
    return tuple(found)


def select_list(model: type[models.Model], alias: str) -> str:
    """The model's columns, qualified by `alias`, in the order `instance` takes them."""
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(column)}" for column in _columns(model)[0])


def width(model: type[models.Model]) -> int:
    """How many columns `select_list` gives."""
    return len(_columns(model)[0])


def instance(model: type[M], values: Sequence) -> M:
    """A model instance from a row's values, in `select_list` order."""
    converters = _converters(model, connection.vendor)
    if converters:
        values = list(values)
        for index, column, functions in converters:
            for convert in functions:
                values[index] = convert(values[index], column, connection)
    return model.from_db(connection.alias, _columns(model)[1], values)
