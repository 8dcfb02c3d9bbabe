"""Rows read and written with fixed SQL on the hottest paths, without the ORM's compiler.

The ORM builds and compiles a query anew on every call: about a millisecond of CPU for a filtered join
with an annotation or an insert of a wide row, several times per REST submission (the token, the team with
its facts, the workload and its first timeline entry). The statements on that path are written once per
model, as plain SQL with parameters. Rows read become ordinary model instances (`Model.from_db`, as the
ORM itself makes them), with the same conversions from database values that the ORM applies (none on
PostgreSQL for the models read this way; dates and decimals on SQLite). Rows written get their values
from each field exactly as `Model.save` prepares them (`pre_save`, `get_db_prep_save`); no model signal
is sent, so only models without receivers are written this way.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import orjson
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models.base import ModelState
from django.db.models.fields import AutoFieldMixin
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

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
        if isinstance(field, models.JSONField) and field.decoder is None:
            converters = tuple(_json_value if c == field.from_db_value else c for c in converters)
        if converters:
            found.append((index, column, converters))
    return tuple(found)


def _json_value(value: Any, expression: Any, conn: Any) -> Any:
    """A JSON column's text as `JSONField.from_db_value` decodes it, with orjson (a workload row has six of
    them; the standard library's decoder took a tenth of the CPU of the tracker's load of a burst); what
    orjson refuses (an integer past 64 bits, a lone surrogate, text that is not JSON) goes to the field's own."""
    if not isinstance(value, str | bytes):
        return expression.target.from_db_value(value, expression, conn)
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return expression.target.from_db_value(value, expression, conn)


def select_list(model: type[models.Model], alias: str) -> str:
    """The model's columns, qualified by `alias`, in the order `instance` takes them."""
    quote = connection.ops.quote_name
    return ", ".join(f"{alias}.{quote(column)}" for column in _columns(model)[0])


def width(model: type[models.Model]) -> int:
    """How many columns `select_list` gives."""
    return len(_columns(model)[0])


@functools.cache
def _plain_fields(model: type[models.Model]) -> bool:
    """Whether `Model.from_db` would do no more for this model than store each column's value under its
    attribute name: the model keeps Django's own `__init__` and `from_db`, and no field's attribute is a
    descriptor that acts on assignment (a file field's, say; a foreign key's id only drops a cached related
    object, and a new instance has none)."""
    if model.__init__ is not models.Model.__init__ or model.from_db.__func__ is not models.Model.from_db.__func__:
        return False
    plain = (DeferredAttribute, ForeignKeyDeferredAttribute)
    return all(type(getattr(model, attname, None)) in plain for attname in _columns(model)[1])


def _init_receivers(model: type[models.Model]) -> bool:
    return bool(pre_init.receivers or post_init.receivers) and (
        pre_init.has_listeners(model) or post_init.has_listeners(model)
    )


def instance(model: type[M], values: Sequence) -> M:
    """A model instance from a row's values, in `select_list` order.

    What `Model.from_db` makes, without `Model.__init__`'s work per field (a setattr each, the init signals'
    dispatch): the tracker makes three of them per workload it records, and they were a fifth of its CPU
    for a burst. Models that would need more (a custom `__init__` or `from_db`, a field whose attribute acts
    on assignment, an init signal's receiver) go through `from_db`."""
    conn = connections[DEFAULT_DB_ALIAS]  # what `connection` stands for, without a thread-local read per use
    converters = _converters(model, conn.vendor)
    if converters:
        values = list(values)
        for index, column, functions in converters:
            for convert in functions:
                values[index] = convert(values[index], column, conn)
    attnames = _columns(model)[1]
    if not _plain_fields(model) or _init_receivers(model):
        return model.from_db(conn.alias, attnames, values)
    new = model.__new__(model)
    state = ModelState()
    state.adding, state.db = False, conn.alias
    new.__dict__["_state"] = state
    new.__dict__.update(zip(attnames, values, strict=True))
    return new


# Table and column names from the model only; every value is a parameter.
_INSERT_SQL = "INSERT INTO {table} ({columns}) VALUES ({values}){on_conflict} RETURNING {pk}"


@functools.cache
def _insert_sql(
    model: type[models.Model], vendor: str, conflict: tuple[str, ...]
) -> tuple[str, tuple[models.Field, ...]]:
    quote = connection.ops.quote_name
    fields = tuple(f for f in model._meta.concrete_fields if not isinstance(f, AutoFieldMixin))
    columns = ", ".join(quote(f.column) for f in fields)
    on_conflict = ""
    if conflict:
        on_conflict = (
            f" ON CONFLICT ({', '.join(quote(model._meta.get_field(name).column) for name in conflict)}) DO NOTHING"
        )
    sql = _INSERT_SQL.format(
        table=quote(model._meta.db_table),
        columns=columns,
        values=", ".join(["%s"] * len(fields)),
        on_conflict=on_conflict,
        pk=quote(model._meta.pk.column),
    )
    return sql, fields


def insert(instance: models.Model, *, unless_taken: tuple[str, ...] = ()) -> bool:
    """Store a new instance in one statement, its values prepared as `Model.save` prepares them, and set
    its primary key. `unless_taken`: field names of a unique constraint; a row already holding the same
    values is left alone and nothing is stored (False), without the error and savepoint an insert that
    meets it would need."""
    model = type(instance)
    sql, fields = _insert_sql(model, connection.vendor, unless_taken)
    values = [f.get_db_prep_save(f.pre_save(instance, True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        row = cursor.fetchone()
    if row is None:
        return False
    instance.pk = row[0]
    instance._state.adding = False
    instance._state.db = connection.alias
    return True


# `insert`'s statement as the CTE `stored`, and a data-modifying statement of the caller's that reads the
# stored row's primary key from it (and so does nothing when the row was not stored); `{also}`: more
# values the caller reads beside the primary key (expressions that may name `stored`).
_INSERT_THEN_SQL = "WITH stored AS ({insert}), following AS ({following}) SELECT stored.*{also} FROM stored"


def insert_then(
    instance: models.Model,
    following: str,
    params: Sequence[Any],
    *,
    unless_taken: tuple[str, ...] = (),
    also: str = "",
    also_params: Sequence[Any] = (),
) -> tuple | None:
    """`insert`, and in the same statement `following` with its `params`: an INSERT ... SELECT ... FROM
    stored (the stored row's primary key, under its column's name), for a row that belongs to the new one
    (a workload's first timeline entry). One round trip instead of two; on PostgreSQL only. `also`: a
    select list of more values to read in the same statement (with `also_params`; they see the database as
    it was before the statement, without the new row). Returns those values (empty without `also`), or
    None when nothing was stored (`unless_taken`)."""
    model = type(instance)
    sql, fields = _insert_sql(model, connection.vendor, unless_taken)
    values = [f.get_db_prep_save(f.pre_save(instance, True), connection) for f in fields]
    statement = _INSERT_THEN_SQL.format(insert=sql, following=following, also=f", {also}" if also else "")
    with connection.cursor() as cursor:
        cursor.execute(statement, [*values, *params, *also_params])
        row = cursor.fetchone()
    if row is None:
        return None
    instance.pk = row[0]
    instance._state.adding = False
    instance._state.db = connection.alias
    return tuple(row[1:])


def _stored(instances: Sequence[models.Model], returned: list[tuple], keys: list) -> list[tuple[models.Model, Any]]:
    """(instance, primary key) of each row the insert returned: matched by the constraint's values when it
    left some out (`keys`), else in order."""
    if not keys:
        return [(obj, found[0]) for obj, found in zip(instances, returned, strict=True)]
    waiting: dict[tuple, list[models.Model]] = {}
    for obj in instances:
        waiting.setdefault(tuple(getattr(obj, f.attname) for f in keys), []).append(obj)
    return [(waiting[tuple(found[1:])].pop(0), found[0]) for found in returned]


def insert_many(instances: Sequence[models.Model], *, unless_taken: tuple[str, ...] = ()) -> None:
    """Store new instances of one model in one statement, each as `insert` stores one, and set the primary
    key of each stored. `unless_taken`: field names of a unique constraint; an instance whose values a row
    already holds (or an earlier instance of the same call) is left out, its primary key left None."""
    if not instances:
        return
    sql, values = insert_many_statement(instances, unless_taken=unless_taken)
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        returned = cursor.fetchall()
    stored_set(instances, returned, unless_taken=unless_taken)


def insert_many_statement(
    instances: Sequence[models.Model], *, unless_taken: tuple[str, ...] = ()
) -> tuple[str, list[Any]]:
    """`insert_many`'s statement and its values, not run: for a caller that runs it inside a statement of
    its own (a WITH). It returns the primary key first, then the constraint's columns where one is given;
    `stored_set` takes those rows."""
    model = type(instances[0])
    one_row, fields = _insert_sql(model, connection.vendor, unless_taken)
    head, rest = one_row.split(" VALUES ", 1)
    row = rest[: rest.index(")") + 1]
    tail = rest[len(row) :]
    if unless_taken:  # the rows stored are told apart by the constraint's values, not by their order
        quote = connection.ops.quote_name
        tail += ", " + ", ".join(quote(model._meta.get_field(name).column) for name in unless_taken)
    sql = f"{head} VALUES {', '.join([row] * len(instances))}{tail}"
    conn = connections[DEFAULT_DB_ALIAS]  # not the thread-local proxy, read once per value
    values = [f.get_db_prep_save(f.pre_save(obj, True), conn) for obj in instances for f in fields]
    return sql, values


def stored_set(instances: Sequence[models.Model], returned: list[tuple], *, unless_taken: tuple[str, ...] = ()) -> None:
    """Set the primary key of each instance `insert_many_statement`'s rows say was stored."""
    if not instances:
        return
    model = type(instances[0])
    keys = [model._meta.get_field(name) for name in unless_taken]
    for obj, pk in _stored(instances, returned, keys):
        obj.pk = pk
        obj._state.adding = False
        obj._state.db = connection.alias


# The site facts' version (migration 0034): one row that a trigger on each site-facts table moves to a fresh
# number before any write there. Added to a statement that is sent anyway, it tells a process whether its copy
# of those facts is current (jobs.services.submission.intake_facts, jobs.services.cluster.object_creation).
SITE_FACTS_PRINT_FUNCTION = "gpuportal_site_facts_print"  # returns exactly SITE_FACTS_VERSION_SQL's value
SITE_FACTS_VERSION_SQL = "SELECT 'v' || version FROM gpuportal_site_facts_version WHERE id = 1"


def site_facts_version() -> str:
    """An expression for the site facts' version, evaluated once per statement; NULL where the database keeps
    none (SQLite in development: nothing may then be cached)."""
    # The row read inline rather than through the function: a SQL function that reads a table is not inlined
    # and is planned again at every call (three times a `SELECT 1`'s CPU), where this subquery is planned
    # with the statement that carries it, once per connection.
    return f"({SITE_FACTS_VERSION_SQL})" if connection.vendor == "postgresql" else "NULL"


# A team's facts' version (migration 0035): one row per team that a row trigger on each team-facts table (its
# quotas, dataset grants, secrets) moves to a fresh number at any write there; `v0` for a team that has none
# (no such write since that migration, which gave every team of its day a row).
TEAM_FACTS_PRINT_FUNCTION = "gpuportal_team_facts_print"  # returns exactly team_facts_version's value
TEAM_FACTS_VERSION_SQL = (
    "SELECT 'v' || coalesce((SELECT version FROM gpuportal_team_facts_version WHERE team_id = {team}), 0)"
)


def team_facts_version(team: str) -> str:
    """An expression for the version of the facts of the team `team` (an SQL expression: a column or a
    parameter), read inline as the site's is; NULL where the database keeps none."""
    return f"({TEAM_FACTS_VERSION_SQL.format(team=team)})" if connection.vendor == "postgresql" else "NULL"
