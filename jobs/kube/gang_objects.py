"""A gang job's Kubernetes objects: one Job per rank, made together, one rank per node (pure functions).

Kubernetes 1.20 has neither Indexed Jobs (1.21) nor JobSet, and a single Job with `parallelism: N` gives
its pods no rank and replaces a failed one on its own. So each rank is its own Job (`backoffLimit: 0`,
`restartPolicy: Never`): its name and its `rank` label say which rank it is, it fails alone so the portal
can name the rank, and the portal (not a controller) decides the gang's one state. All ranks of one
attempt wear the gang label; a required pod anti-affinity on it keeps two ranks off one node, and the
admin's topology label, when the gang asks for it, becomes a pod affinity on the same label (required:
every rank in rank 0's zone or rack; preferred: the scheduler tries).

How the ranks find rank 0 (MASTER_ADDR):
- With cluster DNS (setting CLUSTER_DNS), rank 0 gets `hostname`/`subdomain` under a headless Service
  and every rank is told its stable name.
- Without it (the local cluster has no DNS and no kube-proxy) rank 0 reads its own pod IP from the
  downward API, and the other ranks start through a fixed wrapper: it waits for the portal to write rank
  0's pod IP into a pod annotation, which the kubelet copies into a downward-API file, then exports
  MASTER_ADDR and execs the user's command, which it receives as arguments (never pasted into a shell
  string). The wrapper needs only /bin/sh in the image.
"""

from __future__ import annotations

from jobs.kube import names
from jobs.kube.objects import GangSpec, WorkloadSpec, labels, make_objects, make_pod_template

GANG_VOLUME = "gang"
GANG_DIR = "/etc/gpuportal/gang"
MASTER_ADDR_FILE = "master-addr"
RANK0_HOSTNAME = "rank-0"
# Exit code of a rank that gave up waiting for rank 0's address (EX_SOFTWARE is 70: BSD's sysexits).
NO_MASTER_EXIT = 70

# The fixed entrypoint of ranks > 0 without cluster DNS. "$@" is the user's command and arguments, passed
# as separate arguments after the script: the shell never parses them.
WAIT_FOR_MASTER = f"""\
f={GANG_DIR}/{MASTER_ADDR_FILE}
waited=0
until [ -s "$f" ]; do
  if [ "$waited" -ge "$GPUPORTAL_GANG_WAIT_SECONDS" ]; then
    echo "gpuportal: rank $NODE_RANK gave up waiting for rank 0's address after $waited s" >&2
    exit {NO_MASTER_EXIT}
  fi
  sleep 1
  waited=$((waited + 1))
done
MASTER_ADDR=$(cat "$f")
export MASTER_ADDR
echo "gpuportal: rank $NODE_RANK of $WORLD_SIZE; rank 0 is at $MASTER_ADDR:$MASTER_PORT" >&2
exec "$@"
"""


def render(spec: WorkloadSpec) -> list[dict]:
    """A workload's objects: a gang's ranks (and Service) when it is one, else the usual ones."""
    if spec.kind == "batch" and spec.gang is not None and spec.gang.nodes > 1:
        return make_gang_objects(spec)
    return make_objects(spec)


def rank_job_names(spec: WorkloadSpec) -> list[str]:
    gang = _gang(spec)
    return [names.rank_name(spec.name, spec.uid, spec.attempt, rank) for rank in range(gang.nodes)]


def master_service_name(spec: WorkloadSpec) -> str:
    return spec.object_name


def gang_labels(spec: WorkloadSpec, rank: int) -> dict[str, str]:
    return {names.LABEL_GANG: names.gang_label(spec.uid, spec.attempt), names.LABEL_RANK: str(rank)}


def make_gang_objects(spec: WorkloadSpec) -> list[dict]:
    """The headless Service (cluster DNS only), then one Job per rank, rank 0 first."""
    gang = _gang(spec)
    made: list[dict] = []
    if gang.cluster_dns:
        made.append(make_master_service(spec))
    made += [make_rank_job(spec, rank) for rank in range(gang.nodes)]
    return made


def make_master_service(spec: WorkloadSpec) -> dict:
    gang = _gang(spec)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": master_service_name(spec), "namespace": spec.namespace, "labels": _labels(spec)},
        "spec": {
            "clusterIP": "None",
            # Rank 0's name resolves before it is ready: the others connect while it starts.
            "publishNotReadyAddresses": True,
            "selector": {names.LABEL_GANG: names.gang_label(spec.uid, spec.attempt), names.LABEL_RANK: "0"},
            "ports": [{"name": "master", "port": gang.master_port, "targetPort": gang.master_port, "protocol": "TCP"}],
        },
    }


def make_rank_job(spec: WorkloadSpec, rank: int) -> dict:
    template = make_pod_template(spec)
    template["metadata"]["labels"].update(gang_labels(spec, rank))
    pod = template["spec"]
    # Beside whatever the pod template asks already (nodes whose GPUs are marked unhealthy are avoided).
    pod["affinity"] = {**pod.get("affinity", {}), **make_affinity(spec)}
    container = pod["containers"][0]
    container["env"] = [*container["env"], *make_rank_env(spec, rank)]
    gang = _gang(spec)
    if gang.cluster_dns:
        if rank == 0:
            pod["hostname"] = RANK0_HOSTNAME
            pod["subdomain"] = master_service_name(spec)
    elif rank > 0:
        user_command = [*container.pop("command", []), *container.pop("args", [])]
        container["command"] = ["/bin/sh", "-c", WAIT_FOR_MASTER, "gpuportal-rank"]
        container["args"] = user_command
        container["volumeMounts"] = [
            *container["volumeMounts"],
            {"name": GANG_VOLUME, "mountPath": GANG_DIR, "readOnly": True},
        ]
        pod["volumes"] = [*pod["volumes"], make_master_addr_volume()]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": names.rank_name(spec.name, spec.uid, spec.attempt, rank),
            "namespace": spec.namespace,
            "labels": {**_labels(spec), **gang_labels(spec, rank)},
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": spec.time_limit_seconds,
            "completions": 1,
            "parallelism": 1,
            "template": template,
        },
    }


def make_affinity(spec: WorkloadSpec) -> dict:
    """One rank per node (required), and the topology label shared, when the gang asked for it."""
    gang = _gang(spec)
    own = {"labelSelector": {"matchLabels": {names.LABEL_GANG: names.gang_label(spec.uid, spec.attempt)}}}
    affinity: dict = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{**own, "topologyKey": "kubernetes.io/hostname"}]
        }
    }
    if gang.topology_key:
        term = {**own, "topologyKey": gang.topology_key}
        if gang.topology_required:
            # The first rank placed goes anywhere the label exists (a pod may match its own affinity);
            # the others follow it into the same zone or rack.
            affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        else:
            affinity["podAffinity"] = {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
            }
    return affinity


def make_rank_env(spec: WorkloadSpec, rank: int) -> list[dict]:
    """torchrun's variables and the portal's own names for them."""
    gang = _gang(spec)
    values = {
        "MASTER_PORT": str(gang.master_port),
        "WORLD_SIZE": str(gang.nodes),
        "NODE_RANK": str(rank),
        "NPROC_PER_NODE": str(spec.gpu_count),
        "GPUPORTAL_NODES": str(gang.nodes),
        "GPUPORTAL_NODE_RANK": str(rank),
        "GPUPORTAL_GPUS_PER_NODE": str(spec.gpu_count),
        "GPUPORTAL_GANG": names.gang_label(spec.uid, spec.attempt),
        "GPUPORTAL_GANG_WAIT_SECONDS": str(gang.wait_seconds),
    }
    env = [{"name": name, "value": value} for name, value in values.items()]
    if gang.cluster_dns:
        address = f"{RANK0_HOSTNAME}.{master_service_name(spec)}.{spec.namespace}.svc"
        env.append({"name": "MASTER_ADDR", "value": address})
    elif rank == 0:
        env.append({"name": "MASTER_ADDR", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    env.append({"name": "GPUPORTAL_MASTER_ADDR_FROM", "value": "dns" if gang.cluster_dns else "pod-ip"})
    return env


def make_master_addr_volume() -> dict:
    """Rank 0's address as a file, from an annotation the portal writes on the pod (empty until then;
    the kubelet refreshes the file when the annotation changes)."""
    field = f"metadata.annotations['{names.ANNOTATION_MASTER_ADDR}']"
    return {
        "name": GANG_VOLUME,
        "downwardAPI": {"items": [{"path": MASTER_ADDR_FILE, "fieldRef": {"fieldPath": field}}]},
    }


def _labels(spec: WorkloadSpec) -> dict[str, str]:
    return labels(spec)


def _gang(spec: WorkloadSpec) -> GangSpec:
    if spec.gang is None:
        raise ValueError("not a gang job")
    return spec.gang
