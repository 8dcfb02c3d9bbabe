"""Creating a workload's Kubernetes objects (the Job, or the Deployment and Service) in its team namespace.

The namespace itself is the provisioner's (jobs/services/provisioning.py): when it is missing or not yet
bound for the engine, the create is refused (403/404), provisioning is requested and the task retries.

Idempotent end to end: names are deterministic, a 409 adopts the existing object when it carries the
same workload uid, and a workload cancelled while we were creating gets its objects deleted again.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone
from kubernetes.client.exceptions import ApiException

from jobs.kube import client as kube
from jobs.kube import gang_objects, names, objects
from jobs.models import AllowedRegistry, Kind, SecretState, State, Team, TeamSecret, Workload, WorkloadEvent
from jobs.services import opening, provisioning, ssh_access
from jobs.services.checkpoints import contract, tokens
from jobs.services.cluster import node_health
from jobs.services.storage import workspaces
from jobs.services.transitions import note, transition
from jobs.services.validation import parse_image_reference
from portal import sealing

log = logging.getLogger(__name__)

CREATES_IN_FLIGHT = 8  # API calls a worker process makes at once for its batches (the raw client's 8 threads)


class SubmitRejected(Exception):
    """Kubernetes refused the objects for a reason retrying will not fix."""

    reason = "SubmitRejected"


class SecretUnavailable(SubmitRejected):
    """A secret the workload names was deleted, or the engine could not write it: it must not run without."""

    reason = "SecretUnavailable"


class NotTheOwners(SubmitRejected):
    """A workload names a personal secret or a home workspace that belongs to someone else."""

    reason = "NotTheOwners"


class SecretPending(Exception):
    """A secret the workload names is not written yet (just stored or replaced): the submit task retries."""


SECRET_WAIT_INLINE_SECONDS = 3.0


def _own_env(workload: Workload) -> tuple[tuple[str, str], ...]:
    """The environment the submitter set (never a name the portal's contract sets)."""
    return tuple((e["name"], e["value"]) for e in workload.env or () if e["name"] not in contract.CONTRACT_NAMES)


def _secret_refs(workload: Workload) -> tuple[objects.SecretRef, ...]:
    return tuple(objects.SecretRef(s["name"], s["k8s_name"], s.get("env", "")) for s in workload.secrets or ())


def spec_for(
    workload: Workload, *, pull_secrets: dict[str, str] | None = None, avoid_nodes: tuple[str, ...] | None = None
) -> objects.WorkloadSpec:
    """The workload as the renderer takes it. `pull_secrets` (registry host -> pull Secret name): read
    once for a batch instead of once per workload."""
    gpu_type = workload.gpu_type
    return objects.WorkloadSpec(
        uid=workload.uid,
        name=workload.name,
        kind=workload.kind,
        team_slug=workload.team.slug,
        username=workload.owner.get_username(),
        namespace=workload.namespace or workload.team.namespace,
        image=workload.image,
        gpu_type=objects.GpuTypeSpec(
            slug=gpu_type.slug,
            node_label_key=gpu_type.node_label_key,
            node_label_value=gpu_type.node_label_value,
            resource_name=gpu_type.resource_name,
            cpu_per_gpu_millicores=gpu_type.cpu_per_gpu_millicores,
            memory_per_gpu_mib=gpu_type.memory_per_gpu_mib,
            ephemeral_storage_request_mib=gpu_type.ephemeral_storage_request_mib,
            ephemeral_storage_limit_mib=gpu_type.ephemeral_storage_limit_mib,
        ),
        gpu_count=workload.gpus_per_node,
        time_limit_seconds=workload.time_limit_seconds,
        command=tuple(workload.command or ()),
        args=tuple(workload.args or ()) + base_url_args(workload),
        env=_own_env(workload) + base_url_env(workload) + checkpoint_env(workload),
        port=workload.port,
        volumes=workspaces.volume_specs(workload.mounts or []),
        image_pull_secrets=image_pull_secrets(workload.image, pull_secrets),
        cpu_millicores=workload.cpu_millicores,
        memory_mib=workload.memory_mib,
        secrets=_secret_refs(workload),
        instance=settings.PORTAL_INSTANCE,
        attempt=workload.attempt,
        termination_grace_seconds=settings.PORTAL_PREEMPT_GRACE_SECONDS,
        # Read at every render: an approval withdrawn later makes the next attempt run as non-root.
        run_as_root=workload.catalog_image is not None and workload.catalog_image.runs_as_root,
        read_only_root=workload.catalog_image is not None and workload.catalog_image.read_only_root,
        token_secret=tokens.secret_name(workload.uid) if workload.kind == Kind.BATCH else "",
        avoid_nodes=node_health.nodes_to_avoid() if avoid_nodes is None else avoid_nodes,
        gang=gang_spec(workload),
    )


def gang_spec(workload: Workload) -> objects.GangSpec | None:
    """A gang job's shape and rendezvous as the renderer takes them (None for one node)."""
    if workload.nodes <= 1:
        return None
    key = settings.GANG_TOPOLOGY_LABEL if workload.topology else ""
    return objects.GangSpec(
        nodes=workload.nodes,
        master_port=settings.GANG_MASTER_PORT,
        cluster_dns=settings.CLUSTER_DNS,
        wait_seconds=settings.GANG_START_WINDOW_SECONDS,
        topology_key=key,
        topology_required=bool(key) and workload.topology == "required",
    )


def checkpoint_env(workload: Workload) -> tuple[tuple[str, str], ...]:
    """The checkpoint contract's variables (jobs/services/checkpoints/contract.py); batch jobs only."""
    if workload.kind != Kind.BATCH:
        return ()
    return contract.contract_env(
        checkpoint_dir=contract.checkpoint_dir(
            workspace=workload.checkpoint_workspace, mounts=workload.mounts or [], name=workload.name, uid=workload.uid
        ),
        attempt=workload.attempt,
        grace_seconds=settings.PORTAL_PREEMPT_GRACE_SECONDS,
        api_url=settings.PORTAL_POD_API_URL,
        with_token=True,
    )


def rendered_objects(spec: objects.WorkloadSpec) -> list[dict]:
    """The objects to create, in order: a batch job's token Secret before its Job (the pod mounts it)."""
    made = gang_objects.render(spec)
    if spec.token_secret:
        made.insert(0, objects.make_token_secret(spec, tokens.workload_token(spec.uid)))
    return made


HOME_TEMPLATE = "{home}"


def _fill(template: str, base_url: str, home: str = "") -> str:
    # str.replace, not str.format: a template may hold other braces (JSON, shell) that are not ours.
    filled = template.replace("{base_url}", base_url).replace("{base_path}", base_url.rstrip("/"))
    return filled.replace(HOME_TEMPLATE, home)


def _home_workspace(workload: Workload) -> str:
    """Where the owner's home workspace is mounted ("" when workspaces are off)."""
    return next((m["mount_path"] for m in workload.mounts or () if m.get("kind") == "home"), "")


def _fillable(template: str, home: str) -> bool:
    # A template naming the home workspace is left out where there is none: JupyterLab's root_dir then
    # stays its default (where the container starts) instead of a folder that does not exist.
    return bool(home) or HOME_TEMPLATE not in template


def base_url_args(workload: Workload) -> tuple[str, ...]:
    """The catalog image's arguments that tell its app the path the portal serves it under, and (`{home}`)
    the owner's home workspace, e.g. JupyterLab's root_dir, so that Open lands where their files last."""
    base_url = opening.open_path(workload)
    if not base_url or workload.catalog_image is None:
        return ()
    home = _home_workspace(workload)
    templates = (str(a) for a in workload.catalog_image.base_url_args or [])
    return tuple(_fill(a, base_url, home) for a in templates if _fillable(a, home))


def base_url_env(workload: Workload) -> tuple[tuple[str, str], ...]:
    """GPUPORTAL_BASE_URL for every service, and the catalog image's own variables for its base path."""
    base_url = opening.open_path(workload)
    if not base_url:
        return ()
    own = {name for name, _ in ((e["name"], e["value"]) for e in workload.env or ())}
    catalog = workload.catalog_image.base_url_env if workload.catalog_image is not None else {}
    home = _home_workspace(workload)
    extra = [
        ("GPUPORTAL_BASE_URL", base_url),
        *((k, _fill(str(v), base_url, home)) for k, v in (catalog or {}).items() if _fillable(str(v), home)),
    ]
    return tuple((name, value) for name, value in extra if name not in own)  # the researcher's own value wins


def pull_secrets_ensure(namespace: str, needed: tuple[str, ...] = ()) -> None:
    """Every private registry's image pull Secret exists (and is current) in the namespace.

    The passwords are sealed to this engine's key (admin sealed them): opened here, in the worker, and
    nowhere else. One this engine cannot open fails the workload that `needed` it, saying so; the others
    are skipped with an error in the log."""
    core = kube.core()
    for registry in AllowedRegistry.objects.exclude(pull_username="").exclude(pull_password_sealed=""):
        try:
            password = sealing.unseal(registry.pull_password_sealed)
        except sealing.SealError as exc:
            log.error("registry %s: cannot open its pull password: %s", registry.host, exc)
            if registry.pull_secret_name in needed:
                raise SubmitRejected(
                    f"The pull credentials of {registry.host} cannot be opened by the portal's engine ({exc}); "
                    "an admin must enter the password again."
                ) from exc
            continue
        secret = objects.make_pull_secret(namespace=namespace, name=registry.pull_secret_name, registry=registry.host,
                                          username=registry.pull_username, password=password)  # fmt: skip
        try:
            core.create_namespaced_secret(namespace, secret, _request_timeout=kube.timeout())
        except ApiException as exc:
            if exc.status != 409:
                raise  # the exception's text is the API server's Status, never our request body
            core.replace_namespaced_secret(secret.metadata.name, namespace, secret, _request_timeout=kube.timeout())


def image_pull_secrets(image: str, pull_secrets: dict[str, str] | None = None) -> tuple[str, ...]:
    """The pull Secret a workload's image needs: its registry's, when that registry has credentials."""
    reference = parse_image_reference(image)
    if reference is None:
        return ()
    if pull_secrets is not None:
        name = pull_secrets.get(reference.registry, "")
        return (name,) if name else ()
    registry = AllowedRegistry.objects.filter(host=reference.registry).first()
    return (registry.pull_secret_name,) if registry is not None and registry.pull_secret_name else ()


def registry_pull_secrets() -> dict[str, str]:
    """Every allowed registry's pull Secret name by host (one query), for rendering a batch."""
    return {
        registry.host: registry.pull_secret_name
        for registry in AllowedRegistry.objects.all()
        if registry.pull_secret_name
    }


@dataclass(frozen=True)
class SiteFacts:
    """What a batch's render reads from the site: the same for every workload, and it changes rarely."""

    pull_secrets: dict[str, str]  # registry host -> pull Secret name (registry_pull_secrets); never changed
    avoid_nodes: tuple[str, ...]  # nodes with an open GPU health mark (node_health.nodes_to_avoid)


_site_facts: tuple[str, SiteFacts] | None = None


def site_facts(version: str | None) -> SiteFacts:
    """The site facts a render needs, read again only when their version moved (migration 0034's trigger on
    the registries and health marks, among other tables: any write there, raw SQL included). `version`: as
    read by the batch's load, in the same statement; None where the database keeps none (read every time).
    The facts are read after the version, so a copy is never older than the version it is kept under."""
    global _site_facts
    cached = _site_facts
    if version is not None and cached is not None and cached[0] == version:
        return cached[1]
    facts = SiteFacts(pull_secrets=registry_pull_secrets(), avoid_nodes=node_health.nodes_to_avoid())
    if version is not None:
        _site_facts = (version, facts)
    return facts


def _still_pending(workload: Workload, ref: objects.SecretRef, row: TeamSecret | None) -> bool:
    """Whether the secret `ref` is still being written; raises when the workload cannot have it."""
    if row is None or row.state == SecretState.DELETING:
        raise SecretUnavailable(f"The secret {ref.name} was deleted after this was submitted; store it again.")
    if not row.shared and row.owner_id != workload.owner_id:
        raise NotTheOwners(f"The secret {ref.name} belongs to someone else; store your own.")
    if row.state == SecretState.FAILED:
        raise SecretUnavailable(f"The secret {ref.name} could not be written: {row.message}")
    if row.state != SecretState.PENDING:
        return False
    waited = (timezone.now() - row.updated_at).total_seconds()
    if waited > settings.PORTAL_SECRET_WRITE_TIMEOUT:
        raise SecretUnavailable(
            f"The secret {ref.name} was not confirmed written within {settings.PORTAL_SECRET_WRITE_TIMEOUT} s; "
            "store it again."
        )
    return True


def secrets_written(workload: Workload, refs: tuple[objects.SecretRef, ...]) -> None:
    """Every secret the workload names holds its latest value in Kubernetes: wait briefly for ones the
    engine is still writing (raising SecretPending after that, so the task retries); SecretUnavailable
    for one deleted, refused, or never confirmed within PORTAL_SECRET_WRITE_TIMEOUT. A pod never starts
    with an older value of a secret its owner just replaced, nor without one."""
    if not refs:
        return
    deadline = time.monotonic() + SECRET_WAIT_INLINE_SECONDS
    while True:
        rows = {
            row.k8s_name: row
            for row in TeamSecret.objects.filter(team_id=workload.team_id, k8s_name__in=[r.k8s_name for r in refs])
        }
        pending = [ref.name for ref in refs if _still_pending(workload, ref, rows.get(ref.k8s_name))]
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise SecretPending(f"Waiting for the engine to write the secret {', '.join(pending)}.")
        time.sleep(0.1)


def _create_or_adopt(obj: dict, spec: objects.WorkloadSpec, team: Team) -> None:
    kind = obj["kind"]
    name = obj["metadata"]["name"]
    namespace = spec.namespace
    try:
        # The rendered dict as the body, the answer not decoded: see kube.create.
        kube.create(namespace, obj)
        return
    except ApiException as exc:
        if exc.status == 409 and kind == "Secret":
            return  # the workload's token Secret, named by its uid and the same value every time: adopt it
        if exc.status == 409:
            existing = _read(kind, name, namespace)
            owner = (existing.metadata.labels or {}).get(names.LABEL_WORKLOAD)
            if owner == spec.uid:
                log.info("workload %s: adopting existing %s %s", spec.uid, kind, name)
                return
            raise SubmitRejected(f"a {kind} named {name} already exists and is not this workload's") from exc
        if exc.status in (403, 404):
            # The namespace is not there or not bound for us yet: ask the provisioner, then retry.
            provisioning.namespace_not_ready(team)
            raise
        failure = kube.classify(exc)
        # 403 is retried too: RBAC in a namespace we just set up (or an API server that just restarted)
        # can deny for a moment until its caches catch up. The workload's message says we are retrying.
        if failure.transient or exc.status == 403:
            raise
        log.warning("workload %s: Kubernetes refused the %s: %s", spec.uid, kind, failure.message)
        raise SubmitRejected(
            f"The cluster refused its {kind} (HTTP {exc.status}); an admin can see why in the worker's log."
        ) from exc


def _read(kind: str, name: str, namespace: str):
    if kind == "Job":
        return kube.batch().read_namespaced_job(name, namespace, _request_timeout=kube.timeout())
    if kind == "Deployment":
        return kube.apps().read_namespaced_deployment(name, namespace, _request_timeout=kube.timeout())
    return kube.core().read_namespaced_service(name, namespace, _request_timeout=kube.timeout())


def workload_create_objects(workload_id: int) -> None:
    """Create one admitted workload's objects (a batch of one; see `workloads_create_objects`).

    A retry may find the tracker ahead of it: some objects were made (their pod seen) before a later
    create was refused (RBAC still learning of the namespace's new binding). It finishes the set and
    records the names then; creates adopt what exists. Transient API failures propagate (the task retries).
    """
    workloads_create_objects([workload_id])


# --- many at once: an admission pass's batch ------------------------------------------------------
class BatchProfile:
    """Where one batch's time went: wall-clock and this thread's CPU seconds per phase, and its SQL queries.
    The worker logs it once per batch (INFO), so a drain can be profiled from the worker's log alone."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.queries = 0

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.wall[name] = self.wall.get(name, 0.0) + time.perf_counter() - wall
            self.cpu[name] = self.cpu.get(name, 0.0) + time.thread_time() - cpu

    def count_query(self, execute, sql, params, many, context):
        self.queries += 1
        return execute(sql, params, many, context)

    def line(self, *, batch: int, moved: int) -> str:
        phases = " ".join(f"{name} {self.wall[name]:.3f}/{self.cpu[name]:.3f}" for name in self.wall)
        return f"submit batch: {moved} of {batch} created; {self.queries} SQL queries; s wall/cpu: {phases}"


def workloads_create_objects(
    workload_ids: list, *, by: str = "id", unknown: Callable[[list], None] | None = None
) -> int:
    """Create the objects of a batch of admitted workloads, in the given order; returns how many moved to
    PENDING. The same guarantees as one at a time (deterministic names, 409 adopts, a workload cancelled
    or preempted meanwhile loses its objects again), with the per-workload cost cut to the API calls:
    one query loads the batch, namespaces, workspaces and pull Secrets are checked once per batch, and
    the successes move to PENDING in one transaction. A transient API failure stops the batch after the
    successes so far are recorded and propagates (the task retries what is still SUBMITTING).

    `by`: what the batch names its workloads by, their row "id" or their "uid" (a task's message); those
    this database does not hold go to `unknown`, in the given order."""
    profile = BatchProfile()
    with connection.execute_wrapper(profile.count_query):
        batch, moved = _create_batch(workload_ids, profile, by=by, unknown=unknown)
    if batch:
        log.info(profile.line(batch=batch, moved=moved))
    return moved


# A batch's rows with their team, GPU type, owner and catalog image, in one statement (PostgreSQL): was a
# read of the ids by uid and four of the ORM's prefetch queries, one round trip each per batch (and an
# admission pass of one workload makes a batch of one). Its plan is kept (prepared statements, generic plan),
# so the join is planned once per connection, not per batch as when the ORM sent it as new text. Table and
# column names from the models; every value is a parameter.
_BATCH_SQL = """
SELECT {workload}, {team}, {gpu_type}, {owner}, {image}, {site_version} FROM {workload_table} w
JOIN {team_table} t ON t.{pk} = w.{team_id} JOIN {gpu_type_table} g ON g.{pk} = w.{gpu_type_id}
JOIN {owner_table} o ON o.{pk} = w.{owner_id} LEFT JOIN {image_table} c ON c.{pk} = w.{image_id}
WHERE w.{key} = ANY(%s)
"""


@functools.cache
def _batch_sql(key: str) -> str:
    from jobs import sql as jobs_sql
    from jobs.models import CatalogImage, GpuType

    quote, field = connection.ops.quote_name, Workload._meta.get_field
    return _BATCH_SQL.format(
        workload=jobs_sql.select_list(Workload, "w"), team=jobs_sql.select_list(Team, "t"),
        gpu_type=jobs_sql.select_list(GpuType, "g"), owner=jobs_sql.select_list(get_user_model(), "o"),
        image=jobs_sql.select_list(CatalogImage, "c"), workload_table=quote(Workload._meta.db_table),
        team_table=quote(Team._meta.db_table), gpu_type_table=quote(GpuType._meta.db_table),
        owner_table=quote(get_user_model()._meta.db_table), image_table=quote(CatalogImage._meta.db_table),
        pk=quote("id"), team_id=quote(field("team").column), gpu_type_id=quote(field("gpu_type").column),
        owner_id=quote(field("owner").column), image_id=quote(field("catalog_image").column),
        key=quote(field(key).column), site_version=jobs_sql.site_facts_version(),
    )  # fmt: skip


def _load_batch(keys: list, by: str) -> tuple[list[Workload], str | None]:
    """The workloads named, with their team, GPU type, owner and catalog image (no order), and the site
    facts' version as the same statement read it (None: not known, read the facts)."""
    if connection.vendor != "postgresql":
        # The related rows in queries of their own (prefetch), as on PostgreSQL before the fixed SQL above.
        loaded = Workload.objects.prefetch_related("team", "gpu_type", "owner", "catalog_image")
        return list(loaded.filter(**{f"{by}__in": keys}).order_by()), None
    from jobs import sql as jobs_sql
    from jobs.models import CatalogImage, GpuType

    models = (Workload, Team, GpuType, get_user_model(), CatalogImage)
    with connection.cursor() as cursor:
        cursor.execute(_batch_sql(by), [list(keys)])
        rows = cursor.fetchall()
    loaded = []
    version = rows[0][-1] if rows else None
    for row in rows:
        parts, start = [], 0
        for model in models:
            parts.append(row[start : start + jobs_sql.width(model)])
            start += jobs_sql.width(model)
        workload = jobs_sql.instance(Workload, parts[0])
        Workload.team.field.set_cached_value(workload, jobs_sql.instance(Team, parts[1]))
        Workload.gpu_type.field.set_cached_value(workload, jobs_sql.instance(GpuType, parts[2]))
        Workload.owner.field.set_cached_value(workload, jobs_sql.instance(get_user_model(), parts[3]))
        image = None if workload.catalog_image_id is None else jobs_sql.instance(CatalogImage, parts[4])
        Workload.catalog_image.field.set_cached_value(workload, image)
        loaded.append(workload)
    return loaded, version


def _to_create(
    keys: list, *, by: str = "id", unknown: Callable[[list], None] | None = None
) -> tuple[list[Workload], str | None]:
    """The batch's workloads still to be created, in the given order: submitting, or moved on without
    objects' names recorded; and the site facts' version read with them."""
    loaded, version = _load_batch(keys, by)
    by_key = {getattr(w, by): w for w in loaded}
    named = list(dict.fromkeys(keys))
    missing = [key for key in named if key not in by_key]
    if missing and unknown is not None:
        unknown(missing)
    return [by_key[key] for key in named if key in by_key and _still_to_create(by_key[key])], version


def _still_to_create(workload: Workload) -> bool:
    return workload.state == State.SUBMITTING or (
        workload.state in (State.PENDING, State.RUNNING) and not workload.k8s_name
    )


def _create_in_order(
    batch: list[Workload],
    specs: dict[int, objects.WorkloadSpec],
    rendered: dict[int, list[dict]],
    heartbeat: _Heartbeat,
    created: list[Workload],
) -> None:
    """Create the objects of the batch's ready workloads, adding each created one to `created`; one refused
    fails at once; the first transient failure is raised once the rest have been tried."""
    ready, stopped = _ready_to_create(batch, specs, heartbeat)
    outcomes = _create_all(ready, specs, rendered, heartbeat)
    for workload in ready:
        outcome = outcomes[workload.id]
        if outcome is None:
            created.append(workload)
        elif isinstance(outcome, SubmitRejected):
            transition(workload, State.FAILED, reason=outcome.reason, message=str(outcome), finished_at=None)
            workload_delete_objects(workload)
        elif stopped is None:
            stopped = outcome  # a transient failure: the task retries what is still SUBMITTING
    if stopped is not None:
        raise stopped


def _cluster_wait_message(exc: ApiException) -> str:
    if exc.status in (403, 404):  # the namespace's set-up (RBAC, the namespace itself) is not done yet
        return f"{kube.PREPARING_TEAM_SPACE}; it starts as soon as that is ready."
    return f"Waiting for the cluster ({kube.user_words(exc).lower()}); retrying."


def _say_waiting(batch: list[Workload], created: list[Workload], message: str) -> None:
    """Tell the batch's workloads not created (still submitting) why they wait for the retry."""
    done = {w.id for w in created}
    Workload.objects.filter(id__in=[w.id for w in batch if w.id not in done], state=State.SUBMITTING).update(
        message=message[:2000]
    )


def _create_batch(
    workload_ids: list, profile: BatchProfile, *, by: str = "id", unknown: Callable[[list], None] | None = None
) -> tuple[int, int]:
    with profile.phase("load"):
        batch, site_version = _to_create(workload_ids, by=by, unknown=unknown)
        if not batch:
            return 0, 0
        # Being created now: the sweep leaves workloads touched within PORTAL_STUCK_SUBMIT_SECONDS alone.
        heartbeat = _Heartbeat([w.id for w in batch], marked_at=min(w.updated_at for w in batch))
    with profile.phase("render"):
        site = site_facts(site_version)
        specs = {w.id: spec_for(w, pull_secrets=site.pull_secrets, avoid_nodes=site.avoid_nodes) for w in batch}
        rendered = {w.id: rendered_objects(specs[w.id]) for w in batch}
    created: list[Workload] = []
    failure: BaseException | None = None
    try:
        with profile.phase("prepare"):
            _prepare_namespaces(batch, specs)
        with profile.phase("create"):
            _create_in_order(batch, specs, rendered, heartbeat, created)
    except ApiException as exc:
        failure = exc
        log.warning("submit batch: Kubernetes answered %s: %s; retrying", exc.status, kube.classify(exc).message)
        _say_waiting(batch, created, _cluster_wait_message(exc))
    except SecretPending as exc:  # a secret not written yet: the task retries the rest
        failure = exc
        _say_waiting(batch, created, str(exc))
    except Exception as exc:  # unreachable API server and the like: record what was made, then retry
        failure = exc
    with profile.phase("record"):
        moved = _mark_created(created, specs)
    if failure is not None:
        raise failure
    return len(batch), moved


def _ready_to_create(
    batch: list[Workload], specs: dict[int, objects.WorkloadSpec], heartbeat: _Heartbeat
) -> tuple[list[Workload], BaseException | None]:
    """What each workload needs before its objects, in batch order (secrets written, pull Secrets there):
    the workloads ready, and the failure that stopped the checks, if one did (those after it wait for the
    task's retry). A workload refused here fails at once."""
    ready: list[Workload] = []
    pulled: set[tuple[str, tuple[str, ...]]] = set()
    not_owned = workspaces.homes_not_owned(batch)
    for workload in batch:
        heartbeat.beat()
        spec = specs[workload.id]
        try:
            if workload.id in not_owned:
                raise NotTheOwners(f"The home workspace {not_owned[workload.id]} belongs to someone else.")
            secrets_written(workload, spec.secrets)
            if spec.image_pull_secrets and (spec.namespace, spec.image_pull_secrets) not in pulled:
                pull_secrets_ensure(spec.namespace, spec.image_pull_secrets)
                pulled.add((spec.namespace, spec.image_pull_secrets))
        except SubmitRejected as exc:
            transition(workload, State.FAILED, reason=exc.reason, message=str(exc), finished_at=None)
            workload_delete_objects(workload)
            continue
        except Exception as exc:  # SecretPending, the API server: the rest of the batch waits for the retry
            return ready, exc
        ready.append(workload)
    return ready, None


_creators: tuple[int, ThreadPoolExecutor] | None = None
_creators_lock = threading.Lock()


def _creator_pool() -> ThreadPoolExecutor:
    """This process's threads for creates (made again in a forked child, which inherits no threads)."""
    global _creators
    with _creators_lock:
        if _creators is None or _creators[0] != os.getpid():
            _creators = (os.getpid(), ThreadPoolExecutor(CREATES_IN_FLIGHT, thread_name_prefix="kube-create"))
        return _creators[1]


def _create_all(
    ready: list[Workload],
    specs: dict[int, objects.WorkloadSpec],
    rendered: dict[int, list[dict]],
    heartbeat: _Heartbeat,
) -> dict[int, BaseException | None]:
    """Create every ready workload's objects, up to CREATES_IN_FLIGHT workloads at a time per process
    (each workload's objects in order: a Deployment before its Service): a batch waits for the API
    server's answers together, not one after another. The creates touch no database; this thread keeps
    the batch's heartbeat while it waits. Returns each workload's outcome: None (created or adopted), or
    what it raised."""

    keys = ssh_access.keys_texts(ready)  # read here: the creates below touch no database

    def create(workload: Workload) -> BaseException | None:
        spec = specs[workload.id]
        try:
            if workload.id in keys:  # a service's authorized_keys, before its pod mounts them
                ssh_access.publish(workload, keys[workload.id])
            for obj in rendered[workload.id]:
                _create_or_adopt(obj, spec, workload.team)
        except Exception as exc:
            return exc
        return None

    if len(ready) <= 1:
        return {w.id: create(w) for w in ready}
    pool = _creator_pool()
    futures = {w.id: pool.submit(create, w) for w in ready}
    pending = set(futures.values())
    while pending:
        _, pending = wait(pending, timeout=heartbeat.every)
        heartbeat.beat()
    return {workload_id: future.result() for workload_id, future in futures.items()}


class _Heartbeat:
    """Keeps a batch's workloads marked as being created (updated_at) while the batch runs, so the sweep,
    which hands over again what nobody touched for PORTAL_STUCK_SUBMIT_SECONDS, leaves a long batch alone
    and picks up only one whose worker died (kill -9): then the marks stop."""

    def __init__(self, ids: list[int], *, marked_at: datetime | None = None) -> None:
        """`marked_at`: the oldest mark of the batch as loaded (the admission that handed it over set it
        just now): the first mark is made only when that one is a third of the time old, as if this
        heartbeat had made it (an UPDATE of the whole batch saved on every fresh batch)."""
        self.ids = ids
        self.every = settings.PORTAL_STUCK_SUBMIT_SECONDS / 3
        age = (timezone.now() - marked_at).total_seconds() if marked_at is not None else float("inf")
        self.last = time.monotonic() - max(age, 0.0)
        self.beat()

    def beat(self) -> None:
        """Mark the batch's workloads (those created are SUBMITTING too until the batch records them) when
        the last mark is a third of that time old."""
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        Workload.objects.filter(id__in=self.ids, state=State.SUBMITTING).update(updated_at=timezone.now())


def _prepare_namespaces(batch: list[Workload], specs: dict[int, objects.WorkloadSpec]) -> None:
    """What must exist before the objects, once per batch: each namespace usable by us and the workspace
    claims (once per distinct claim set). Secrets and pull Secrets are per workload (they may refuse one)."""
    ready: set[tuple[int, str]] = set()
    claims_done: set[tuple] = set()
    for workload in batch:
        spec = specs[workload.id]
        group, resource = ("batch", "jobs") if spec.kind == "batch" else ("apps", "deployments")
        if (workload.team_id, resource) not in ready:
            provisioning.namespace_wait_ready(workload.team, group=group, resource=resource)
            ready.add((workload.team_id, resource))
        claims = (
            spec.namespace,
            *sorted(m.get("claim", "") for m in workload.mounts or [] if m.get("kind") in ("home", "team")),
        )
        if len(claims) > 1 and claims not in claims_done:
            # The claims too wait for the namespace's set-up (a first launch in a new team's namespace).
            if (workload.team_id, "persistentvolumeclaims") not in ready:
                provisioning.namespace_wait_ready(workload.team, group="", resource="persistentvolumeclaims")
                ready.add((workload.team_id, "persistentvolumeclaims"))
            workspaces.workspaces_ensure(workload)
            claims_done.add(claims)


# The move and its timeline rows in one statement: the UPDATE's RETURNING feeds the INSERT (a data-modifying
# CTE). Each row is stamped `now`, or its workload's latest entry's time if that is later (GREATEST skips
# the NULL of a workload without one), as `transition`'s timeline_append stamps one.
_MARK_CREATED_SQL = f"""
    WITH moved AS (
        UPDATE {Workload._meta.db_table} AS w
        SET state = %s, reason = %s, submitted_at = %s, state_changed_at = %s, updated_at = %s,
            message = v.message, namespace = v.namespace, k8s_name = v.k8s_name
        FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::text[]) AS v(id, message, namespace, k8s_name)
        WHERE w.id = v.id AND w.state = %s
        RETURNING w.id, w.message
    ), timeline AS (
        INSERT INTO {WorkloadEvent._meta.db_table} (workload_id, at, source, from_state, to_state, reason, message)
        SELECT m.id, GREATEST(%s, (SELECT max(e.at) FROM {WorkloadEvent._meta.db_table} e WHERE e.workload_id = m.id)),
               %s, %s, %s, %s, m.message
        FROM moved m
    )
    SELECT id FROM moved
"""  # noqa: S608 - the table name is our model's; every value is a parameter


def _move_to_pending(values: list[tuple[int, str, str, str]], now: datetime) -> set[int]:
    """Move (id, message, namespace, object name) rows still SUBMITTING to PENDING; the ids moved."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            columns = [list(column) for column in zip(*values, strict=True)]  # ids, messages, namespaces, names
            cursor.execute(
                _MARK_CREATED_SQL,
                [State.PENDING, "Created", now, now, now, *columns, State.SUBMITTING,
                 now, WorkloadEvent.Source.PORTAL, State.SUBMITTING, State.PENDING, "Created"],
            )  # fmt: skip
            return {row[0] for row in cursor.fetchall()}
    else:  # SQLite (`make run` without DATABASE_URL): no arrays; one guarded UPDATE per workload
        shared = {"state": State.PENDING, "reason": "Created", "submitted_at": now, "state_changed_at": now}
        return {
            workload_id
            for workload_id, message, namespace, name in values
            if Workload.objects.filter(id=workload_id, state=State.SUBMITTING).update(
                **shared, updated_at=now, message=message, namespace=namespace, k8s_name=name
            )
        }


def _set_pending(workload: Workload, spec: objects.WorkloadSpec, now: datetime) -> None:
    """The in-memory workload as `_move_to_pending` wrote its row."""
    workload.state = State.PENDING
    workload.reason = "Created"
    workload.message = _created_message(spec)
    workload.submitted_at = now
    workload.namespace = spec.namespace
    workload.k8s_name = spec.object_name
    workload.state_changed_at = workload.updated_at = now


def _timeline_created(rows: list[Workload], moved: set[int], now: datetime) -> None:
    """The timeline rows of the move, where the database could not write them with it (SQLite)."""
    last = dict(
        WorkloadEvent.objects.filter(workload_id__in=moved)
        .values("workload_id")
        .annotate(last=Max("at"))
        .values_list("workload_id", "last")
    )
    WorkloadEvent.objects.bulk_create(
        WorkloadEvent(
            workload_id=w.id,
            at=max(now, last[w.id]) if w.id in last else now,
            from_state=State.SUBMITTING,
            to_state=State.PENDING,
            reason="Created",
            message=w.message,
        )
        for w in rows
    )


def _mark_created(created: list[Workload], specs: dict[int, objects.WorkloadSpec]) -> int:
    """SUBMITTING -> PENDING for the batch's successes, as `transition` would move each (guarded by the
    state, timestamped, a timeline row each; the move tells nobody and releases nothing), in one
    transaction (on PostgreSQL one statement, which needs no BEGIN and COMMIT of its own). Those someone else
    moved meanwhile are handled one by one, as a single create does."""
    if not created:
        return 0
    now = timezone.now()
    with transaction.atomic() if connection.vendor != "postgresql" else contextlib.nullcontext():
        # One UPDATE, guarded by the state and returning the ids it moved (their rows locked until the
        # commit): what all of them share as values, what differs (name, message, namespace) from arrays
        # joined by id. Django's UPDATE needed a CASE per field and row, which cost the worker more CPU
        # than the rest of the batch's bookkeeping.
        values = [
            (w.id, _created_message(specs[w.id]), specs[w.id].namespace, specs[w.id].object_name) for w in created
        ]
        moved = _move_to_pending(values, now)
        rows = [w for w in created if w.id in moved]
        for workload in rows:
            _set_pending(workload, specs[workload.id], now)
        if connection.vendor != "postgresql":  # PostgreSQL wrote the timeline rows with the move
            _timeline_created(rows, moved, now)
    for workload in created:
        if workload.id not in moved:
            workload.refresh_from_db()
            _moved_meanwhile(workload, specs[workload.id])
    return len(moved)


def _created_message(spec: objects.WorkloadSpec) -> str:
    what = "Job" if spec.kind == "batch" else "Deployment and Service"
    if spec.gang is not None:
        what = f"{spec.gang.nodes} Jobs, one per rank,"
    return f"{what} {spec.object_name} created in {spec.namespace}."


def _moved_meanwhile(workload: Workload, spec: objects.WorkloadSpec) -> None:
    """Someone moved it while we were creating: cancelled or stopped by the portal (then our objects must
    go), preempted and requeued (this attempt's objects must go), or already seen running, or even
    finished, by the tracker (then all is well, but record the names; a batch's first Job may have run
    to its end before the batch's last create, and its objects keep its logs until the cleanup)."""
    Workload.objects.filter(id=workload.id, k8s_name="", attempt=spec.attempt).update(
        k8s_name=spec.object_name, namespace=spec.namespace, submitted_at=timezone.now()
    )
    if workload.state in State.final():
        ended_by = (
            WorkloadEvent.objects.filter(workload=workload, to_state=workload.state)
            .order_by("-at", "-id")
            .values_list("source", flat=True)
            .first()
        )
        if ended_by != WorkloadEvent.Source.KUBERNETES:
            workload_delete_objects(workload)
    elif workload.attempt != spec.attempt:
        workload_delete_objects(workload, name=spec.object_name)


def gang_objects_named(workload: Workload, object_name: str, body: dict) -> list[tuple[str, str, dict | None]]:
    """A gang attempt's objects by kind and name: every rank's Job and the rank-0 Service (there or not).
    The attempt is read from the name (`object_name` may be an older attempt's)."""
    attempt = next(
        (
            a
            for a in range(workload.attempt, -1, -1)
            if names.attempt_name(workload.name, workload.uid, a) == object_name
        ),
        None,
    )
    if attempt is None:  # not one of its attempts' names: that object alone, never the current ranks
        return [("Job", object_name, body)]
    ranks = [("Job", names.rank_name(workload.name, workload.uid, attempt, r), body) for r in range(workload.nodes)]
    return [*ranks, ("Service", object_name, None)]


DELETE_GRACE_SECONDS = 5  # a workload the portal ended: SIGTERM, then killed this long after
# The timeline reason when the portal deletes the current objects of a workload that has not ended (its
# tasks refuse to; only a direct call can): the tracker then never blames the deletion on someone else.
DELETED_BY_PORTAL = "DeletedByPortal"


def stop_grace_seconds(workload: Workload) -> int:
    """Seconds between SIGTERM and the kill when the portal stops a workload: a batch job gets the checkpoint
    contract's GPUPORTAL_GRACE_SECONDS (time to save its state); a service the short default."""
    if workload.kind == Kind.BATCH:
        return max(DELETE_GRACE_SECONDS, settings.PORTAL_PREEMPT_GRACE_SECONDS)
    return DELETE_GRACE_SECONDS


def _objects_named(workload: Workload, object_name: str, grace_seconds: int) -> list[tuple[str, str, dict | None]]:
    """(kind, name, delete options) of an attempt's objects: a Job (a gang's per rank), or a Deployment and
    its Service."""
    body = {"propagationPolicy": "Background", "gracePeriodSeconds": grace_seconds}
    if workload.nodes > 1:
        return gang_objects_named(workload, object_name, body)
    kinds = [("Job", body)] if workload.kind == Kind.BATCH else [("Deployment", body), ("Service", None)]
    return [(kind, object_name, options) for kind, options in kinds]


def _delete_named(namespace: str, named: list[tuple[str, str, dict | None]]) -> None:
    """Delete each (kind, name, options) in `namespace`; one already gone is fine."""
    for kind, each_name, options in named:
        try:
            kube.delete(kind, namespace, each_name, options)
        except ApiException as exc:
            if exc.status != 404:
                raise


def workload_delete_objects(workload: Workload, *, name: str = "", grace_seconds: int = DELETE_GRACE_SECONDS) -> None:
    """Delete a workload's Job, or Deployment and Service (and, through them, its pods): those of `name`
    (an attempt that preemption ended), else of its current attempt. Kubernetes sends SIGTERM at once and
    kills what still runs after `grace_seconds`. 404s are fine: a retried delete finds nothing left."""
    object_name = name or workload.k8s_name or names.attempt_name(workload.name, workload.uid, workload.attempt)
    namespace = workload.namespace or workload.team.namespace
    _delete_named(namespace, _objects_named(workload, object_name, grace_seconds))
    if workload.kind == Kind.BATCH and workload.state in State.final():
        # Its checkpoint token dies with it (the API refuses it already; the Secret goes too).
        with contextlib.suppress(ApiException):
            kube.delete("Secret", namespace, tokens.secret_name(workload.uid))
    current = workload.k8s_name or names.attempt_name(workload.name, workload.uid, workload.attempt)
    if object_name == current and workload.state in State.active():
        note(workload, reason=DELETED_BY_PORTAL, message=f"The portal deleted its Kubernetes objects ({object_name}).",
             source=WorkloadEvent.Source.PORTAL)  # fmt: skip
