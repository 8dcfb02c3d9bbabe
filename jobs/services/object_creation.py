"""Creating a workload's Kubernetes objects (the Job, or the Deployment and Service) in its team namespace.

The namespace itself is the provisioner's (jobs/services/provisioning.py): when it is missing or not yet
bound for the engine, the create is refused (403/404), provisioning is requested and the task retries.

Idempotent end to end: names are deterministic, a 409 adopts the existing object when it carries the
same workload uid, and a workload cancelled while we were creating gets its objects deleted again.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from django.utils import timezone
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from jobs.kube import client as kube
from jobs.kube import names, objects
from jobs.models import AllowedRegistry, SecretState, State, Team, TeamSecret, Workload
from jobs.services import opening, workspaces
from jobs.services.transitions import transition
from jobs.services.validation import parse_image_reference
from portal import sealing

log = logging.getLogger(__name__)

_ensured_lock = threading.Lock()
_ensured: dict[str, tuple[tuple, float]] = {}  # namespace -> ((), when its provisioning was last asked for)
PROVISION_REQUEST_TTL_SECONDS = 2.0
PROVISION_WAIT_SECONDS = 15.0
_ready: set[tuple[str, str]] = set()  # (team namespace, resource) this process was seen allowed to create


class SubmitRejected(Exception):
    """Kubernetes refused the objects for a reason retrying will not fix."""

    reason = "SubmitRejected"


class SecretUnavailable(SubmitRejected):
    """A secret the workload names was deleted, or the engine could not write it: it must not run without."""

    reason = "SecretUnavailable"


class SecretPending(Exception):
    """A secret the workload names is not written yet (just stored or replaced): the submit task retries."""


SECRET_WAIT_INLINE_SECONDS = 3.0


def spec_for(workload: Workload) -> objects.WorkloadSpec:
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
        gpu_count=workload.gpu_count,
        time_limit_seconds=workload.time_limit_seconds,
        command=tuple(workload.command or ()),
        args=tuple(workload.args or ()) + base_url_args(workload),
        env=tuple((e["name"], e["value"]) for e in workload.env or ()) + base_url_env(workload),
        port=workload.port,
        volumes=workspaces.volume_specs(workload.mounts or []),
        image_pull_secrets=image_pull_secrets(workload.image),
        cpu_millicores=workload.cpu_millicores,
        memory_mib=workload.memory_mib,
        secrets=tuple(objects.SecretRef(s["name"], s["k8s_name"], s.get("env", "")) for s in workload.secrets or ()),
        instance=settings.PORTAL_INSTANCE,
        attempt=workload.attempt,
        termination_grace_seconds=settings.PORTAL_PREEMPT_GRACE_SECONDS,
        # Read at every render: an approval withdrawn later makes the next attempt run as non-root.
        run_as_root=workload.catalog_image is not None and workload.catalog_image.runs_as_root,
        read_only_root=workload.catalog_image is not None and workload.catalog_image.read_only_root,
    )


def _fill(template: str, base_url: str) -> str:
    # str.replace, not str.format: a template may hold other braces (JSON, shell) that are not ours.
    return template.replace("{base_url}", base_url).replace("{base_path}", base_url.rstrip("/"))


def base_url_args(workload: Workload) -> tuple[str, ...]:
    """The catalog image's arguments that tell its app the path the portal serves it under."""
    base_url = opening.open_path(workload)
    if not base_url or workload.catalog_image is None:
        return ()
    return tuple(_fill(str(a), base_url) for a in workload.catalog_image.base_url_args or [])


def base_url_env(workload: Workload) -> tuple[tuple[str, str], ...]:
    """GPUPORTAL_BASE_URL for every service, and the catalog image's own variables for its base path."""
    base_url = opening.open_path(workload)
    if not base_url:
        return ()
    own = {name for name, _ in ((e["name"], e["value"]) for e in workload.env or ())}
    catalog = workload.catalog_image.base_url_env if workload.catalog_image is not None else {}
    extra = [("GPUPORTAL_BASE_URL", base_url), *((k, _fill(str(v), base_url)) for k, v in (catalog or {}).items())]
    return tuple((name, value) for name, value in extra if name not in own)  # the researcher's own value wins


def namespace_ensure(team: Team, *, force: bool = False) -> str:
    """Ask the provisioner to create the team's namespace, or to bring it up to date (force: the quota
    changed); returns its name without waiting. The caller holds no right to create namespaces or
    RoleBindings itself (see jobs/services/provisioning.py): a submission that finds the namespace
    missing or not yet bound asks for it here and is retried by its task."""
    namespace = team.namespace
    now = time.monotonic()
    with _ensured_lock:
        # Asked recently by this process: a burst of first submissions sends one request, not hundreds.
        if not force and now - _ensured.get(namespace, ((), -1e9))[1] < PROVISION_REQUEST_TTL_SECONDS:
            return namespace
        _ensured[namespace] = ((), now)
    from jobs import tasks  # the tasks import this module

    tasks.provision_namespace.apply_async(args=[team.id], queue=settings.PROVISION_QUEUE)
    return namespace


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


def image_pull_secrets(image: str) -> tuple[str, ...]:
    """The pull Secret a workload's image needs: its registry's, when that registry has credentials."""
    reference = parse_image_reference(image)
    if reference is None:
        return ()
    registry = AllowedRegistry.objects.filter(host=reference.registry).first()
    return (registry.pull_secret_name,) if registry is not None and registry.pull_secret_name else ()


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
        pending = []
        for ref in refs:
            row = rows.get(ref.k8s_name)
            if row is None or row.state == SecretState.DELETING:
                raise SecretUnavailable(f"The secret {ref.name} was deleted after this was submitted; store it again.")
            if row.state == SecretState.FAILED:
                raise SecretUnavailable(f"The secret {ref.name} could not be written: {row.message}")
            if row.state == SecretState.PENDING:
                waited = (timezone.now() - row.updated_at).total_seconds()
                if waited > settings.PORTAL_SECRET_WRITE_TIMEOUT:
                    raise SecretUnavailable(
                        f"The secret {ref.name} was not confirmed written within {settings.PORTAL_SECRET_WRITE_TIMEOUT} s; "
                        "store it again."
                    )
                pending.append(ref.name)
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise SecretPending(f"Waiting for the engine to write the secret {', '.join(pending)}.")
        time.sleep(0.1)


def forget_namespaces() -> None:
    with _ensured_lock:
        _ensured.clear()
        _ready.clear()


def namespace_wait_ready(team: Team, *, group: str, resource: str, timeout: float = PROVISION_WAIT_SECONDS) -> bool:
    """Before this process first writes into a team's namespace: ask for the namespace and wait (briefly)
    until our credentials may create `resource` there, so objects are made at once instead of by retries."""
    namespace = team.namespace
    if (namespace, resource) in _ready:
        return True
    namespace_ensure(team)
    review = k8s.V1SelfSubjectAccessReview(
        spec=k8s.V1SelfSubjectAccessReviewSpec(
            resource_attributes=k8s.V1ResourceAttributes(
                namespace=namespace, verb="create", group=group, resource=resource
            )
        )
    )
    authorization = k8s.AuthorizationV1Api(kube.api_client())
    deadline = time.monotonic() + timeout
    while True:
        answer = authorization.create_self_subject_access_review(review, _request_timeout=kube.timeout())
        if answer.status.allowed:
            with _ensured_lock:
                _ready.add((namespace, resource))
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _create_or_adopt(obj, spec: objects.WorkloadSpec, team: Team) -> None:
    kind = obj.kind
    namespace = spec.namespace
    try:
        if kind == "Job":
            kube.batch().create_namespaced_job(namespace, obj, _request_timeout=kube.timeout())
        elif kind == "Deployment":
            kube.apps().create_namespaced_deployment(namespace, obj, _request_timeout=kube.timeout())
        else:
            kube.core().create_namespaced_service(namespace, obj, _request_timeout=kube.timeout())
        return
    except ApiException as exc:
        if exc.status == 409:
            existing = _read(kind, obj.metadata.name, namespace)
            owner = (existing.metadata.labels or {}).get(names.LABEL_WORKLOAD)
            if owner == spec.uid:
                log.info("workload %s: adopting existing %s %s", spec.uid, kind, obj.metadata.name)
                return
            raise SubmitRejected(
                f"a {kind} named {obj.metadata.name} already exists and is not this workload's"
            ) from exc
        if exc.status in (403, 404):
            # The namespace is not there or not bound for us yet: ask the provisioner, then retry.
            with _ensured_lock:
                _ready.difference_update({r for r in _ready if r[0] == team.namespace})
            namespace_ensure(team)
            raise
        failure = kube.classify(exc)
        # 403 is retried too: RBAC in a namespace we just set up (or an API server that just restarted)
        # can deny for a moment until its caches catch up. The workload's message says we are retrying.
        if failure.transient or exc.status == 403:
            raise
        raise SubmitRejected(f"Kubernetes refused the {kind}: {failure.message}") from exc


def _read(kind: str, name: str, namespace: str):
    if kind == "Job":
        return kube.batch().read_namespaced_job(name, namespace, _request_timeout=kube.timeout())
    if kind == "Deployment":
        return kube.apps().read_namespaced_deployment(name, namespace, _request_timeout=kube.timeout())
    return kube.core().read_namespaced_service(name, namespace, _request_timeout=kube.timeout())


def workload_create_objects(workload_id: int) -> None:
    """Create an admitted workload's objects. Transient API failures propagate (the task retries)."""
    workload = Workload.objects.select_related("team", "gpu_type", "owner").get(id=workload_id)
    # A retry may find the tracker ahead of it: some objects were made (their pod seen) before a later
    # create was refused (RBAC still learning of the namespace's new binding). Finish the set and record
    # the names then; creates adopt what exists.
    unfinished = workload.state in (State.PENDING, State.RUNNING) and not workload.k8s_name
    if workload.state != State.SUBMITTING and not unfinished:
        return
    spec = spec_for(workload)
    try:
        secrets_written(workload, spec.secrets)
        group, resource = ("batch", "jobs") if spec.kind == "batch" else ("apps", "deployments")
        namespace_wait_ready(workload.team, group=group, resource=resource)
        workspaces.workspaces_ensure(workload)
        if spec.image_pull_secrets:
            pull_secrets_ensure(spec.namespace, spec.image_pull_secrets)
        for obj in objects.make_objects(spec):
            _create_or_adopt(obj, spec, workload.team)
    except ApiException as exc:
        message = f"Kubernetes is not accepting it yet ({kube.classify(exc).message}); retrying."
        Workload.objects.filter(id=workload.id, state=State.SUBMITTING).update(message=message[:2000])
        raise
    except SecretPending as exc:
        Workload.objects.filter(id=workload.id, state=State.SUBMITTING).update(message=str(exc)[:2000])
        raise
    except SubmitRejected as exc:
        transition(workload, State.FAILED, reason=exc.reason, message=str(exc), finished_at=None)
        workload_delete_objects(workload)
        return
    moved = transition(
        workload,
        State.PENDING,
        reason="Created",
        message=f"{'Job' if spec.kind == 'batch' else 'Deployment and Service'} {spec.object_name} created in {spec.namespace}.",
        submitted_at=timezone.now(),
        namespace=spec.namespace,
        k8s_name=spec.object_name,
    )
    if not moved:
        # Someone moved it while we were creating: cancelled (then our objects must go) or already
        # observed running by the tracker (then all is well, but record the names).
        Workload.objects.filter(id=workload.id, k8s_name="", attempt=spec.attempt).update(
            k8s_name=spec.object_name, namespace=spec.namespace, submitted_at=timezone.now()
        )
        if workload.state in State.final():
            workload_delete_objects(workload)
        elif workload.attempt != spec.attempt:
            # Preempted and requeued while we were creating: this attempt's objects must go.
            workload_delete_objects(workload, name=spec.object_name)


def workload_delete_objects(workload: Workload, *, name: str = "") -> None:
    """Delete a workload's Job or Deployment and Service (and, through them, its pods). 404s are fine."""
    spec_name = name or workload.k8s_name or names.attempt_name(workload.name, workload.uid, workload.attempt)
    namespace = workload.namespace or workload.team.namespace
    body = {"propagationPolicy": "Background", "gracePeriodSeconds": 5}
    calls = (
        [lambda: kube.batch().delete_namespaced_job(spec_name, namespace, body=body, _request_timeout=kube.timeout())]
        if workload.kind == "batch"
        else [
            lambda: kube.apps().delete_namespaced_deployment(
                spec_name, namespace, body=body, _request_timeout=kube.timeout()
            ),
            lambda: kube.core().delete_namespaced_service(spec_name, namespace, _request_timeout=kube.timeout()),
        ]
    )
    for call in calls:
        try:
            call()
        except ApiException as exc:
            if exc.status != 404:
                raise
