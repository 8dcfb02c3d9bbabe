"""Kubernetes objects for a workload, built by pure functions (no I/O).

A workload's own objects (Job, Deployment, Service and their pod template) are rendered as JSON-ready
dicts in the API's own field names, with no None values: what the client's models would serialize to,
without building the models and serializing them again at every create (in a 10,000-workload drain that
cost the worker more CPU than the rest of rendering). The namespace's objects, made rarely, stay client
models. Tests compare the rendered dicts with literal dicts, check that every key is one the client's
models know (a round trip through them changes nothing), and a property test has the real API server
dry-run whatever these functions make of any spec the validator accepts.
"""

from __future__ import annotations

import base64
import ipaddress
import json
from dataclasses import dataclass, field

from kubernetes import client as k8s

from jobs.kube import names, ssh_objects

CONTAINER_NAME = "main"
QUOTA_NAME = "gpuportal-gpus"
ROLE_BINDING_NAME = "gpuportal-workloads"
READER_BINDING_NAME = "gpuportal-reader"
PROXY_BINDING_NAME = "gpuportal-proxy"
NETWORK_POLICY_NAME = "gpuportal-isolation"
LIMIT_RANGE_NAME = "gpuportal-limits"
METADATA_CIDR = "169.254.169.254/32"
# Pod Security Admission on team namespaces: baseline is enforced (no privileged pods, host namespaces or
# host paths, whoever creates them), restricted is warned about (what an admin-allowed root image breaks).
PSA_LABELS = {
    "pod-security.kubernetes.io/enforce": "baseline",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
    "pod-security.kubernetes.io/warn-version": "latest",
}
# The uid/gid every user container runs as unless its catalog entry needs root and an admin allowed it;
# 1000 is the unprivileged user most research images (Jupyter's jovyan, NGC's) already own their files as.
USER_UID = 1000
USER_GID = 1000
SHM_VOLUME = "dshm"
TMP_VOLUME = "tmp"
SECRETS_VOLUME = "portal-secrets"
HOME_VOLUME = "ws-home"  # the owner's home workspace (jobs.services.storage.workspaces.volume_specs)
SECRETS_DIR = "/var/run/secrets/gpuportal"
SECRET_KEY = "value"  # noqa: S105  (the key inside each Secret, not a password)
# The workload's own checkpoint token (jobs/services/checkpoints/tokens.py), a file in its own directory.
TOKEN_VOLUME = "portal-workload-token"  # noqa: S105  (a volume name)
TOKEN_DIR = "/var/run/gpuportal"  # noqa: S105  (a directory)
TOKEN_KEY = "token"  # noqa: S105  (a file name)


@dataclass(frozen=True)
class GpuTypeSpec:
    slug: str
    node_label_key: str
    node_label_value: str
    resource_name: str
    cpu_per_gpu_millicores: int
    memory_per_gpu_mib: int
    ephemeral_storage_request_mib: int = 1024
    ephemeral_storage_limit_mib: int = 20480


@dataclass(frozen=True)
class VolumeSpec:
    """A volume mounted into the workload's container: a claim (workspace, dataset) or an NFS export."""

    name: str  # the pod's volume name (a DNS label, unique in the pod)
    mount_path: str
    read_only: bool = False
    claim_name: str = ""
    nfs_server: str = ""
    nfs_path: str = ""


@dataclass(frozen=True)
class SecretRef:
    """A stored secret a workload uses: always a file SECRETS_DIR/<name>, and `env` if one is named."""

    name: str
    k8s_name: str
    env: str = ""


@dataclass(frozen=True)
class GangSpec:
    """A gang job's shape and how its ranks find rank 0 (see jobs/kube/gang_objects.py)."""

    nodes: int
    master_port: int = 29500
    cluster_dns: bool = False  # rank 0 by name under a headless Service; else its pod IP handed over
    wait_seconds: int = 300  # how long a rank waits for rank 0's address before it gives up
    topology_key: str = ""  # the admin's topology label, when the gang asked to share one value of it
    topology_required: bool = False


@dataclass(frozen=True)
class WorkloadSpec:
    """Everything rendering needs, copied out of the database rows."""

    uid: str
    name: str
    kind: str  # "batch" | "service"
    team_slug: str
    username: str
    namespace: str
    image: str
    gpu_type: GpuTypeSpec
    gpu_count: int
    time_limit_seconds: int
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    port: int | None = None
    volumes: tuple[VolumeSpec, ...] = ()
    secrets: tuple[SecretRef, ...] = ()
    image_pull_secrets: tuple[str, ...] = ()  # the private registry's pull Secret, if its image needs one
    cpu_millicores: int | None = None  # sized pods: None is the type's default per GPU
    memory_mib: int | None = None
    instance: str = "default"
    extra_labels: dict[str, str] = field(default_factory=dict)
    attempt: int = 0
    # SIGTERM, then this long before the kill, whenever its pod is deleted (cancel, preemption).
    termination_grace_seconds: int = 30
    run_as_root: bool = False  # only for a catalog entry that needs root and that an admin allowed
    read_only_root: bool = False  # the catalog entry works with a read-only root filesystem
    # The checkpoint contract (jobs/services/checkpoints): the Secret holding the workload's own token,
    # mounted read-only at TOKEN_DIR; and the nodes whose GPUs are marked unhealthy, which it must avoid.
    token_secret: str = ""
    avoid_nodes: tuple[str, ...] = ()
    gang: GangSpec | None = None  # a batch job over several nodes (gpu_count is then per node)

    @property
    def object_name(self) -> str:
        return names.attempt_name(self.name, self.uid, self.attempt)


def labels(spec: WorkloadSpec) -> dict[str, str]:
    return {
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_INSTANCE: names.label_value(spec.instance),
        names.LABEL_WORKLOAD: spec.uid,
        names.LABEL_TEAM: names.label_value(spec.team_slug),
        names.LABEL_USER: names.label_value(spec.username),
        names.LABEL_GPU_TYPE: names.label_value(spec.gpu_type.slug),
        names.LABEL_KIND: spec.kind,
        **spec.extra_labels,
    }


def selector(spec: WorkloadSpec) -> dict[str, str]:
    return {names.LABEL_WORKLOAD: spec.uid}


def _container_env(spec: WorkloadSpec) -> list[dict]:
    env: list[dict] = [{"name": name, "value": value} for name, value in spec.env]
    # Secret values never enter the spec: the kubelet reads them from the Secret when the pod starts.
    env += [
        {"name": ref.env, "valueFrom": {"secretKeyRef": {"name": ref.k8s_name, "key": SECRET_KEY}}}
        for ref in spec.secrets
        if ref.env
    ]
    env.append({"name": "GPUPORTAL_WORKLOAD", "value": spec.uid})
    if spec.kind == "service":
        env += ssh_objects.ssh_env(next((v.mount_path for v in spec.volumes if v.name == HOME_VOLUME), ""))
    return env


def _container_mounts(spec: WorkloadSpec) -> list[dict]:
    mounts = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]  # noqa: S108
    if spec.read_only_root:  # a read-only root still needs somewhere to write scratch files: /tmp is an emptyDir
        mounts.append({"name": TMP_VOLUME, "mountPath": "/tmp"})  # noqa: S108
    mounts += [_read_only({"name": v.name, "mountPath": v.mount_path}, v.read_only) for v in spec.volumes]
    if spec.secrets:
        mounts.append({"name": SECRETS_VOLUME, "mountPath": SECRETS_DIR, "readOnly": True})
    if spec.token_secret:
        mounts.append({"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True})
    if spec.kind == "service":
        mounts.append(ssh_objects.keys_mount())
    return mounts


def _container_resources(spec: WorkloadSpec) -> dict:
    gpus = str(spec.gpu_count)
    cpu = f"{pod_cpu_millicores(spec)}m"
    memory = f"{pod_memory_mib(spec)}Mi"
    scratch = f"{spec.gpu_type.ephemeral_storage_request_mib}Mi"
    scratch_limit = f"{max(spec.gpu_type.ephemeral_storage_limit_mib, spec.gpu_type.ephemeral_storage_request_mib)}Mi"
    return {
        # Extended resources must have requests == limits; memory limit == request keeps the node honest.
        "requests": {spec.gpu_type.resource_name: gpus, "cpu": cpu, "memory": memory, "ephemeral-storage": scratch},
        "limits": {spec.gpu_type.resource_name: gpus, "memory": memory, "ephemeral-storage": scratch_limit},
    }


def make_container(spec: WorkloadSpec) -> dict:
    security: dict = {"allowPrivilegeEscalation": False, "privileged": False, "capabilities": {"drop": ["ALL"]}}
    if spec.read_only_root:
        security["readOnlyRootFilesystem"] = True
    container: dict = {"name": CONTAINER_NAME, "image": spec.image}
    if spec.command:
        container["command"] = list(spec.command)
    if spec.args:
        container["args"] = list(spec.args)
    container["env"] = _container_env(spec)
    if spec.port:
        container["ports"] = [{"containerPort": spec.port, "name": "http"}]
        container["readinessProbe"] = make_readiness_probe()
    container["resources"] = _container_resources(spec)
    container["securityContext"] = security
    container["volumeMounts"] = _container_mounts(spec)
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


# A service's pod is Ready (listed in its Service's EndpointSlice, the only addresses the proxy dials) once
# its program accepts connections on the service port: a container that runs but is still starting (JupyterLab
# takes seconds to listen) shows the proxy's "starting" page instead of "cannot be reached". A TCP check, not
# an HTTP one: images answer their base path differently (a redirect, a sign-in page, 404 at the bare prefix).
READINESS_PERIOD_SECONDS = 2


def make_readiness_probe() -> dict:
    return {
        "tcpSocket": {"port": "http"},
        "periodSeconds": READINESS_PERIOD_SECONDS,
        "timeoutSeconds": 2,
        "successThreshold": 1,
        "failureThreshold": 3,
    }


def _read_only(obj: dict, read_only: bool) -> dict:
    if read_only:
        obj["readOnly"] = True
    return obj


def make_pod_template(spec: WorkloadSpec) -> dict:
    # Data loaders share batches through /dev/shm; the runtime default of 64 MiB is far too small.
    shm_limit = f"{max(64, pod_memory_mib(spec) // 2)}Mi"
    volumes: list[dict] = [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": shm_limit}}]
    if spec.read_only_root:
        volumes.append({"name": TMP_VOLUME, "emptyDir": {}})
    volumes += [make_volume(v) for v in spec.volumes]
    if spec.secrets:
        volumes.append(make_secrets_volume(spec.secrets))
    if spec.token_secret:
        volumes.append({"name": TOKEN_VOLUME, "secret": {"secretName": spec.token_secret, "defaultMode": 0o440}})
    if spec.kind == "service":  # SSH through the portal: jobs/kube/ssh_objects.py
        volumes.append(ssh_objects.keys_volume(spec.uid))
    pod: dict = {
        "restartPolicy": "Never" if spec.kind == "batch" else "Always",
        "nodeSelector": {spec.gpu_type.node_label_key: spec.gpu_type.node_label_value},
        "containers": [make_container(spec)],
        # A user's container has no business talking to the Kubernetes API as anyone.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": make_pod_security_context(spec),
        "terminationGracePeriodSeconds": spec.termination_grace_seconds,
    }
    if spec.avoid_nodes:
        pod["affinity"] = make_avoid_nodes_affinity(spec.avoid_nodes)
    if spec.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in spec.image_pull_secrets]
    pod["volumes"] = volumes
    return {"metadata": {"labels": labels(spec)}, "spec": pod}


def make_avoid_nodes_affinity(nodes: tuple[str, ...]) -> dict:
    """Keep the pod off these nodes (GPUs marked unhealthy) by their hostname label: the portal never
    taints or cordons Node objects, it only asks each new pod to stay away."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": sorted(nodes)}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def make_token_secret(spec: WorkloadSpec, token: str) -> dict:
    """The Secret that carries a workload's checkpoint token into its pods (the kubelet reads it; the
    engine writes it and never reads it back). One per workload, the same for every attempt."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": spec.token_secret, "namespace": spec.namespace, "labels": labels(spec)},
        "type": "Opaque",
        "stringData": {TOKEN_KEY: token},
    }


def make_pod_security_context(spec: WorkloadSpec) -> dict:
    """A fixed non-root uid, refused by the kubelet if the image would run as root anyway; fsGroup makes the
    workspace and dataset volumes writable for it. An admin-allowed root image keeps only seccomp."""
    seccomp = {"type": "RuntimeDefault"}
    if spec.run_as_root:
        return {"seccompProfile": seccomp}
    return {
        "runAsNonRoot": True,
        "runAsUser": USER_UID,
        "runAsGroup": USER_GID,
        "fsGroup": USER_GID,
        "seccompProfile": seccomp,
    }


def pod_cpu_millicores(spec: WorkloadSpec) -> int:
    return spec.cpu_millicores or spec.gpu_type.cpu_per_gpu_millicores * spec.gpu_count


def pod_memory_mib(spec: WorkloadSpec) -> int:
    return spec.memory_mib or spec.gpu_type.memory_per_gpu_mib * spec.gpu_count


def make_volume(volume: VolumeSpec) -> dict:
    if volume.claim_name:
        return {
            "name": volume.name,
            "persistentVolumeClaim": _read_only({"claimName": volume.claim_name}, volume.read_only),
        }
    return {
        "name": volume.name,
        "nfs": _read_only({"server": volume.nfs_server, "path": volume.nfs_path}, volume.read_only),
    }


def make_secrets_volume(refs: tuple[SecretRef, ...]) -> dict:
    """One read-only directory with a file per secret, named as the user named the secret."""
    return {
        "name": SECRETS_VOLUME,
        "projected": {
            "sources": [
                {"secret": {"name": ref.k8s_name, "items": [{"key": SECRET_KEY, "path": ref.name}]}} for ref in refs
            ]
        },
    }


def make_secret(*, namespace: str, name: str, value: str, team_slug: str, instance: str) -> k8s.V1Secret:
    """The Kubernetes Secret behind a stored secret (the only place its value is kept)."""
    return k8s.V1Secret(
        api_version="v1",
        kind="Secret",
        type="Opaque",
        metadata=k8s.V1ObjectMeta(
            name=name,
            namespace=namespace,
            labels={
                names.LABEL_MANAGED_BY: names.MANAGED_BY,
                names.LABEL_INSTANCE: names.label_value(instance),
                names.LABEL_TEAM: names.label_value(team_slug),
            },
        ),
        string_data={SECRET_KEY: value},
    )


def make_pull_secret(*, namespace: str, name: str, registry: str, username: str, password: str) -> k8s.V1Secret:
    """A private registry's pull credentials as the kubelet reads them (kubernetes.io/dockerconfigjson)."""
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    config = {"auths": {registry: {"username": username, "password": password, "auth": auth}}}
    return k8s.V1Secret(
        api_version="v1",
        kind="Secret",
        type="kubernetes.io/dockerconfigjson",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, labels={names.LABEL_MANAGED_BY: names.MANAGED_BY}),
        string_data={".dockerconfigjson": json.dumps(config, sort_keys=True)},
    )


def make_workspace_claim(
    *, namespace: str, name: str, size_gib: int, storage_class: str, team_slug: str, username: str, instance: str
) -> k8s.V1PersistentVolumeClaim:
    """A workspace: a claim that outlives every workload (nothing owns it; only an admin deletes it).

    ReadWriteMany so a user's notebook and jobs, or a team's pods, can mount it at once wherever they
    land; `username` is empty for the team's shared workspace.
    """
    labels = {
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_INSTANCE: names.label_value(instance),
        names.LABEL_TEAM: names.label_value(team_slug),
        names.LABEL_WORKSPACE: "home" if username else "team",
    }
    if username:
        labels[names.LABEL_USER] = names.label_value(username)
    return k8s.V1PersistentVolumeClaim(
        api_version="v1",
        kind="PersistentVolumeClaim",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, labels=labels),
        spec=k8s.V1PersistentVolumeClaimSpec(
            access_modes=["ReadWriteMany"],
            storage_class_name=storage_class,
            resources=k8s.V1VolumeResourceRequirements(requests={"storage": f"{size_gib}Gi"}),
        ),
    )


def _metadata(spec: WorkloadSpec) -> dict:
    return {"name": spec.object_name, "namespace": spec.namespace, "labels": labels(spec)}


def make_job(spec: WorkloadSpec) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(spec),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": spec.time_limit_seconds,
            "completions": 1,
            "parallelism": 1,
            "template": make_pod_template(spec),
        },
    }


def make_deployment(spec: WorkloadSpec) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(spec),
        "spec": {
            "replicas": 1,
            # Recreate: a restart never needs a second set of GPUs while the old pod drains.
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector(spec)},
            "template": make_pod_template(spec),
            "revisionHistoryLimit": 1,
        },
    }


def make_service(spec: WorkloadSpec) -> dict:
    if spec.port is None:
        raise ValueError("a service workload needs a port")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(spec),
        "spec": {
            "type": "ClusterIP",
            "selector": selector(spec),
            "ports": [{"name": "http", "port": spec.port, "targetPort": spec.port, "protocol": "TCP"}],
        },
    }


def make_objects(spec: WorkloadSpec) -> list[dict]:
    """A workload's objects as the API server takes them (JSON-ready dicts, see the module's docstring)."""
    if spec.kind == "batch":
        return [make_job(spec)]
    return [make_deployment(spec), make_service(spec)]


def make_namespace(name: str, *, team_slug: str, instance: str) -> k8s.V1Namespace:
    return k8s.V1Namespace(
        api_version="v1",
        kind="Namespace",
        metadata=k8s.V1ObjectMeta(
            name=name,
            labels={
                names.LABEL_MANAGED_BY: names.MANAGED_BY,
                names.LABEL_TEAM: names.label_value(team_slug),
                names.LABEL_INSTANCE: names.label_value(instance),
                **PSA_LABELS,
            },
        ),
    )


@dataclass(frozen=True)
class NetworkRules:
    """Who may reach a team's pods, and what they may reach (settings TEAM_INGRESS_* and TEAM_EGRESS_*)."""

    proxy_labels: dict[str, str]
    portal_namespace_labels: dict[str, str]
    egress_allow: tuple[str, ...] = ("0.0.0.0/0",)
    egress_deny: tuple[str, ...] = (METADATA_CIDR,)


def make_network_policy(namespace: str, rules: NetworkRules) -> k8s.V1NetworkPolicy:
    """Ingress only from the namespace itself and the portal's proxy; egress to DNS and the allowed CIDRs
    minus the denied ones (by default the metadata address and the private ranges cluster services use)."""
    proxy_peer = k8s.V1NetworkPolicyPeer(
        pod_selector=k8s.V1LabelSelector(match_labels=dict(rules.proxy_labels)),
        namespace_selector=k8s.V1LabelSelector(match_labels=dict(rules.portal_namespace_labels)),
    )
    # The metadata address is denied even when an admin's allow list would cover it.
    deny = sorted({*rules.egress_deny, METADATA_CIDR})
    egress_to = []
    for cidr in rules.egress_allow:
        inside = [d for d in deny if _cidr_within(d, cidr)]
        egress_to.append(k8s.V1NetworkPolicyPeer(ip_block=k8s.V1IPBlock(cidr=cidr, _except=inside or None)))
    dns_ports = [k8s.V1NetworkPolicyPort(port=53, protocol=p) for p in ("UDP", "TCP")]
    return k8s.V1NetworkPolicy(
        api_version="networking.k8s.io/v1",
        kind="NetworkPolicy",
        metadata=k8s.V1ObjectMeta(
            name=NETWORK_POLICY_NAME, namespace=namespace, labels={names.LABEL_MANAGED_BY: names.MANAGED_BY}
        ),
        spec=k8s.V1NetworkPolicySpec(
            pod_selector=k8s.V1LabelSelector(),
            policy_types=["Ingress", "Egress"],
            ingress=[
                k8s.V1NetworkPolicyIngressRule(
                    _from=[k8s.V1NetworkPolicyPeer(pod_selector=k8s.V1LabelSelector()), proxy_peer]
                )
            ],
            egress=[
                # Name resolution through the cluster DNS (kube-system), nothing else there.
                k8s.V1NetworkPolicyEgressRule(
                    to=[k8s.V1NetworkPolicyPeer(namespace_selector=k8s.V1LabelSelector())], ports=dns_ports
                ),
                k8s.V1NetworkPolicyEgressRule(to=[k8s.V1NetworkPolicyPeer(pod_selector=k8s.V1LabelSelector())]),
                *([k8s.V1NetworkPolicyEgressRule(to=egress_to)] if egress_to else []),
            ],
        ),
    )


def _cidr_within(inner: str, outer: str) -> bool:
    a, b = ipaddress.ip_network(inner, strict=False), ipaddress.ip_network(outer, strict=False)
    return a.version == b.version and a.subnet_of(b) and a != b


def make_limit_range(namespace: str, *, ephemeral_storage: str) -> k8s.V1LimitRange:
    """Every container in a team namespace gets an ephemeral-storage request and limit, so one pod cannot
    fill a node's disk (the portal's own pods set theirs explicitly; this covers anything else)."""
    return k8s.V1LimitRange(
        api_version="v1",
        kind="LimitRange",
        metadata=k8s.V1ObjectMeta(
            name=LIMIT_RANGE_NAME, namespace=namespace, labels={names.LABEL_MANAGED_BY: names.MANAGED_BY}
        ),
        spec=k8s.V1LimitRangeSpec(
            limits=[
                k8s.V1LimitRangeItem(
                    type="Container",
                    default={"ephemeral-storage": ephemeral_storage},
                    default_request={"ephemeral-storage": ephemeral_storage},
                    max={"ephemeral-storage": ephemeral_storage},
                )
            ]
        ),
    )


@dataclass(frozen=True)
class NamespaceCaps:
    """What a team namespace may request at once: GPUs per resource name, and CPU and memory in all."""

    gpus_by_resource: dict[str, int]
    cpu_millicores: int
    memory_mib: int


def make_resource_quota(namespace: str, caps: NamespaceCaps) -> k8s.V1ResourceQuota:
    """A backstop behind the portal's own admission: the namespace can never request more GPUs, CPU or
    memory than the team's quotas allow. Portal pods request CPU and memory and limit memory (no CPU
    limit: a pod may burst into idle cores), so those three are capped; a pod that leaves them out is
    refused by the API server, as the quota then requires them."""
    hard = {f"requests.{resource}": str(count) for resource, count in sorted(caps.gpus_by_resource.items())}
    hard["requests.cpu"] = f"{caps.cpu_millicores}m"
    hard["requests.memory"] = f"{caps.memory_mib}Mi"
    hard["limits.memory"] = f"{caps.memory_mib}Mi"
    return k8s.V1ResourceQuota(
        api_version="v1",
        kind="ResourceQuota",
        metadata=k8s.V1ObjectMeta(
            name=QUOTA_NAME, namespace=namespace, labels={names.LABEL_MANAGED_BY: names.MANAGED_BY}
        ),
        spec=k8s.V1ResourceQuotaSpec(hard=hard),
    )


def make_role_binding(
    namespace: str, *, cluster_role: str, service_account: str, name: str = ROLE_BINDING_NAME
) -> k8s.V1RoleBinding:
    """Grants one of the portal's service accounts one of its roles inside one team namespace."""
    sa_namespace, sa_name = service_account.split("/", 1)
    return k8s.V1RoleBinding(
        api_version="rbac.authorization.k8s.io/v1",
        kind="RoleBinding",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, labels={names.LABEL_MANAGED_BY: names.MANAGED_BY}),
        role_ref=k8s.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=cluster_role),
        subjects=[k8s.RbacV1Subject(kind="ServiceAccount", name=sa_name, namespace=sa_namespace)],
    )
