"""Caps that keep one person or one team from flooding the portal: queued workloads per user (site-wide),
per team, and per member of a team (a manager's setting).

The quota decides what runs; these decide how much may wait. They are hard: `queue_slot_take` runs inside
the transaction that stores the workload and first takes transaction-scoped locks on the submitter and on
the team, so concurrent submissions at the cap are counted one after another and exactly the cap is
admitted. The locks are always taken in the same order (person, then team), so two submissions never wait
on each other in a circle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection

from identity.models import Membership
from jobs.models import State, Team, Workload
from jobs.services.validation import SubmissionInvalid

QUEUE_FIELD = "queue"
TEAM_FIELD = "team"

# The first key of each advisory lock, so these locks can never meet another part's (ASCII "qu", "qt").
USER_LOCK_SPACE = 0x7175
TEAM_LOCK_SPACE = 0x7174


# Queued workloads of the person (site-wide), of the team, and of the person in the team, those this
# transaction stored included. The table name comes from the model; every value is a parameter.
_QUEUED_COUNTS_SQL = """
SELECT count(*) FILTER (WHERE owner_id = %(user)s),
       count(*) FILTER (WHERE team_id = %(team)s),
       count(*) FILTER (WHERE owner_id = %(user)s AND team_id = %(team)s)
FROM {workload}
WHERE state = %(queued)s AND (owner_id = %(user)s OR team_id = %(team)s)
"""


@dataclass(frozen=True)
class Alongside:
    """A write of the caller's sent in the statement that takes the queue locks, so it costs no round trip
    of its own (the REST create's idempotency record). `sql`: one INSERT ... RETURNING (a CTE of that
    statement on PostgreSQL, a statement of its own elsewhere) with `params`; `then` is told whether it
    returned a row, once the locks are held and before the caps are counted, and may raise to stop there."""

    sql: str
    params: Sequence[Any]
    then: Callable[[bool], None]


def queue_slot_take(
    *,
    team: Team,
    owner,
    stored: Workload | Sequence[Workload] | None = None,
    alongside: Alongside | None = None,
) -> None:
    """Check every queue cap for one more workload of `owner` in `team` (or for all of `stored`), holding
    the locks that make the check and the caller's inserts one decision. Must run inside the transaction
    that stores the workloads.

    `stored`: the workload, or the workloads of one request, when the caller stored them already in this
    transaction (they are counted as the new ones). Taking the locks after the inserts keeps them held for
    the shortest time: submissions of one team wait on each other only for the count and the commit.
    Raises SubmissionInvalid naming `queue` (the site's caps) or `team` (the team's cap per member).
    `alongside`: the caller's last write, sent with the locks (see Alongside).
    """
    if not connection.in_atomic_block:
        raise RuntimeError("queue_slot_take must run inside the transaction that stores the workload")
    if stored is None:
        new, uncounted = 1, 1  # not inserted yet
    else:
        new, uncounted = (1 if isinstance(stored, Workload) else len(stored)), 0
    queue_locks_take(user_id=owner.pk, team_id=team.pk, alongside=alongside)
    # One statement for the three counts (under the locks, so it sees every submission committed before),
    # written as SQL: it runs on every submission, and the ORM's aggregate cost more CPU to build.
    with connection.cursor() as cursor:
        cursor.execute(
            _QUEUED_COUNTS_SQL.format(workload=connection.ops.quote_name(Workload._meta.db_table)),
            {"user": owner.pk, "team": team.pk, "queued": State.QUEUED},
        )
        mine, theirs, in_team = (count + uncounted - new for count in cursor.fetchone())  # waiting before these
    if mine + new > settings.PORTAL_MAX_QUEUED_PER_USER:
        raise SubmissionInvalid(
            {
                QUEUE_FIELD: [
                    f"You already have {mine} workloads waiting (at most {settings.PORTAL_MAX_QUEUED_PER_USER})"
                    f"{_these(new)}; cancel some or wait until they start."
                ]
            }
        )
    if theirs + new > settings.PORTAL_MAX_QUEUED_PER_TEAM:
        raise SubmissionInvalid(
            {
                QUEUE_FIELD: [
                    f"{team.name} already has {theirs} workloads waiting (at most "
                    f"{settings.PORTAL_MAX_QUEUED_PER_TEAM}){_these(new)}; wait until some start."
                ]
            }
        )
    if team.user_max_queued is None:
        return
    if in_team + new > team.user_max_queued:
        raise SubmissionInvalid(
            {
                TEAM_FIELD: [
                    f"You already have {in_team} workload{'s' if in_team != 1 else ''} waiting in {team.name}"
                    f"{_these(new)}; the team allows {team.user_max_queued} per member. Cancel one or wait until "
                    "one starts."
                ]
            }
        )


def _these(new: int) -> str:
    return f" and this request adds {new}" if new > 1 else ""


# The person's lock, then the team's: a MATERIALIZED CTE is computed once, before the outer query reads its
# row, so the team's lock is asked for only once the person's is held. `{alongside}`: the caller's write as a
# CTE (`also`), whose rows the outer query counts; a data-modifying CTE runs to its end whatever the order.
_LOCKS_SQL = (
    "WITH {alongside}person AS MATERIALIZED (SELECT pg_advisory_xact_lock(%s, %s) AS held) "
    "SELECT pg_advisory_xact_lock(%s, %s){counted} FROM person"
)


def queue_locks_take(*, user_id: int, team_id: int, alongside: Alongside | None = None) -> None:
    """Transaction-scoped locks on one person and one team (released at commit or rollback), and with
    them the caller's `alongside` write, whose `then` is called once the locks are held.

    PostgreSQL: advisory locks, which touch no row, so nothing else that updates the user or the team
    (a sign-in, an admin edit) waits on a submission. Elsewhere: the member's row, locked for update
    (SQLite has one writer at a time anyway). Under READ COMMITTED each later count takes a fresh
    snapshot, so it sees every workload committed by whoever held the lock before.
    """
    keys = [USER_LOCK_SPACE, user_id % 2_147_483_647, TEAM_LOCK_SPACE, team_id % 2_147_483_647]
    if connection.vendor == "postgresql":
        # One round trip for the locks and the caller's write: every round trip here is one more a
        # submission of the same team waits for.
        if alongside is None:
            sql, params = _LOCKS_SQL.format(alongside="", counted=""), keys
        else:
            sql = _LOCKS_SQL.format(alongside=f"also AS ({alongside.sql}), ", counted=", (SELECT count(*) FROM also)")
            params = [*alongside.params, *keys]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        if alongside is not None:
            alongside.then(row[1] > 0)
        return
    Membership.objects.select_for_update().filter(user_id=user_id, team_id=team_id).first()
    if alongside is not None:
        with connection.cursor() as cursor:
            cursor.execute(alongside.sql, list(alongside.params))
            alongside.then(cursor.fetchone() is not None)
