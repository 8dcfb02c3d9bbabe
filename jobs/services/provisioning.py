"""Team namespaces: created and kept in shape by the provisioner, the one portal identity allowed to.

Kubernetes RBAC cannot limit `create namespaces` or `create rolebindings` to names with a prefix, so the
identity that holds them could bind the workloads role in kube-system and run a Job there as any of its
service accounts. That identity is therefore held by no process that faces the network: the web holds a
read-only one, the worker and tracker one that writes only inside team namespaces, and this code runs
in a Celery worker that consumes only the provision queue (settings.PROVISION_QUEUE) with the
provisioner's credentials — or, where an admin pre-provisions, in `manage.py provision_namespaces`.

What it is asked to do is a team id; the namespace name comes from the database and is checked here
against the portal's prefix before any call is made, so a forged message cannot point it elsewhere.
"""

from __future__ import annotations

import logging
import threading
import time

from django.conf import settings
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from jobs.kube import client as kube
from jobs.kube import names, objects
from jobs.models import GpuType, Quota, Team
from jobs.services import dispatch

log = logging.getLogger(__name__)

_ensured_lock = threading.Lock()
_ensured: dict[str, tuple[tuple, float]] = {}  # namespace -> ((), when its provisioning was last asked for)
PROVISION_REQUEST_TTL_SECONDS = 2.0
PROVISION_WAIT_SECONDS = 15.0
_ready: set[tuple[str, str]] = set()  # (team namespace, resource) this process was seen allowed to create


class NamespaceRefused(ValueError):
    """The provisioner will not touch this namespace name."""


def namespace_name_check(namespace: str) -> str:
    """The name must be `<prefix><team slug>`, a DNS label, and never a system namespace."""
    prefix = settings.KUBE_NAMESPACE_PREFIX
    if not prefix or not prefix.strip("-"):
        raise NamespaceRefused("KUBE_NAMESPACE_PREFIX is empty: the provisioner acts only on prefixed namespaces")
    if not namespace.startswith(prefix) or len(namespace) <= len(prefix):
        raise NamespaceRefused(f"namespace {namespace!r} does not start with the portal's prefix {prefix!r}")
    if names.dns_label(namespace) != namespace:
        raise NamespaceRefused(f"namespace {namespace!r} is not a valid DNS label")
    if namespace in {"default", "kube-system", "kube-public", "kube-node-lease"}:
        raise NamespaceRefused(f"namespace {namespace!r} is a system namespace")
    return namespace


def team_namespace_caps(team: Team) -> objects.NamespaceCaps:
    """What the team's namespace may request at once, from its quotas.

    GPUs per resource name: its quota, plus its borrowing limit in a cohort; every GPU resource is listed,
    0 where it has no quota, so the namespace can never use a GPU the team was not given. CPU and memory:
    for each GPU it may hold, the most a pod may ask per GPU of that type (the type's limit per GPU, else
    its default), so every pod the portal would admit fits and nothing larger can be created there.
    """
    gpus: dict[str, int] = dict.fromkeys(GpuType.objects.values_list("resource_name", flat=True), 0)
    gpus.setdefault("nvidia.com/gpu", 0)
    cpu_millicores = memory_mib = 0
    # Borrowing: a team in a cohort may hold up to its quota plus its borrowing limit.
    in_cohort = team.cohort_id is not None
    for quota in Quota.objects.filter(team=team).select_related("gpu_type"):
        held = quota.max_gpus + (quota.borrowing_limit if in_cohort else 0)
        gpu_type = quota.gpu_type
        gpus[gpu_type.resource_name] = gpus.get(gpu_type.resource_name, 0) + held
        cpu_millicores += held * max(gpu_type.cpu_per_gpu_millicores, gpu_type.max_cpu_per_gpu_millicores or 0)
        memory_mib += held * max(gpu_type.memory_per_gpu_mib, gpu_type.max_memory_per_gpu_mib or 0)
    return objects.NamespaceCaps(gpus_by_resource=gpus, cpu_millicores=cpu_millicores, memory_mib=memory_mib)


def team_gpu_limits(team: Team) -> dict[str, int]:
    """GPUs per resource name the team may request (see team_namespace_caps)."""
    return team_namespace_caps(team).gpus_by_resource


def network_rules() -> objects.NetworkRules:
    return objects.NetworkRules(
        proxy_labels=dict(settings.TEAM_INGRESS_PROXY_LABELS),
        portal_namespace_labels=dict(settings.TEAM_INGRESS_PORTAL_NAMESPACE_LABELS),
        egress_allow=tuple(settings.TEAM_EGRESS_ALLOW_CIDRS),
        egress_deny=tuple(settings.TEAM_EGRESS_DENY_CIDRS),
    )


def team_namespace_objects(team: Team) -> list:
    """Everything a team namespace holds besides workloads, in the order it is created."""
    namespace = namespace_name_check(team.namespace)
    made: list = [
        objects.make_namespace(namespace, team_slug=team.slug, instance=settings.PORTAL_INSTANCE),
        objects.make_resource_quota(namespace, team_namespace_caps(team)),
        objects.make_limit_range(namespace, ephemeral_storage=settings.TEAM_EPHEMERAL_STORAGE_DEFAULT),
        objects.make_network_policy(namespace, network_rules()),
    ]
    if settings.KUBE_SERVICE_ACCOUNT:
        made.append(
            objects.make_role_binding(
                namespace,
                cluster_role=settings.KUBE_WORKLOADS_CLUSTERROLE,
                service_account=settings.KUBE_SERVICE_ACCOUNT,
            )
        )
    if settings.KUBE_WEB_SERVICE_ACCOUNT:
        made.append(
            objects.make_role_binding(
                namespace,
                cluster_role=settings.KUBE_READER_CLUSTERROLE,
                service_account=settings.KUBE_WEB_SERVICE_ACCOUNT,
                name=objects.READER_BINDING_NAME,
            )
        )
    if settings.KUBE_PROXY_SERVICE_ACCOUNT:
        # The service proxy finds a service's ready pod here; it holds no read right outside team namespaces.
        made.append(
            objects.make_role_binding(
                namespace,
                cluster_role=settings.KUBE_PROXY_CLUSTERROLE,
                service_account=settings.KUBE_PROXY_SERVICE_ACCOUNT,
                name=objects.PROXY_BINDING_NAME,
            )
        )
    return made


def namespace_provision(team: Team, *, api: k8s.ApiClient | None = None) -> str:
    """Create or bring up to date the team's namespace and what it holds, with this process's credentials
    (or `api`'s). Idempotent; API errors propagate."""
    made = team_namespace_objects(team)
    namespace = made[0].metadata.name
    api = api or kube.api_client()
    core, rbac, net = k8s.CoreV1Api(api), k8s.RbacAuthorizationV1Api(api), k8s.NetworkingV1Api(api)
    timeout = kube.timeout()
    try:
        core.create_namespace(made[0], _request_timeout=timeout)
    except ApiException as exc:
        if exc.status != 409:
            raise
        # Existing: bring its labels (Pod Security Admission among them) up to date.
        core.patch_namespace(namespace, {"metadata": {"labels": made[0].metadata.labels}}, _request_timeout=timeout)
    for obj in made[1:]:
        create, replace = {
            "ResourceQuota": (core.create_namespaced_resource_quota, core.replace_namespaced_resource_quota),
            "LimitRange": (core.create_namespaced_limit_range, core.replace_namespaced_limit_range),
            "NetworkPolicy": (net.create_namespaced_network_policy, net.replace_namespaced_network_policy),
            "RoleBinding": (rbac.create_namespaced_role_binding, rbac.replace_namespaced_role_binding),
        }[obj.kind]
        try:
            create(namespace, obj, _request_timeout=timeout)
        except ApiException as exc:
            if exc.status != 409:
                raise
            replace(obj.metadata.name, namespace, obj, _request_timeout=timeout)
    log.info("team namespace %s provisioned", namespace)
    return namespace


def existing_namespaces_refresh(*, api: k8s.ApiClient | None = None) -> list[str]:
    """Bring every team namespace this installation already made up to date (the provisioner does this when
    it starts): an upgrade that adds a binding or a rule, such as the proxy's per-namespace read, reaches
    namespaces made before it. Namespaces are found by the portal's own labels; one that fails is logged
    and the others still go on. Returns the namespaces done."""
    api = api or kube.api_client()
    selector = f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY},{names.LABEL_INSTANCE}={names.label_value(settings.PORTAL_INSTANCE)}"
    listed = k8s.CoreV1Api(api).list_namespace(label_selector=selector, _request_timeout=kube.timeout())
    existing = {item.metadata.name for item in listed.items}
    done = []
    for team in Team.objects.order_by("slug"):
        if team.namespace not in existing:
            continue
        try:
            done.append(namespace_provision(team, api=api))
        except (ApiException, NamespaceRefused) as exc:
            log.error("refreshing the namespace of team %s failed: %s", team.slug, exc)
    return done


# --- asking for a namespace: what a worker that may not create one does ---------------------------------


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
    dispatch.request_provisioning(team_id=team.id, slug=team.slug)
    return namespace


def forget_namespaces() -> None:
    with _ensured_lock:
        _ensured.clear()
        _ready.clear()


def namespace_not_ready(team: Team) -> None:
    """A create in the team's namespace was refused (403/404): it is missing or not bound for us yet.
    Forget that it was ready and ask the provisioner for it again."""
    with _ensured_lock:
        _ready.difference_update({r for r in _ready if r[0] == team.namespace})
    namespace_ensure(team)


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
