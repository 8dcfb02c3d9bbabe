"""Real pods: how long a batch job submitted through the portal takes to run its container on a real node
(kubelet + containerd + runc, GPUs from our device plugin; localcluster/realnode.py).

Lines printed:
  real_pod_start_p50_s, real_pod_start_p95_s
      the portal's intake (`workload_submit`, what `POST /api/v1/workloads/` calls) called → the container's
      start as Kubernetes reports it (`containerStatuses[].state.*.startedAt` of the job's pod, read from the
      API server), over 20 batch jobs of 1 GPU on the two real nodes; the engine's worker, beat and tracker
      run at a deployment's intervals. Kubernetes stamps startedAt to the second, so each sample is rounded
      down to a whole second by the API server (the submission clock is exact): read the figures to ±1 s.
  real_pod_start_jobs_ok
      jobs whose Job the API server reports succeeded (status.succeeded == 1): 20, or the run fails.
Jobs go in waves of 8 (4 per node: each node advertises 4 GPUs), the next wave once the last has ended, so
no sample includes time queued for a GPU. The real nodes join the run's cluster for this module only and
leave it (Node objects deleted) when it ends; the images are built first if the cache lacks them.
"""

from __future__ import annotations

import contextlib
import sys
import time
from datetime import datetime

from benchmarks.engine import Engine, median, percentile, wait_until

FIGURES = ("real_pod_start_p50_s", "real_pod_start_p95_s", "real_pod_start_jobs_ok")
JOBS = 20
WAVE_PER_NODE = 4
NODE_TYPES = ("real-p100", "real-k2")


def _log(line: str) -> None:
    print(f"# [real nodes] {line}", file=sys.stderr, flush=True)


def _start_real_nodes(cluster, image_names: tuple[str, ...] = ("python",)):
    from localcluster import images
    from localcluster.realnode import RealNodes, check_host

    check_host()  # raises ClusterError naming what this machine lacks
    paths = images.ensure(["sandbox", *image_names], progress=_log)
    nodes = RealNodes(
        cluster.state_dir / "bench-real",
        pki=cluster.pki,
        server=cluster.server,
        token=cluster.admin_token,
        count=2,
        sandbox_image=images.IMAGES["sandbox"],
        images=[paths["sandbox"], *(paths[name] for name in image_names)],
        log=_log,
    )
    try:
        nodes.prepare()
        nodes.start(time.monotonic() + 300)
    except Exception:
        nodes.stop()
        raise
    return nodes


def _stop_real_nodes(nodes) -> None:
    nodes.stop()
    for name in nodes.names:  # no NotReady nodes left for the modules after this one
        with contextlib.suppress(Exception):
            nodes._api("DELETE", f"/api/v1/nodes/{name}", None)


def _container_start(pod) -> datetime | None:
    for status in pod.status.container_statuses or []:
        state = status.state
        for phase in (state.running, state.terminated):
            if phase is not None and phase.started_at is not None:
                return phase.started_at
    return None


def run(ctx):
    ctx.django()
    from kubernetes import client as k8s

    from jobs.models import State, Workload
    from jobs.services.seeding import apply_seed
    from jobs.services.submission.intake import workload_submit
    from localcluster.images import IMAGES, catalog_seed

    engine = Engine(ctx)
    nodes = None
    try:
        cluster = ctx.cluster()
        if getattr(cluster, "real", None) is None:  # GPUPORTAL_REAL_NODES: the run's cluster has them already
            nodes = _start_real_nodes(cluster)
        apply_seed(catalog_seed())
        team, user = engine.team()  # a quota on every GPU type, the real nodes' included
        wait_until(_real_nodes_listed, 120, "the inventory does not list the real nodes' GPUs", interval=1.0)
        core, batch = k8s.CoreV1Api(engine.admin), k8s.BatchV1Api(engine.admin)
        samples: list[float] = []
        ok = 0
        left = JOBS
        while left:
            wave = []
            for i in range(min(left, WAVE_PER_NODE * len(NODE_TYPES))):
                spec = {
                    "image": IMAGES["python"],
                    "gpu_type": NODE_TYPES[i % len(NODE_TYPES)],
                    "gpu_count": 1,
                    "command": ["python", "-c", "print('started')"],
                }
                submitted = time.time()
                wave.append((workload_submit(team=team, owner=user, spec=spec), submitted))
            left -= len(wave)
            ids = [w.id for w, _ in wave]
            wait_until(
                lambda ids=ids: Workload.objects.filter(id__in=ids, state__in=State.final()).count() == len(ids),
                600,
                "a wave of real batch jobs did not end within 600 s",
                interval=0.5,
            )
            for workload, submitted in wave:
                workload.refresh_from_db()
                job = batch.read_namespaced_job(workload.k8s_name, workload.namespace)
                if (job.status.succeeded or 0) != 1:
                    raise RuntimeError(
                        f"{workload.name}: the API server reports its Job not succeeded ({workload.message})"
                    )
                ok += 1
                pods = core.list_namespaced_pod(workload.namespace, label_selector=f"job-name={workload.k8s_name}")
                started = min(filter(None, (_container_start(p) for p in pods.items)), default=None)
                if started is None:
                    raise RuntimeError(f"{workload.name}: no container start in its pod's status")
                samples.append(max(0.0, started.timestamp() - submitted))
        print(f"# real_pod_start samples (s): {' '.join(f'{s:.1f}' for s in samples)}", flush=True)
        yield "real_pod_start_p50_s", median(samples)
        yield "real_pod_start_p95_s", percentile(samples, 95)
        yield "real_pod_start_jobs_ok", ok
    finally:
        if nodes is not None:
            _stop_real_nodes(nodes)
        engine.close()


def _real_nodes_listed() -> bool:
    """Whether the portal's inventory (read again now) lists both real nodes with their 4 GPUs each."""
    from jobs.models import GpuType
    from jobs.selectors import cluster_capacity
    from jobs.services.cluster.inventory import inventory_sync

    inventory_sync()
    types = list(GpuType.objects.filter(slug__in=NODE_TYPES))
    capacity = cluster_capacity(types)
    return len(types) == len(NODE_TYPES) and all(capacity[t.id].largest_node >= WAVE_PER_NODE for t in types)
