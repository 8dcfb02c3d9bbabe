"""What the engine benchmarks share: the engine running against the local cluster, ready before any timing."""

from __future__ import annotations

import math
import os
import re
import statistics
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.context import BenchContext


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def p95(values: list[float]) -> float:
    return percentile(values, 95)


def median(values: list[float]) -> float:
    return statistics.median(values)


def old_goal(name: str, value: float, relation: str, goal: float) -> str:
    """A `#` line saying whether a ratio met its old goal: issue 41 made the per-workload CPU budgets
    (bench_budgets) the bar; the ratios stay printed, honest, with their old goals."""
    met = value >= goal if relation == ">=" else value <= goal
    return f"# old goal {name} {relation} {goal} (no longer the bar): {'met' if met else 'not met'} ({value:.3f})"


def wait_until(predicate, timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(interval)


QUIET_CPU = 0.15  # CPU seconds per second, all of the run's processes together: a machine at rest
QUIET_WITHIN = 60.0


def quiet() -> float:
    """Wait until the run's processes (API server, etcd, engine, PostgreSQL, ...) are at rest, for two
    seconds in a row, or QUIET_WITHIN seconds have passed; returns the seconds waited. What a side left
    behind (the tracker and the worker recording ends, the controllers deleting) must not land in the next
    side's clock."""
    from benchmarks import cpu

    started = time.monotonic()
    calm = 0
    before = cpu.snapshot()
    while calm < 2 and time.monotonic() - started < QUIET_WITHIN:
        time.sleep(1.0)
        after = cpu.snapshot()
        calm = calm + 1 if sum(cpu.spent(before, after).values()) < QUIET_CPU else 0
        before = after
    return time.monotonic() - started


def worker_batches(log: Path, offset: int) -> str:
    """The worker's own per-batch profile lines ("submit batch: ...", jobs/services/cluster/object_creation.py)
    written since `offset`, summed: per created object, wall and worker-thread CPU per phase, SQL queries;
    and the tasks it ran meanwhile, by name (the sweep's resubmissions counted)."""
    wall: dict[str, float] = {}
    cpu_s: dict[str, float] = {}
    tasks: dict[str, int] = {}
    created = queries = batches = resubmitted = 0
    with log.open("rb") as f:
        f.seek(offset)
        for raw in f:
            line = raw.decode(errors="replace")
            task = re.search(r"Task ([\w.]+)\[[^\]]*\] (succeeded|raised|retry)", line)
            if task:
                tasks[task[1].rsplit(".", 1)[-1]] = tasks.get(task[1].rsplit(".", 1)[-1], 0) + 1
                resubmitted += sum(int(v) for v in re.findall(r"'resubmitted': (\d+)", line))
            match = re.search(r"submit batch: (\d+) of \d+ created; (\d+) SQL queries; s wall/cpu: (.*)$", line)
            if not match:
                continue
            batches += 1
            created += int(match[1])
            queries += int(match[2])
            for name, w, c in re.findall(r"(\w+) ([\d.]+)/([\d.]+)", match[3]):
                wall[name] = wall.get(name, 0.0) + float(w)
                cpu_s[name] = cpu_s.get(name, 0.0) + float(c)
    if not created:
        return "no batch lines"
    phases = ", ".join(f"{name} {1000 * wall[name] / created:.2f}/{1000 * cpu_s[name] / created:.2f}" for name in wall)
    ran = ", ".join(f"{name} {count}" for name, count in sorted(tasks.items(), key=lambda kv: -kv[1]))
    return (
        f"{batches} batches, {created} created, {queries / created:.2f} SQL queries per Job; "
        f"ms per Job wall/thread-cpu: {phases}; tasks: {ran}; the sweep handed over {resubmitted} again"
    )


class Engine:
    """Cluster + the portal's identity + worker/beat/tracker processes on the bench database."""

    def __init__(self, ctx: BenchContext, *, start_processes: bool = True, fast_intervals: bool = False) -> None:
        """`fast_intervals`: the periodic tasks (admission sweep, limits, resync, ...) at the test suite's
        intervals (devtools.engine.FAST_INTERVALS: every 1-2 s) instead of the settings' defaults, which
        are what a deployment runs (every 10-30 s). Only a part that times one of those periodic tasks
        should ask for it: run every second beside a throughput measurement, they are load production
        never sees."""
        from django.conf import settings
        from django.db import connection
        from kubernetes import config

        from devtools.engine import FAST_INTERVALS, EngineProcesses, install_identity
        from jobs.kube import client as kube
        from jobs.services.provisioning import forget_namespaces

        self.ctx = ctx
        cluster = ctx.cluster()
        self.admin = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        self.identity = install_identity(
            admin_api=self.admin,
            server=cluster.server,
            admin_kubeconfig=Path(cluster.kubeconfig),
            directory=ctx.work_dir,
        )
        intervals = dict(FAST_INTERVALS) if fast_intervals else {}
        for key, value in {**self.identity.settings(), **{k: int(v) for k, v in intervals.items()}}.items():
            setattr(settings, key, value)
        kube.reset()
        forget_namespaces()
        s = connection.settings_dict
        env = {
            **os.environ,
            **self.identity.env(),
            **intervals,
            "DATABASE_URL": f"postgres://{s['USER'] or 'postgres'}:{s['PASSWORD'] or ''}@{s['HOST']}:{s['PORT']}/{s['NAME']}",
            "DEBUG": "0",
            "SECRET_KEY": "bench-secret-key",
            "PYTHONUNBUFFERED": "1",
        }
        self.log_dir = ctx.work_dir / "engine-logs"
        self.log_dir.mkdir(exist_ok=True)
        self.processes = EngineProcesses(env, self.log_dir)
        self.seeded = False
        if start_processes:  # without: the caller runs the engine's services in process (profiling)
            self.processes.start_all()
            self.ready()

    def seed(self) -> None:
        """The demo GPU types, with every type's nodes in the portal's inventory (ready, schedulable).

        Submissions are validated against the inventory: timing before it lists every pool's nodes would
        measure refusals ("No ready ... node"), which is how `make bench` used to fail.
        """
        from jobs.models import GpuType
        from jobs.selectors import cluster_capacity
        from jobs.services.cluster.inventory import inventory_sync
        from jobs.services.seeding import DEMO, apply_seed

        if self.seeded:
            return
        apply_seed({"gpu_types": DEMO["gpu_types"], "allowed_registries": ["docker.io"]})
        slugs = [t["slug"] for t in DEMO["gpu_types"]]
        deadline = time.monotonic() + 120
        while True:
            inventory_sync()
            types = list(GpuType.objects.filter(slug__in=slugs))
            capacity = cluster_capacity(types)
            missing = [t.slug for t in types if capacity[t.id].largest_node == 0]
            if not missing:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the inventory lists no ready node of GPU type(s) {', '.join(missing)}")
            time.sleep(0.5)
        self.seeded = True

    def ready(self) -> None:
        """Before any timing: one workload end to end (worker created its Job, tracker saw it Running)."""
        from jobs.models import State, Workload
        from jobs.services.submission.intake import workload_submit

        self.seed()
        team, user = self.team()
        workload = workload_submit(
            team=team, owner=user, spec={"image": "ubuntu", "gpu_type": "k2", "env": {"SIM_RUN_SECONDS": "1"}}
        )
        wait_until(
            lambda: Workload.objects.filter(id=workload.id, state=State.SUCCEEDED).exists(),
            180,
            "the engine did not take a warm-up workload to SUCCEEDED (worker or tracker not running?)",
            interval=0.2,
        )

    def team(self, quota: int = 100_000, *, budget: Any = None):
        from django.contrib.auth import get_user_model

        from identity.models import Membership
        from jobs.models import GpuType, Quota, Team

        self.seed()
        suffix = uuid.uuid4().hex[:8]
        team = Team.objects.create(slug=f"bench-{suffix}", name=f"Bench {suffix}", monthly_gpu_hour_budget=budget)
        user = get_user_model().objects.create(username=f"bench-{suffix}")
        Membership.objects.create(team=team, user=user)
        Quota.objects.bulk_create(Quota(team=team, gpu_type=t, max_gpus=quota) for t in GpuType.objects.all())
        return team, user

    def delete_namespace(self, namespace: str) -> None:
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        try:
            k8s.CoreV1Api(self.admin).delete_namespace(namespace, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise

    def settle(self, namespace: str, *, team: Any = None, timeout: float = 300) -> None:
        """After a side deleted its namespace: wait until the API server has removed it (its Jobs and pods
        gone) and, for a portal side, until the engine has recorded the end of every workload of `team`,
        so that the next side starts on a machine as quiet as this one did."""
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        from jobs.models import State, Workload

        def gone() -> bool:
            try:
                k8s.CoreV1Api(self.admin).read_namespace(namespace)
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            return False

        wait_until(gone, timeout, f"the namespace {namespace} was not removed", interval=0.5)
        if team is not None:
            wait_until(
                lambda: not Workload.objects.filter(team=team).exclude(state__in=State.final()).exists(),
                timeout,
                f"the engine did not record the end of every workload of {team.slug}",
                interval=0.5,
            )
        quiet()

    def close(self) -> None:
        self.processes.stop_all()


def apiserver_requests(admin_api: Any) -> dict[tuple[str, str], float]:
    """The API server's own count of requests served so far, by verb and resource (its /metrics,
    `apiserver_request_total`), to compare two moments: which calls a side made, beside its CPU."""
    configuration = admin_api.configuration
    token = configuration.get_api_key_with_prefix("authorization") or configuration.get_api_key_with_prefix(
        "BearerToken"
    )
    response = admin_api.rest_client.pool_manager.request(
        "GET", f"{configuration.host}/metrics", headers={"Authorization": token} if token else {}, retries=False
    )
    if response.status >= 400:
        raise RuntimeError(f"GET /metrics: HTTP {response.status}")
    totals: dict[tuple[str, str], float] = {}
    for line in response.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line[: line.rindex("}")]))
        key = (labels.get("verb", "?"), labels.get("resource", "?"))
        totals[key] = totals.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return totals


def requests_per_object(before: dict, after: dict, n: int) -> str:
    """The calls made between two `apiserver_requests` readings, per created object, most first."""
    spent = {key: after[key] - before.get(key, 0.0) for key in after}
    top = sorted(((v, k) for k, v in spent.items() if v > 0), reverse=True)
    return ", ".join(f"{verb} {resource} {count / n:.3f}" for count, (verb, resource) in top[:12]) or "none"
