"""Moving a workload between states: guarded, timestamped, and written to its timeline.

A move is one conditional UPDATE (`WHERE id = ? AND state = <the state we saw>`), so two processes that
race to move the same workload cannot both win; the loser learns it from the row count and re-reads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

import orjson
from django.db import connection, connections, transaction
from django.db.models.sql import UpdateQuery
from django.utils import timezone

from jobs.models import State, Workload, WorkloadEvent
from jobs.models.workloads import TRANSITIONS
from jobs.signals import workload_transitioned

log = logging.getLogger(__name__)


def requeued_attempt(workload: Workload, at: datetime) -> dict[str, Any]:
    """The fields of a workload sent back to the front of its queue as a fresh attempt (preempted, retried,
    or a gang released after its start window): the next attempt's number, and nothing of the last run's
    placement or times left behind."""
    return {
        "attempt": workload.attempt + 1,
        "requeued_at": at,
        "borrowed": False,
        "admitted_at": None,
        "submitted_at": None,
        "started_at": None,
        "finished_at": None,
        "counted_from": None,
        "k8s_name": "",
        "node_name": "",
        "pod_name": "",
        "pod_uid": "",
    }


# A caller that records many moves in one transaction of its own (the tracker's burst) asks for no savepoint
# per move: a failing move then fails the caller's whole transaction, which the caller must redo (it does,
# one workload at a time). Everyone else keeps a move's own savepoint inside their transaction.
_shared = threading.local()


@contextmanager
def moves_share_the_transaction() -> Iterator[None]:
    """Inside the block (and inside the caller's `transaction.atomic()`), moves take no savepoint each, and
    the rows handed to `write_before_commit` are written as the block ends, still inside that transaction
    (a block left by an error writes nothing: its transaction is rolled back anyway)."""
    if getattr(_shared, "active", False):
        yield
        return
    _shared.active, _shared.pending = True, {}
    try:
        yield
        while _shared.pending:
            write_all, items = _shared.pending.pop(next(iter(_shared.pending)))
            write_all(items)
    finally:
        _shared.active, _shared.pending = False, {}


def write_before_commit(key: str, item: Any, write_all: Callable[[list[Any]], None]) -> bool:
    """Inside `moves_share_the_transaction`, keep `item` for one `write_all(items)` per key as the block ends
    (the rows of many moves written together: one INSERT for a burst's notification events); False outside
    one (the caller writes its own)."""
    if not getattr(_shared, "active", False):
        return False
    _shared.pending.setdefault(key, (write_all, []))[1].append(item)
    return True


def can_move(from_state: str, to_state: str) -> bool:
    return to_state in TRANSITIONS.get(from_state, frozenset())


def _needs_end(workload: Workload, to_state: str, changes: dict[str, Any]) -> bool:
    """A move to a final state of a workload that ever started, with no end given."""
    return (
        to_state in State.final()
        and changes.get("finished_at") is None
        and bool(changes.get("started_at") or workload.started_at)
    )


def _gpus_released(workload: Workload) -> None:
    """GPUs were released: the next queued workload of this team and type may fit now. Asked once while a
    pass waits to start (a burst of ends is one pass, not one each; that pass starts after this commit, so
    it sees these GPUs free)."""
    from jobs.services.dispatch import request_admission

    request_admission(team_id=workload.team_id, gpu_type_id=workload.gpu_type_id)


@dataclass
class PlannedWrite:
    """A guarded write of one workload's row, decided but not yet sent: `values` set while the row is still in
    `from_state`, with its timeline `entry` (None: no entry); `done()` once it was written (the in-memory
    object and the follow-ups), `missed()` when the row was no longer in that state."""

    workload: Workload
    from_state: str
    values: dict[str, Any]
    entry: dict[str, Any] | None
    done: Callable[[], None]
    missed: Callable[[], None]


def plan_transition(
    workload: Workload,
    to_state: str,
    *,
    reason: str = "",
    message: str = "",
    at: datetime | None = None,
    source: str = WorkloadEvent.Source.PORTAL,
    actor: Any = None,
    **fields: Any,
) -> PlannedWrite | None:
    """The write of `transition` and what follows it, for the caller to send (alone or with others); None
    when the move is not allowed from the state we saw."""
    from_state = workload.state
    if not can_move(from_state, to_state):
        log.info("workload %s: refusing %s -> %s", workload.uid, from_state, to_state)
        return None
    now = timezone.now()
    from jobs.services.usage.accounting import counted_interval, note_interval_changed

    counted_before = counted_interval(workload)
    changes = {"state": to_state, "reason": reason, "message": message, "state_changed_at": now, **fields}
    if _needs_end(workload, to_state, changes):
        # A workload that ever started stops counting GPU time when it ends, whoever ends it (the
        # database refuses a final, started workload without an end).
        changes["finished_at"] = now
    entry = {"at": at or now, "source": source, "from_state": from_state, "to_state": to_state,
             "reason": reason, "message": message}  # fmt: skip

    def done() -> None:
        for key, value in changes.items():
            setattr(workload, key, value)
        if from_state in State.holding() and to_state not in State.holding():
            _gpus_released(workload)
        if to_state in State.final() or changes.keys() & {"started_at", "finished_at", "counted_from"}:
            note_interval_changed(workload, before=counted_before)
        # The one place workload news is announced: in this transaction (notifications records it, sent on commit).
        workload_transitioned.send(sender=Workload, workload=workload, from_state=from_state, actor=actor)

    return PlannedWrite(workload, from_state, {"updated_at": now, **changes}, entry, done, workload.refresh_from_db)


def transition(
    workload: Workload,
    to_state: str,
    *,
    reason: str = "",
    message: str = "",
    at: datetime | None = None,
    source: str = WorkloadEvent.Source.PORTAL,
    actor: Any = None,
    **fields: Any,
) -> bool:
    """Move `workload` to `to_state` if it is still in the state we last saw. Returns whether it moved.

    On success the in-memory object is updated too; on failure it is refreshed from the database.
    `actor` is the person who asked for the move, if one did (a cancel): nobody is told of their own act.
    """
    plan = plan_transition(
        workload, to_state, reason=reason, message=message, at=at, source=source, actor=actor, **fields
    )
    if plan is None:
        return False
    with transaction.atomic(savepoint=not getattr(_shared, "active", False)):
        if not write_one(plan):
            plan.missed()
            return False
        plan.done()
    return True


def write_one(plan: PlannedWrite) -> bool:
    """Send one planned write; whether the row was still in its state (and so was written)."""
    if connection.vendor == "postgresql":
        if plan.entry is None:
            sql, params = update_sql(plan.workload.id, plan.from_state, plan.values)
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                return cursor.rowcount > 0
        return move_with_entry(plan.workload.id, plan.from_state, plan.values, plan.entry)
    with transaction.atomic(savepoint=False):
        if not Workload.objects.filter(id=plan.workload.id, state=plan.from_state).update(**plan.values):
            return False
        if plan.entry is not None:
            timeline_append(plan.workload.id, **plan.entry)
    return True


# A timeline entry at `at`, or at the workload's latest entry's time if that is later, computed by the
# INSERT itself (one round trip): Kubernetes' timestamps have whole seconds, and an entry must never sort
# before the one it follows. Fixed SQL (a CASE, which PostgreSQL and SQLite both have): every state change
# writes one, and the ORM compiled the same subquery expression anew each time.
_TIMELINE_APPEND_SQL = """
INSERT INTO {event} (workload_id, at, source, from_state, to_state, reason, message)
SELECT %s, CASE WHEN latest.at > %s THEN latest.at ELSE %s END, %s, %s, %s, %s, %s
FROM (SELECT max(at) AS at FROM {event} WHERE workload_id = %s) AS latest
"""


_MOVE_WITH_ENTRY_SQL = """
WITH moved AS ({update} RETURNING 1)
INSERT INTO {event} (workload_id, at, source, from_state, to_state, reason, message)
SELECT %s, CASE WHEN latest.at > %s THEN latest.at ELSE %s END, %s, %s, %s, %s, %s
FROM moved, (SELECT max(at) AS at FROM {event} WHERE workload_id = %s) AS latest
RETURNING 1
"""


@lru_cache(maxsize=128)
def _guarded_update(names: tuple[str, ...]) -> tuple[str, tuple[Any, ...]] | None:
    """The guarded UPDATE of these plain columns as fixed SQL and its fields, compiled once per set of names
    (the ORM compiled the same UPDATE anew for every move); None when a field needs the ORM's compiler."""
    fields = tuple(Workload._meta.get_field(name) for name in names)
    if any(field.is_relation or hasattr(field, "get_placeholder") for field in fields):
        return None
    qn = connection.ops.quote_name
    table = qn(Workload._meta.db_table)
    sets = ", ".join(f"{qn(field.column)} = %s" for field in fields)
    pk, state = qn(Workload._meta.pk.column), qn(Workload._meta.get_field("state").column)
    # Column and table names from the model, quoted; every value is a parameter.
    return f"UPDATE {table} SET {sets} WHERE ({table}.{pk} = %s AND {table}.{state} = %s)", fields  # noqa: S608


def _plain(value: Any) -> bool:
    return not (hasattr(value, "resolve_expression") or hasattr(value, "prepare_database_save"))


def update_sql(workload_id: int, from_state: str, values: dict[str, Any]) -> tuple[str, list[Any]]:
    compiled = _guarded_update(tuple(values)) if all(_plain(v) for v in values.values()) else None
    if compiled is None:
        query = Workload.objects.filter(id=workload_id, state=from_state).query.chain(UpdateQuery)
        query.add_update_values(values)
        sql, params = query.get_compiler(connection.alias).as_sql()
        return sql, list(params)
    sql, fields = compiled
    params = [
        field.get_db_prep_save(value, connection=connection)
        for field, value in zip(fields, values.values(), strict=True)
    ]
    return sql, [*params, workload_id, from_state]


def move_with_entry(workload_id: int, from_state: str, values: dict[str, Any], entry: dict[str, Any]) -> bool:
    """The guarded UPDATE and its timeline entry in one statement (PostgreSQL: the UPDATE's RETURNING feeds
    the INSERT of _TIMELINE_APPEND_SQL's row); whether the workload moved. Every state change of every
    workload goes through here, most of them the tracker's: one round trip and one statement less each."""
    update, update_params = update_sql(workload_id, from_state, values)
    moment = WorkloadEvent._meta.get_field("at").get_db_prep_save(entry["at"], connection)
    event = connection.ops.quote_name(WorkloadEvent._meta.db_table)
    sql = _MOVE_WITH_ENTRY_SQL.format(update=update, event=event)
    params = [*update_params, workload_id, moment, moment, entry["source"], entry["from_state"], entry["to_state"],
              entry["reason"], entry["message"], workload_id]  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() is not None


def timeline_append(
    workload_id: int, *, at: datetime, source: str, from_state: str, to_state: str, reason: str, message: str
) -> None:
    """Write a state change to the workload's timeline, never before its latest entry."""
    moment = WorkloadEvent._meta.get_field("at").get_db_prep_save(at, connection)
    sql = _TIMELINE_APPEND_SQL.format(event=connection.ops.quote_name(WorkloadEvent._meta.db_table))
    with connection.cursor() as cursor:
        cursor.execute(sql, [workload_id, moment, moment, source, from_state, to_state, reason, message, workload_id])


def note(workload: Workload, *, reason: str, message: str, source: str = WorkloadEvent.Source.KUBERNETES) -> None:
    """A timeline entry without a state change (a new reason while pending, a warning), never before the
    latest entry (a state change may carry a Kubernetes timestamp ahead of this clock)."""
    timeline_append(
        workload.id, at=timezone.now(), source=source, from_state=workload.state, to_state=workload.state,
        reason=reason, message=message,
    )  # fmt: skip


# The columns a batch of planned writes may set (those the tracker's moves and in-place updates set), each
# by a bit of the row's mask: a row leaves the others as they are. `updated_at` is always set.
_BATCH_COLUMNS = ("state", "reason", "message", "state_changed_at", "node_name", "pod_name", "pod_uid",
                  "started_at", "finished_at", "exit_code")  # fmt: skip

# Every row of the batch in one statement: the rows still in the state each was read in are locked in id
# order (the order other multi-row writers lock in), updated, and those that moved get their timeline entry,
# each never before its workload's latest (as _TIMELINE_APPEND_SQL); the ids of the rows written come back.
# The rows arrive as one JSON parameter (an array of arrays), each value cast to its column's type (an explicit
# cast, as the per-column arrays it replaced were): psycopg adapted those 18 arrays element by element in
# Python, a sixth of the tracker's CPU for a burst, where one string is sent as it is.
_WRITE_MANY_SQL = """
WITH v AS MATERIALIZED (
  SELECT {values} FROM json_array_elements(%s::json) AS r
),
locked AS MATERIALIZED (
  SELECT w.{pk} AS id FROM {table} w JOIN v ON v.id = w.{pk} AND w.{state} = v.from_state
  ORDER BY w.{pk} FOR UPDATE OF w
),
moved AS (
  UPDATE {table} w SET {updated_at} = v.updated_at, {sets}
  FROM v JOIN locked ON locked.id = v.id
  WHERE w.{pk} = v.id AND w.{state} = v.from_state
  RETURNING w.{pk} AS id, w.{state} AS to_state, w.{reason} AS reason, w.{message} AS message
),
entries AS (
  INSERT INTO {event} (workload_id, at, source, from_state, to_state, reason, message)
  SELECT m.id, CASE WHEN latest.at > v.e_at THEN latest.at ELSE v.e_at END, v.e_source, v.from_state,
         m.to_state, m.reason, m.message
  FROM moved m JOIN v ON v.id = m.id
  CROSS JOIN LATERAL (SELECT max(e.at) AS at FROM {event} e WHERE e.workload_id = m.id) AS latest
  WHERE v.e_at IS NOT NULL
)
SELECT id FROM moved
"""


@lru_cache(maxsize=1)
def _write_many_sql() -> str:
    qn, field = connection.ops.quote_name, Workload._meta.get_field
    event_field = WorkloadEvent._meta.get_field
    fixed = ["bigint", field("state").db_type(connection), "integer", field("updated_at").db_type(connection)]
    types = [*fixed, *(field(name).db_type(connection) for name in _BATCH_COLUMNS),
             event_field("at").db_type(connection), event_field("source").db_type(connection)]  # fmt: skip
    sets = ", ".join(
        f"{qn(field(name).column)} = CASE WHEN v.mask & {1 << bit} <> 0 THEN v.c_{name} "
        f"ELSE w.{qn(field(name).column)} END"
        for bit, name in enumerate(_BATCH_COLUMNS)
    )
    names = ["id", "from_state", "mask", "updated_at", *(f"c_{name}" for name in _BATCH_COLUMNS), "e_at", "e_source"]
    return _WRITE_MANY_SQL.format(
        values=", ".join(f"(r->>{index})::{kind} AS {name}" for index, (name, kind) in enumerate(zip(names, types, strict=True))),
        table=qn(Workload._meta.db_table), event=qn(WorkloadEvent._meta.db_table), pk=qn(Workload._meta.pk.column),
        state=qn(field("state").column), reason=qn(field("reason").column), message=qn(field("message").column),
        updated_at=qn(field("updated_at").column), sets=sets,
    )  # fmt: skip


def _batchable(plan: PlannedWrite) -> bool:
    return "updated_at" in plan.values and all(
        (name == "updated_at" or name in _BATCH_COLUMNS) and _plain(value) for name, value in plan.values.items()
    )


def write_many(plans: list[PlannedWrite]) -> list[bool]:
    """Send planned writes of distinct workloads, in id order, together (the tracker's chunk of a burst):
    on PostgreSQL one statement for all of them (the rows and the timeline entries of those written),
    elsewhere one at a time. Whether each was written, in order; the caller runs its `done` or `missed`."""
    if not plans:
        return []
    if connection.vendor != "postgresql" or len(plans) == 1 or not all(map(_batchable, plans)):
        return [write_one(plan) for plan in plans]
    # The connection itself, not the thread-local proxy: each attribute read through `connection` costs a
    # thread-local lookup, and preparing a burst's values reads it a dozen times per workload.
    conn = connections[connection.alias]
    fields = [(1 << bit, name, Workload._meta.get_field(name)) for bit, name in enumerate(_BATCH_COLUMNS)]
    updated_at_field, at_field = Workload._meta.get_field("updated_at"), WorkloadEvent._meta.get_field("at")
    rows: list[list[Any]] = []
    for plan in plans:
        mask, row, values = 0, [], plan.values
        for bit, name, field in fields:
            if name in values:
                mask |= bit
                row.append(field.get_db_prep_save(values[name], connection=conn))
            else:
                row.append(None)
        entry = plan.entry or {}
        at = at_field.get_db_prep_save(entry["at"], conn) if plan.entry else None
        updated_at = updated_at_field.get_db_prep_save(values["updated_at"], connection=conn)
        rows.append([plan.workload.id, plan.from_state, mask, updated_at, *row, at, entry.get("source")])
    try:
        sent = orjson.dumps(rows).decode()
    except TypeError:  # a value JSON cannot carry as it is: each row alone, as the ORM would write it
        return [write_one(plan) for plan in plans]
    with conn.cursor() as cursor:
        cursor.execute(_write_many_sql(), [sent])
        written = {row[0] for row in cursor.fetchall()}
    return [plan.workload.id in written for plan in plans]
