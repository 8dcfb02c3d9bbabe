"""Reservations in an admission pass: reads what the pure backfill (reservation_plan) needs for the GPU
types that reserve, and keeps the reservations that stand as rows, so a promise outlives the pass.

An admission pass loads one `ReservationBook` (no query when no GPU type reserves, which is the default:
the pass read its GPU types with its quota rows), plans each cohort through it (`ReservationBook.plan`),
and `save`s the book before it commits: all under the pass's quota locks, so two passes never make two
promises for the same GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import F, Q
from django.utils import timezone

from jobs.models import GpuType, QueueReservation, State, Workload
from jobs.services.queue import reservation_plan, sharing_plan
from jobs.services.queue.reservation_plan import Reservation, Running
from jobs.services.queue.sharing_plan import Held, Plan, TeamQuota, Waiting


@dataclass
class ReservationBook:
    """The reservations of one admission pass: per GPU type that reserves, how long a workload waits
    before it is reserved for; those that stood before the pass and those that stand after it."""

    now: datetime
    reserve_after: dict[int, int]
    reserve_deeper_after: dict[int, int] = field(default_factory=dict)  # per type; absent: the plan's default
    standing: dict[tuple[int, int], list[QueueReservation]] = field(default_factory=dict)  # (team, type)
    made: dict[tuple[int, int], list[Reservation]] = field(default_factory=dict)
    seen: set[tuple[int, int]] = field(default_factory=set)  # (team, type) whose plan went through
    admitted: set[int] = field(default_factory=set)

    @classmethod
    def load(
        cls,
        team_ids: Iterable[int],
        gpu_type_ids: Iterable[int],
        *,
        now: datetime,
        gpu_types: Iterable[GpuType] = (),
    ) -> ReservationBook:
        """`gpu_types`: GPU type rows the caller read already (the pass's, with its quota rows); when they
        cover every one of `gpu_type_ids`, their `reserve_after_seconds` is taken from them, not read again."""
        types = list(gpu_type_ids)
        known = {t.id: t for t in gpu_types}
        if known and known.keys() >= set(types):
            waits = {
                t: (known[t].reserve_after_seconds, known[t].reserve_deeper_after_seconds)
                for t in types
                if known[t].reserve_after_seconds is not None
            }
        else:
            rows = GpuType.objects.filter(id__in=types, reserve_after_seconds__isnull=False).values_list(
                "id", "reserve_after_seconds", "reserve_deeper_after_seconds"
            )
            waits = {t: (head, deeper) for t, head, deeper in rows}
        reserve_after = {t: head for t, (head, _) in waits.items()}
        book = cls(now=now, reserve_after=reserve_after, reserve_deeper_after={t: d for t, (_, d) in waits.items()})
        if not reserve_after:
            return book
        rows = QueueReservation.objects.filter(
            team_id__in=list(team_ids), gpu_type_id__in=list(reserve_after), admitted_at__isnull=True
        ).select_related("workload")
        for row in rows.order_by("made_at", "id"):
            if row.workload.state == State.QUEUED:
                book.standing.setdefault((row.team_id, row.gpu_type_id), []).append(row)
            elif row.workload.admitted_at is not None and row.workload.state != State.CANCELLED:
                # Admitted by a pass that did not reserve (the type stopped reserving for a while).
                QueueReservation.objects.filter(id=row.id).update(admitted_at=row.workload.admitted_at)
            else:
                row.delete()  # cancelled while it waited: nothing to promise any more
        return book

    def promised_teams(self, gpu_type_id: int) -> dict[int, int]:
        """The team of each workload promised GPUs of the type: the plan admits a promised workload
        first whether or not the pass read it among its team's queue head."""
        return {
            row.workload_id: team_id
            for (team_id, type_id), rows in self.standing.items()
            if type_id == gpu_type_id
            for row in rows
        }

    def plan(
        self,
        teams: Mapping[int, TeamQuota],
        held: Sequence[Held],
        queue: Sequence[Waiting],
        *,
        gpu_type_id: int,
        borrowed_hours: Mapping[int, float] | None = None,
    ) -> Plan:
        """The plan of one cohort and GPU type (`sharing_plan.plan`), with backfill where the type reserves;
        `borrowed_hours`: per team, where the cohort shares borrowed GPUs fairly (`borrow_share`)."""
        reserve_after = self.reserve_after.get(gpu_type_id)
        if reserve_after is None:
            return sharing_plan.plan(teams, held, queue, borrowed_hours=borrowed_hours)
        team_ids = list(teams)
        self.seen.update((t, gpu_type_id) for t in team_ids)
        standing = {
            team_id: [
                (
                    Waiting(row.workload_id, team_id, row.gpus, row.workload.owner_id, row.workload.priority),
                    row.starts_by.timestamp() - reservation_plan.PROMISE_SLACK_SECONDS,
                )
                for row in self.standing.get((team_id, gpu_type_id), ())
            ]
            for team_id in team_ids
        }
        now = self.now.timestamp()
        ids = [w.id for w in queue] + [w.id for rows in standing.values() for w, _ in rows]
        limits = Workload.objects.filter(id__in=ids).values_list("id", "time_limit_seconds")
        done = reservation_plan.plan_and_backfill(
            teams,
            held,
            queue,
            running=running_of(team_ids, gpu_type_id, now=now),
            time_limits={i: float(s) for i, s in limits},
            now=now,
            reserve_after=float(reserve_after),
            standing=standing,
            borrowed_hours=borrowed_hours,
            reserve_deeper_after=float(
                self.reserve_deeper_after.get(gpu_type_id, reservation_plan.RESERVE_DEEPER_AFTER_SECONDS)
            ),
        )
        for team_id, made in done.reservations.items():
            self.made[(team_id, gpu_type_id)] = made
        reserved = {w.id for rows in standing.values() for w, _ in rows}
        self.admitted.update(i for i in done.plan.admit if i in reserved)
        return done.plan

    def save(self) -> None:
        """New reservations become rows; a reservation whose workload was admitted records when; one whose
        workload left the queue (cancelled) or that no longer stands is dropped."""
        now = self.now
        QueueReservation.objects.filter(workload_id__in=self.admitted, admitted_at__isnull=True).update(admitted_at=now)
        promised = {r.workload_id for made in self.made.values() for r in made}
        stale = [
            row.id
            for key, rows in self.standing.items()
            if key in self.seen
            for row in rows
            if row.workload_id not in self.admitted and row.workload_id not in promised
        ]
        if stale:
            QueueReservation.objects.filter(id__in=stale).delete()
        self._bring_forward()
        standing = {row.workload_id for rows in self.standing.values() for row in rows}
        new = [
            QueueReservation(
                workload_id=r.workload_id,
                team_id=team_id,
                gpu_type_id=gpu_type_id,
                gpus=r.gpus,
                starts_by=datetime.fromtimestamp(r.due_at + reservation_plan.PROMISE_SLACK_SECONDS, tz=now.tzinfo),
                made_at=now,
            )
            for (team_id, gpu_type_id), made in self.made.items()
            for r in made
            if r.workload_id not in standing
        ]
        if new:
            QueueReservation.objects.filter(workload_id__in=[r.workload_id for r in new]).delete()
            QueueReservation.objects.bulk_create(new)

    def _bring_forward(self) -> None:
        """A promise brought forward by the plan (reservation_plan._pull_in): the row says the earlier time
        from now on (one UPDATE, where any moved)."""
        due = {r.workload_id: r.due_at for made in self.made.values() for r in made}
        earlier = []
        for row in (row for key, rows in self.standing.items() if key in self.seen for row in rows):
            if row.workload_id not in due or row.workload_id in self.admitted:
                continue
            by = datetime.fromtimestamp(
                due[row.workload_id] + reservation_plan.PROMISE_SLACK_SECONDS, tz=self.now.tzinfo
            )
            if by < row.starts_by - timedelta(seconds=1):
                row.starts_by = by
                earlier.append(row)
        if earlier:
            QueueReservation.objects.bulk_update(earlier, ["starts_by"])


def running_of(team_ids: Sequence[int], gpu_type_id: int, *, now: float) -> dict[int, list[Running]]:
    """Per team, what holds GPUs of the type and the latest it may hold them (by its time limit)."""
    running: dict[int, list[Running]] = {}
    rows = Workload.objects.filter(
        team_id__in=team_ids, gpu_type_id=gpu_type_id, state__in=State.holding()
    ).values_list("team_id", "gpu_count", "started_at", "admitted_at", "time_limit_seconds")
    for team_id, gpus, started, admitted, limit in rows:
        running.setdefault(team_id, []).append(
            Running(
                gpus,
                reservation_plan.ends_by(
                    started=started.timestamp() if started else None,
                    admitted=admitted.timestamp() if admitted else None,
                    time_limit=float(limit),
                    now=now,
                ),
            )
        )
    return running


def standing_for(workload_ids: Iterable[int]) -> dict[int, QueueReservation]:
    """The promises that stand for these (queued) workloads, by workload id."""
    return {
        r.workload_id: r
        for r in QueueReservation.objects.filter(Q(workload_id__in=list(workload_ids)), admitted_at__isnull=True)
    }


def promise_of(workload: Workload) -> datetime | None:
    """ "Starts no later than": the promise standing for a queued workload, else None."""
    if workload.state != State.QUEUED:
        return None
    row = QueueReservation.objects.filter(workload=workload, admitted_at__isnull=True).first()
    return row.starts_by if row else None


def bound_violations(*, gpu_type_ids: Iterable[int] | None = None, since: datetime | None = None) -> int:
    """Promises broken: workloads admitted after the time they were promised (or still waiting past it)."""
    now = timezone.now()
    rows = QueueReservation.objects.all()
    if gpu_type_ids is not None:
        rows = rows.filter(gpu_type_id__in=list(gpu_type_ids))
    if since is not None:
        rows = rows.filter(made_at__gte=since)
    late = Q(workload__admitted_at__gt=F("starts_by")) | Q(workload__state=State.QUEUED, starts_by__lt=now)
    return rows.filter(late).count()
