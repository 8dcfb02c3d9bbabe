"""Submitting a workload: validate everything, store it QUEUED, and ask for admission."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import connection, transaction

import spec_rules
from identity.models import Membership
from jobs import policy
from jobs import sql as jobs_sql
from jobs.models import GpuType, Team, Workload, WorkloadEvent
from jobs.models import workloads as workloads_model
from jobs.selectors import stored_position_sql
from jobs.services.dispatch import enqueue_admission, request_admission
from jobs.services.storage.secrets import secrets_unusable
from jobs.services.storage.workspaces import dataset_mounts, workspace_mounts
from jobs.services.submission import intake_facts
from jobs.services.submission.queue_caps import Alongside, queue_slot_take
from jobs.services.validation import Facts, SubmissionInvalid, validate_submission

log = logging.getLogger(__name__)


def gather_facts(*, team: Team, user) -> Facts:
    """Everything validation needs (the launch form shows the same): see `facts_from`."""
    return facts_from(intake_facts.snapshot(team=team, user=user), team=team, user=user)


def facts_from(snapshot: intake_facts.Snapshot, *, team: Team, user) -> Facts:
    exhausted, budget_message = False, ""
    if team.monthly_gpu_hour_budget is not None:
        from jobs.services.usage.accounting import budget_exhausted, month_to_date_hours

        if budget_exhausted(team):
            exhausted = True
            used = month_to_date_hours(team)
            budget_message = (
                f"Your team has used {used:.1f} of its {team.monthly_gpu_hour_budget} GPU-hour budget this month."
            )
    return Facts(
        gpu_types=snapshot.gpu_types(),
        catalog=snapshot.site.catalog,
        allowed_registries=snapshot.site.allowed_registries,
        budget_exhausted=exhausted,
        budget_message=budget_message,
        may_set_priority=policy.may_set_priority(user, team, role=snapshot.role),
        default_time_limit={
            "batch": settings.PORTAL_DEFAULT_TIME_LIMIT_BATCH,
            "service": settings.PORTAL_DEFAULT_TIME_LIMIT_SERVICE,
        },
        min_time_limit=settings.PORTAL_MIN_TIME_LIMIT,
        max_time_limit=settings.PORTAL_MAX_TIME_LIMIT,
        secrets=snapshot.team.secrets,
        datasets=snapshot.datasets_allowed(),
    )


def workload_submit(
    *,
    team: Team,
    owner,
    spec: Mapping[str, Any],
    facts: Facts | None = None,
    snapshot: intake_facts.Snapshot | None = None,
    admit_in_line: bool = True,
    all_or_nothing: bool = False,
    queue_slot_later: bool = False,
    with_queue_position: bool = False,
) -> Workload:
    """Validate and store a submission as QUEUED, then trigger admission.

    `facts`: what gather_facts(team=team, user=owner) returned in this request, when the caller needed
    them already (the launch page shows them); `snapshot`: intake_facts' snapshot read with the team (the
    REST create); looked up here otherwise. `admit_in_line`: admit right
    after the commit, in this process (the launch page then shows the outcome); False asks a worker for
    a coalesced pass instead, for callers whose answer cannot show the outcome anyway (the REST create
    renders its response inside its own transaction, before any admission could run) and should not
    wait for it. Raises SubmissionInvalid (errors by field) and stores nothing when any rule is broken.
    `all_or_nothing`: the caller runs this inside its own transaction and rolls all of it back on any
    error (the REST create with an Idempotency-Key), so the store needs no savepoint of its own.
    `queue_slot_later` (with `all_or_nothing`): the caller takes the queue slot itself
    (the call `queue_slots_later` gives it) as its last statement before the commit, after its own writes: the caps' locks, which every submission of the team waits for, are then held only for the
    count and the commit.
    `with_queue_position`: on PostgreSQL the store also reads the workload's queue position as it is
    stored, kept on it as `queue_position_at_store` (the REST create renders it without a read of its own).
    """
    if queue_slot_later and not all_or_nothing:
        raise ValueError("queue_slot_later needs the caller's transaction (all_or_nothing)")
    if facts is None:
        if snapshot is None:
            snapshot = intake_facts.snapshot(team=team, user=owner)  # one query when no fact has changed
        member = snapshot.role is not None
    else:
        member = Membership.objects.filter(user=owner, team=team).exists()
    if not member:
        raise SubmissionInvalid({"team": ["You are not a member of this team."]})
    clean, shared = _judged(team=team, spec=spec, facts=facts or facts_from(snapshot, team=team, user=owner))
    if facts is None:
        gpu_type_id = snapshot.site.gpu_type_ids[clean.gpu_type]
        gpu_type_name = snapshot.site.gpu_types[clean.gpu_type].display_name
    else:
        gpu_type_id, gpu_type_name = GpuType.objects.values_list("id", "display_name").get(slug=clean.gpu_type)
    with transaction.atomic(savepoint=not all_or_nothing):
        workload = _store(
            team=team, owner=owner, clean=clean, shared=shared, gpu_type=(gpu_type_id, gpu_type_name),
            with_queue_position=with_queue_position,
        )  # fmt: skip
        if not queue_slot_later:
            queue_slot_take(team=team, owner=owner, stored=workload)  # locked until commit: the caps are hard
        if admit_in_line:
            transaction.on_commit(lambda: admit_now(team_id=team.id, gpu_type_id=gpu_type_id))
        else:
            request_admission(team_id=team.id, gpu_type_id=gpu_type_id)  # sent on commit
    if not transaction.get_connection().in_atomic_block:
        workload.refresh_from_db()  # admission has run: say whether it was admitted or queued
    return workload


def submission_refusals(*, team: Team, spec: Mapping[str, Any], facts: Facts) -> dict[str, list[str]]:
    """What submitting `spec` now would be refused for, field by field ({} when it would be accepted),
    judged by the very rules `workload_submit` applies; stores nothing. The launch page's outlook asks
    this before Launch is pressed, so it never promises what the submission then refuses. (The queue
    caps are counted under locks at the submission itself and are not part of this answer.)"""
    try:
        _judged(team=team, spec=spec, facts=facts)
    except SubmissionInvalid as invalid:
        return invalid.errors
    return {}


def _judged(*, team: Team, spec: Mapping[str, Any], facts: Facts) -> tuple[Any, bool]:
    """One submission judged against the team's facts: (the validated fields, shared with the team).
    Raises SubmissionInvalid naming every field that breaks a rule; reads nothing unless it names secrets."""
    spec = dict(spec)
    shared = spec.pop("shared_with_team", False)
    if not isinstance(shared, bool):
        raise SubmissionInvalid({"shared_with_team": ["Must be true or false."]})
    clean = validate_submission(spec, facts)
    unusable = secrets_unusable(team=team, k8s_names=[k8s_name for _, k8s_name, _ in clean.secrets])
    if unusable:
        raise SubmissionInvalid(
            {
                "secrets": [
                    f"The secret {name} could not be stored ({why}); store it again." for name, why in unusable.items()
                ]
            }
        )
    if shared and clean.kind != "service":
        raise SubmissionInvalid(
            {"shared_with_team": ["Only a service can be shared: a batch job has nothing to open."]}
        )
    return clean, shared


def _fields(*, team: Team, owner, clean, shared: bool, gpu_type_id: int, home: list[dict[str, Any]]) -> dict[str, Any]:
    """A judged submission's row, QUEUED. `home`: the owner's workspace mounts in the team."""
    return {
        "team": team,
        "owner": owner,
        "name": clean.name,
        "kind": clean.kind,
        "image": clean.image,
        "catalog_image_id": clean.catalog_image_id,
        "gpu_type_id": gpu_type_id,
        "gpu_count": clean.gpu_count * clean.nodes,  # what the gang holds in all
        "nodes": clean.nodes,
        "topology": clean.topology,
        "command": list(clean.command),
        "args": list(clean.args),
        "env": [{"name": n, "value": v} for n, v in clean.env],
        "port": clean.port,
        "secrets": [{"name": n, "k8s_name": k, "env": e} for n, k, e in clean.secrets],
        "cpu_millicores": clean.cpu_millicores,
        "memory_mib": clean.memory_mib,
        "mounts": home + dataset_mounts(clean.datasets),
        "shared_with_team": shared,
        "time_limit_seconds": clean.time_limit_seconds,
        "priority": clean.priority,
        "restartable": clean.restartable,
        "retry_limit": clean.retry_limit,
        "retryable_exit_codes": list(clean.retryable_exit_codes),
        "checkpoint_workspace": clean.checkpoint_workspace,
        "namespace": team.namespace,
        "reason": "Queued",
        "message": "Waiting for the team's GPU quota.",
    }


def gpu_shape(workload: Workload, gpu_type_name: str) -> str:
    """'4 x P100', or for a gang job '2 nodes x 4 P100 = 8 GPUs'."""
    if workload.nodes > 1:
        return f"{workload.nodes} nodes × {workload.gpus_per_node} {gpu_type_name} = {workload.gpu_count} GPUs"
    return f"{workload.gpu_count} × {gpu_type_name}"


def _first_event(workload: Workload, *, owner, gpu_type_name: str) -> WorkloadEvent:
    return WorkloadEvent(
        workload=workload,
        at=workload.created_at,
        to_state=workload.state,
        reason="Submitted",
        message=f"Submitted by {owner.get_username()}: {gpu_shape(workload, gpu_type_name)}.",
    )


def _store(
    *, team: Team, owner, clean, shared: bool, gpu_type: tuple[int, str], with_queue_position: bool = False
) -> Workload:
    """Insert one judged submission QUEUED with its first timeline entry: one statement on PostgreSQL
    (the entry inserted from the workload's insert, `_FIRST_EVENT_SQL`), two elsewhere. `with_queue_position`
    (PostgreSQL): the same statement reads its queue position, kept as `queue_position_at_store`."""
    home = workspace_mounts(team=team, owner=owner)
    fields = _fields(team=team, owner=owner, clean=clean, shared=shared, gpu_type_id=gpu_type[0], home=home)
    if connection.vendor != "postgresql":
        workload = create_with_fresh_uid(**fields)
        jobs_sql.insert(_first_event(workload, owner=owner, gpu_type_name=gpu_type[1]))
        return workload
    workload = Workload(uid=workloads_model.new_uid(), **fields)
    first = _first_event(workload, owner=owner, gpu_type_name=gpu_type[1])
    params = [first.at, first.source, first.from_state, first.to_state, first.reason, first.message]
    for _ in range(UID_ATTEMPTS):
        also, also_params = stored_position_sql(workload) if with_queue_position else ("", [])
        stored = jobs_sql.insert_then(
            workload, _first_event_sql(), params, unless_taken=("uid",), also=also, also_params=also_params
        )
        if stored is not None:
            if with_queue_position:
                workload.queue_position_at_store = stored[0]
            return workload
        log.warning("workload uid %s was taken; drawing another", workload.uid)
        workload.uid = workloads_model.new_uid()
    raise RuntimeError(f"no free workload uid in {UID_ATTEMPTS} draws")


# A new workload's first timeline entry, from the workload's insert (`jobs.sql.insert_then`): nothing when
# its uid was taken and it was not stored.
_FIRST_EVENT_SQL = (
    "INSERT INTO {event} (workload_id, at, source, from_state, to_state, reason, message)"
    " SELECT stored.{pk}, %s, %s, %s, %s, %s, %s FROM stored"
)


@functools.cache
def _first_event_sql() -> str:
    quote = connection.ops.quote_name
    return _FIRST_EVENT_SQL.format(event=quote(WorkloadEvent._meta.db_table), pk=quote(Workload._meta.pk.column))


def _store_many(
    *, team: Team, owner, judged: list[tuple[Any, bool]], snapshot: intake_facts.Snapshot
) -> list[Workload]:
    """Insert several judged submissions QUEUED, in order, with their first timeline entries: one
    statement for the rows and one for the entries (a taken uid, vanishingly rare, is drawn again alone)."""
    home = workspace_mounts(team=team, owner=owner)
    site = snapshot.site
    workloads = [
        Workload(
            uid=workloads_model.new_uid(),
            **_fields(
                team=team,
                owner=owner,
                clean=clean,
                shared=shared,
                gpu_type_id=site.gpu_type_ids[clean.gpu_type],
                home=home,
            ),
        )
        for clean, shared in judged
    ]
    jobs_sql.insert_many(workloads, unless_taken=("uid",))
    for workload in workloads:
        if workload.pk is None:
            workload.uid = workloads_model.new_uid()
            _store_under_fresh_uid(workload)
    names = {site.gpu_type_ids[slug]: gpu_type.display_name for slug, gpu_type in site.gpu_types.items()}
    jobs_sql.insert_many([_first_event(w, owner=owner, gpu_type_name=names[w.gpu_type_id]) for w in workloads])
    return workloads


def workloads_submit_many(
    *,
    team: Team,
    owner,
    specs: Sequence[Mapping[str, Any]],
    snapshot: intake_facts.Snapshot,
    queue_slot_later: bool = False,
) -> list[Workload]:
    """Validate and store several submissions of one person in one team, all or none, QUEUED, and ask
    for one admission pass per GPU type they use (a worker's, coalesced: the caller answers at once).

    For a team's script that submits a sweep: one request, the team's facts read once, every workload
    judged as `workload_submit` judges one, the queue caps checked for all of them together. Runs in the
    caller's transaction (the REST create, which rolls all of it back on any error). Raises
    SubmissionInvalid with each field named `workloads[i].field`, after judging them all, and stores
    nothing when any of them breaks a rule. The queue caps are counted for all of them last (their locks
    held until the caller commits), unless `queue_slot_later`: as for `workload_submit`.
    """
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("workloads_submit_many runs inside the caller's transaction")
    if snapshot.role is None:
        raise SubmissionInvalid({"team": ["You are not a member of this team."]})
    if not specs:
        raise SubmissionInvalid({"workloads": ["Give at least one workload."]})
    if len(specs) > spec_rules.SWEEP_AT_MOST:
        raise SubmissionInvalid(
            {"workloads": [f"At most {spec_rules.SWEEP_AT_MOST} workloads in one request; send the rest in another."]}
        )
    facts = facts_from(snapshot, team=team, user=owner)
    judged, errors = [], {}
    for index, spec in enumerate(specs):
        try:
            judged.append(_judged(team=team, spec=spec, facts=facts))
        except SubmissionInvalid as invalid:
            errors.update({f"workloads[{index}].{field}": messages for field, messages in invalid.errors.items()})
    if errors:
        raise SubmissionInvalid(errors)
    stored = _store_many(team=team, owner=owner, judged=judged, snapshot=snapshot)
    for gpu_type_id in sorted({w.gpu_type_id for w in stored}):
        request_admission(team_id=team.id, gpu_type_id=gpu_type_id)  # sent on commit
    if not queue_slot_later:
        queue_slot_take(team=team, owner=owner, stored=stored)
    return stored


def queue_slots_later(*, team: Team, owner) -> tuple[list[Workload], Callable[..., None]]:
    """For a caller that stores with `queue_slot_later` and writes rows of its own after the workloads
    (the REST create's idempotency record): the list to keep what it stored in, and the call that takes
    their queue slots, to run last before its commit; the caller's last write may go with the locks in
    their statement (`take(alongside)`, queue_caps.Alongside). The one way a slot is taken late."""
    stored: list[Workload] = []

    def take(alongside: Alongside | None = None) -> None:
        queue_slot_take(team=team, owner=owner, stored=stored, alongside=alongside)

    return stored, take


def copies_of(spec: Mapping[str, Any], copies: int, *, base_name: str) -> list[dict[str, Any]]:
    """Pure: `copies` submissions of one spec (a sweep from the launch page), told apart as the CLI's
    --array tells them (spec_rules.sweep_member): $GPUPORTAL_ARRAY_INDEX from 0 to copies-1,
    $GPUPORTAL_ARRAY_SIZE the count, and named BASE-0 .. BASE-(copies-1).

    A name the submitter gave (spec["name"]) that leaves no room for the suffixes is refused, as the CLI
    and the launch form refuse it; a made-up `base_name` (the image's) is cut short instead."""
    given = spec.get("name") or ""
    if given:
        problem = spec_rules.sweep_name_problem(given, copies)
        if problem:
            raise SubmissionInvalid({"name": [problem]})
        base = given
    else:
        base = spec_rules.sweep_base(base_name, copies)
    return [spec_rules.sweep_member(dict(spec), index, copies, base=base) for index in range(copies)]


UID_ATTEMPTS = 5


def create_with_fresh_uid(**fields: Any) -> Workload:
    """Store a workload under a new random uid, drawing again if that uid is taken (a collision is
    vanishingly rare with 64 bits, and must never fail a submission with a server error). One statement
    per draw: a taken uid stores nothing and returns no id (ON CONFLICT DO NOTHING), so neither an error
    nor a savepoint is needed."""
    return _store_under_fresh_uid(Workload(uid=workloads_model.new_uid(), **fields))


def _store_under_fresh_uid(workload: Workload) -> Workload:
    for _ in range(UID_ATTEMPTS):
        if jobs_sql.insert(workload, unless_taken=("uid",)):
            return workload
        log.warning("workload uid %s was taken; drawing another", workload.uid)
        workload.uid = workloads_model.new_uid()
    raise RuntimeError(f"no free workload uid in {UID_ATTEMPTS} draws")


def admit_now(*, team_id: int, gpu_type_id: int) -> None:
    """Admission right after a submission commits, saving a round trip through the broker.

    Only one submission of a team and GPU type admits in line at a time: when another one is admitting
    already, waiting for the quota's lock behind it would make every concurrent submission pay for the
    others' passes (the intake's bottleneck under load), so the pass goes to a worker instead, where one
    pass admits everything queued. It never fails the submission: if admission cannot run now (database
    busy, anything), the workload is stored QUEUED and a worker or the periodic sweep admits it.
    """
    from jobs.services.queue.admission import quota_admit

    try:
        with admitting_alone(team_id, gpu_type_id) as alone:
            if alone:
                quota_admit(team_id=team_id, gpu_type_id=gpu_type_id)
            else:
                request_admission(team_id=team_id, gpu_type_id=gpu_type_id)
    except Exception:
        log.warning("admission after submit failed; handing it to a worker", exc_info=True)
        enqueue_admission(team_id=team_id, gpu_type_id=gpu_type_id)


ADMIT_LOCK_SPACE = 0x61646D  # "adm": the first key of this lock, so it cannot meet another advisory lock


@contextmanager
def admitting_alone(team_id: int, gpu_type_id: int) -> Iterator[bool]:
    """Whether no other submission of this team and GPU type is admitting now (a PostgreSQL advisory
    lock, taken without waiting and held until the block ends); always True on other databases."""
    from django.db import connection

    if connection.vendor != "postgresql":
        yield True
        return
    key = team_id * 100_003 + gpu_type_id  # int4 range for the ids this portal will ever have
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [ADMIT_LOCK_SPACE, key % 2_147_483_647])
        got = cursor.fetchone()[0]
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [ADMIT_LOCK_SPACE, key % 2_147_483_647])
