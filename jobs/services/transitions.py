"""Moving a workload between states: guarded, timestamped, and written to its timeline.

A move is one conditional UPDATE (`WHERE id = ? AND state = <the state we saw>`), so two processes that
race to move the same workload cannot both win; the loser learns it from the row count and re-reads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from functools import lru_cache
from typing import Any

from django.db import connection, transaction
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
    from_state = workload.state
    if not can_move(from_state, to_state):
        log.info("workload %s: refusing %s -> %s", workload.uid, from_state, to_state)
        return False
    now = timezone.now()
    from jobs.services.usage.accounting import counted_interval, note_interval_changed

    counted_before = counted_interval(workload)
    changes = {"state": to_state, "reason": reason, "message": message, "state_changed_at": now, **fields}
    if _needs_end(workload, to_state, changes):
        # A workload that ever started stops counting GPU time when it ends, whoever ends it (the
        # database refuses a final, started workload without an end).
        changes["finished_at"] = now
    with transaction.atomic(savepoint=not getattr(_shared, "active", False)):
        entry = {"at": at or now, "source": source, "from_state": from_state, "to_state": to_state,
                 "reason": reason, "message": message}  # fmt: skip
        if connection.vendor == "postgresql":
            moved = move_with_entry(workload.id, from_state, {"updated_at": now, **changes}, entry)
        else:
            moved = Workload.objects.filter(id=workload.id, state=from_state).update(updated_at=now, **changes)
            if moved:
                timeline_append(workload.id, **entry)
        if not moved:
            workload.refresh_from_db()
            return False
        for key, value in changes.items():
            setattr(workload, key, value)
        if from_state in State.holding() and to_state not in State.holding():
            _gpus_released(workload)
        if to_state in State.final() or changes.keys() & {"started_at", "finished_at", "counted_from"}:
            note_interval_changed(workload, before=counted_before)
        # The one place workload news is announced: in this transaction (notifications records it, sent on commit).
        workload_transitioned.send(sender=Workload, workload=workload, from_state=from_state, actor=actor)
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
