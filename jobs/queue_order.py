"""A team's queue order, written once: the order in which one team's queued workloads of one GPU type are
taken, and every form it is read in (a Python sort key, SQL ORDER BY text, a Django ORM ordering, and the
"ahead of it" conditions a queue position counts).

The order (`TEAM_ORDER`), key by key, each breaking the ties of the ones before:

1. priority, highest first: a manager's choice outranks everything else;
2. requeued work first, the earliest requeued first: preempted work had its turn and goes back to the
   front of its priority instead of the back;
3. the owner's recent fair-share usage, least first (where the team uses fair share; 0 for everyone
   elsewhere): someone who has had little goes before someone who has had a lot;
4. where the GPU type ages (GpuType.queue_aging), GPUs x seconds waited, most first (`aged_weight`): a
   large workload catches up with smaller ones that came before it instead of waiting behind a stream of
   them (0 for everyone elsewhere);
5. submission time, earliest first: otherwise first come, first served;
6. id, lowest first: so that every rendering breaks the last ties alike.

Keys 2 and 3 are known to the admission pass alone (it reads fair-share usage, and requeues are rare): a
queue position shown on a page counts by `POSITION_ORDER`, the order without them. `INDEX_ORDER` is the
order where the type does not age either: what the queue index (team, GPU type, state, -priority,
created_at) reads in order.

The admission pass (its SQL, and Python where it plans), the queue page (ORM), the queue positions (SQL
and ORM) and the forecast (Python) all render these tuples, so a page never orders the queue otherwise
than what starts first, and a change to the order is made here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from operator import or_
from typing import Any

from django.db.models import Case, DateTimeField, F, FloatField, Func, OrderBy, Q, Value, When
from django.db.models.expressions import Combinable


@dataclass(frozen=True)
class Key:
    """One key of the order: its name (what each rendering gives a value or column for), whether the
    largest goes first, and whether a missing value (NULL, None) goes last."""

    name: str
    descending: bool = False
    nulls_last: bool = False


PRIORITY = Key("priority", descending=True)
REQUEUED = Key("requeued", nulls_last=True)
FAIR_SHARE = Key("fair_share")
AGED = Key("aged", descending=True)
CREATED = Key("created")
ID = Key("id")

TEAM_ORDER: tuple[Key, ...] = (PRIORITY, REQUEUED, FAIR_SHARE, AGED, CREATED, ID)
POSITION_ORDER: tuple[Key, ...] = (PRIORITY, AGED, CREATED, ID)
INDEX_ORDER: tuple[Key, ...] = (PRIORITY, CREATED, ID)


def aged_weight(gpus: int, created: float, now: float) -> float:
    """GPU-seconds waited (key 4): the larger, the earlier in the team's queue (after priority, requeues and
    fair share). At least one GPU, never less than nothing waited."""
    return max(1, gpus) * max(0.0, now - created)


# --- Python ------------------------------------------------------------------------------------------
def sort_key(values: Mapping[str, Any], keys: Sequence[Key] = TEAM_ORDER) -> tuple:
    """A sort key (smallest first) from each key's value by name; None where `nulls_last` (after all)."""
    out: list[Any] = []
    for key in keys:
        value = values[key.name]
        if key.nulls_last:
            out += [value is None, value or 0.0]
        else:
            out.append(-value if key.descending else value)
    return tuple(out)


def team_order_key(entry: Any, user_usage: Mapping[int, float] | None, *, aging_now: float | None = None) -> tuple:
    """The sort key of a queued entry (id, user_id, gpus, priority, created and requeued as epoch seconds or
    None): `user_usage` is each person's fair-share usage where the team uses it; `aging_now` the time to
    age to where the GPU type ages."""
    return sort_key({
        "priority": entry.priority,
        "requeued": entry.requeued,
        "fair_share": (user_usage or {}).get(entry.user_id, 0.0),
        "aged": aged_weight(entry.gpus, entry.created, aging_now) if aging_now is not None else 0.0,
        "created": entry.created,
        "id": entry.id,
    })  # fmt: skip


# --- SQL -----------------------------------------------------------------------------------------------
# GPUs x seconds waited (aged_weight) in each database's SQL, of the given columns and the time to age to.
_AGED_SQL = {
    "postgresql": "greatest({gpus}, 1) * greatest(extract(epoch FROM {now}::timestamptz - {created}), 0)",
    "sqlite": "max({gpus}, 1) * max((julianday({now}) - julianday({created})) * 86400.0, 0)",
}


def aged_sql(*, gpus: str, created: str, now: str = "%s", vendor: str = "postgresql") -> str:
    """`aged_weight` as SQL of the columns `gpus` and `created` at `now` (a placeholder by default: its
    parameter is the time to age to)."""
    return _AGED_SQL["postgresql" if vendor == "postgresql" else "sqlite"].format(gpus=gpus, created=created, now=now)


def order_by_sql(columns: Mapping[str, str], keys: Sequence[Key] = TEAM_ORDER) -> str:
    """ORDER BY text (without the words) from each key's SQL expression by name."""
    return ", ".join(
        f"{columns[k.name]} {'DESC' if k.descending else 'ASC'}{' NULLS LAST' if k.nulls_last else ''}" for k in keys
    )


def ahead_sql(columns: Mapping[str, str], mine: Mapping[str, str], keys: Sequence[Key] = INDEX_ORDER) -> list[str]:
    """The rows ahead of one (its values `mine`, SQL by key name) in `keys`' order, as one condition per
    key (the same before it, ahead by it): disjoint, each a range of an index in that order."""
    parts: list[str] = []
    same: list[str] = []
    for k in keys:
        if k.nulls_last:
            raise ValueError(f"{k.name}: a range count cannot compare NULLs")
        parts.append(" AND ".join([*same, f"{columns[k.name]} {'>' if k.descending else '<'} {mine[k.name]}"]))
        same.append(f"{columns[k.name]} = {mine[k.name]}")
    return parts


# --- Django ORM ------------------------------------------------------------------------------------------
class AgedWeight(Func):
    """`aged_weight` of the row's (or, given OuterRefs, the outer row's) GPU count and creation at `now`."""

    output_field = FloatField()

    def __init__(self, gpus: Any, created: Any, now: datetime) -> None:
        super().__init__(gpus, created, Value(now, output_field=DateTimeField()))

    def as_sql(self, compiler, connection, **extra_context):  # type: ignore[override]
        (gpus, gpus_params), (created, created_params), (now, now_params) = (
            compiler.compile(e) for e in self.get_source_expressions()
        )
        sql = f"({aged_sql(gpus=gpus, created=created, now=now, vendor=connection.vendor)})"
        return sql, [*gpus_params, *now_params, *created_params]


# The Workload fields of the keys that are a column of the row.
FIELDS = {"priority": "priority", "requeued": "requeued_at", "created": "created_at", "id": "id"}


def orm_order(*, fair_share: Mapping[int, float] | None = None, aging_now: datetime | None = None) -> list[OrderBy]:
    """The order for `QuerySet.order_by` over Workload: `fair_share` each owner's usage where the team uses it
    (left out where empty: everyone's is 0), `aging_now` the time to age to where the type ages (left out
    otherwise: everyone's weight is 0)."""
    exprs: dict[str, Combinable] = {name: F(field) for name, field in FIELDS.items()}
    keys = list(TEAM_ORDER)
    if fair_share:
        whens = [When(owner_id=owner, then=Value(hours)) for owner, hours in fair_share.items()]
        exprs["fair_share"] = Case(*whens, default=Value(0.0), output_field=FloatField())
    else:
        keys.remove(FAIR_SHARE)
    if aging_now is not None:
        exprs["aged"] = AgedWeight(F("gpu_count"), F("created_at"), aging_now)
    else:
        keys.remove(AGED)
    return [
        exprs[k.name].desc() if k.descending else exprs[k.name].asc(nulls_last=True if k.nulls_last else None)
        for k in keys
    ]


def ahead_q(keys: Sequence[Key], ours: Callable[[Key], tuple[str, Any]], *, split: int | None = None) -> list[Q]:
    """The rows ahead of one in `keys`' order as disjoint conditions: one per key (the same before it, ahead
    by it) up to `split`, the keys from `split` on as one (the same before them, ahead by one of them).
    `ours(key)` gives the lookup name on the row and the value it is held against (an OuterRef, or an F of
    an annotation)."""
    parts: list[Q] = []
    same = Q()
    later: list[Q] = []
    later_same = Q()
    for i, k in enumerate(keys):
        if k.nulls_last:
            raise ValueError(f"{k.name}: a range count cannot compare NULLs")
        name, theirs = ours(k)
        ahead = Q(**{f"{name}__{'gt' if k.descending else 'lt'}": theirs})
        if split is not None and i >= split:
            later.append(later_same & ahead)
            later_same &= Q(**{name: theirs})
        else:
            parts.append(same & ahead)
            same &= Q(**{name: theirs})
    if later:
        parts.append(same & reduce(or_, later))
    return parts
