"""Gang job benchmarks (issue 36).

gang_admission_10k_queued_ms  one `admit_all` pass with 10,000 queued over 10 teams x 3 GPU types, a quarter
                              of them gangs of 2-8 nodes (1-4 GPUs per node), 3,000 running; median of 5
gang_partial_hold_max_s       the longest any rank of a gang that cannot be placed whole held GPUs while
                              another rank could not be placed: from its pod's binding to a node until
                              the last of its attempt's pods is gone from the API server (one p100 node's
                              GPUs taken outside the portal; the start window is 15 s here, so <= 25 s)
gang_start_p95_s              a gang of 2 nodes x 2 p100 (or 2 x 4 k2), submitted -> RUNNING (every rank
                              running, as the portal records it), on simulated nodes; 12 gangs, 2 at once

The cluster parts run the engine (worker, beat, tracker) at the test suite's intervals: they time the
start-window sweep (every 2 s) and need the 15 s window to play out several times.
"""

from __future__ import annotations

import os
import random
import statistics
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from benchmarks.context import BenchContext

FIGURES = (
    "gang_admission_10k_queued_ms",
    "gang_admission_10k_admitted_per_pass",
    "gang_window_s",
    "gang_partial_hold_samples",
    "gang_partial_hold_max_s",
    "gang_start_samples",
    "gang_start_p50_s",
    "gang_start_p95_s",
)
HOLD_RELEASES = 3
START_ROUNDS = 6


def admission_10k() -> Iterator[tuple[str, float]]:
    from django.contrib.auth import get_user_model

    from identity.models import Membership
    from jobs.models import Cohort, GpuType, Quota, State, Team, Workload
    from jobs.services.queue.admission import admit_all
    from portal.celery import app

    run = uuid.uuid4().hex[:6]
    types = [
        GpuType.objects.create(slug=f"gang-{run}-{i}", display_name=f"Gang {run} {i}", node_label_value=f"g-{run}-{i}")
        for i in range(3)
    ]
    cohort = Cohort.objects.create(name=f"Gang {run}")
    teams = [
        Team.objects.create(
            slug=f"gang-{run}-{i}",
            name=f"Gang {run} {i}",
            monthly_gpu_hour_budget=100_000,
            cohort=cohort if i < 5 else None,
            fair_share=i in (0, 5),
        )
        for i in range(10)
    ]
    users = [get_user_model().objects.create(username=f"gang-{run}-{u}") for u in range(4)]
    Membership.objects.bulk_create(Membership(team=t, user=u) for t in teams for u in users)
    Quota.objects.bulk_create(
        Quota(team=t, gpu_type=g, max_gpus=140, borrowing_limit=8 if t.cohort_id else 0) for t in teams for g in types
    )
    rng = random.Random(36)
    now = datetime.now(UTC)
    began = now - timedelta(hours=1)
    Workload.objects.bulk_create(
        (
            Workload(team=t, owner=users[i % 4], name=f"r{i}", kind="batch", image="ubuntu", gpu_type=g, gpu_count=1,
                     time_limit_seconds=86400, state=State.RUNNING, borrowed=bool(t.cohort_id) and i < 4,
                     created_at=began, admitted_at=began, submitted_at=began, started_at=began + timedelta(seconds=i))
            for t in teams for g in types for i in range(100)
        ),
        batch_size=2000,
    )  # fmt: skip

    def queued(i: int) -> Workload:
        nodes, per_node = (rng.randint(2, 8), rng.choice([1, 2, 4])) if i % 4 == 0 else (1, rng.choice([1, 2, 4, 8]))
        return Workload(
            team=teams[i % 10], owner=users[(i // 10) % 4], name=f"q{i}", kind="batch", image="ubuntu",
            gpu_type=types[(i // 40) % 3], gpu_count=nodes * per_node, nodes=nodes, command=["python"],
            time_limit_seconds=3600, priority=rng.choice([0, 0, 0, 10]), created_at=now - timedelta(seconds=10_000 - i),
        )  # fmt: skip

    Workload.objects.bulk_create((queued(i) for i in range(10_000)), batch_size=2000)
    timings, admitted = [], []
    try:
        for _ in range(5):
            started = time.perf_counter()
            admitted.append(admit_all())
            timings.append((time.perf_counter() - started) * 1000)
            Workload.objects.filter(team__in=teams, state=State.SUBMITTING).update(state=State.QUEUED)
    finally:
        Workload.objects.filter(team__in=teams).delete()
        app.control.purge()  # the passes asked for Kubernetes objects; nobody is to create them
    print(f"# gang admission passes (ms): {' '.join(f'{t:.0f}' for t in timings)}", flush=True)
    yield "gang_admission_10k_queued_ms", round(statistics.median(timings), 1)
    yield "gang_admission_10k_admitted_per_pass", statistics.median(admitted)


def on_cluster(ctx: BenchContext) -> Iterator[tuple[str, float]]:
    from benchmarks.engine import Engine

    engine = Engine(ctx, fast_intervals=True)
    try:
        yield from partial_hold(engine)
        yield from gang_starts(engine)
    finally:
        engine.close()


def _spec(gpu_type: str, per_node: int) -> dict:
    return {"image": "ubuntu", "gpu_type": gpu_type, "gpu_count": per_node, "nodes": 2, "command": ["python"],
            "env": {"SIM_RUN_SECONDS": "forever"}}  # fmt: skip


def partial_hold(engine) -> Iterator[tuple[str, float]]:
    """A gang that cannot be placed whole, released and requeued HOLD_RELEASES times: for each attempt,
    the seconds from its first pod bound to a node until none of its pods is left."""
    from django.conf import settings
    from kubernetes import client as k8s

    from benchmarks.engine import wait_until
    from jobs.kube import names
    from jobs.models import Workload
    from jobs.services.cancel import workload_cancel
    from jobs.services.submission.intake import workload_submit

    team, user = engine.team(quota=8)
    core = k8s.CoreV1Api(engine.admin)
    hog = f"gang-hog-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod(
        "default",
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name=hog),
            spec=k8s.V1PodSpec(
                node_name="gpu-p100-1", restart_policy="Always",
                containers=[k8s.V1Container(name="hog", image="hog:1",
                                            resources=k8s.V1ResourceRequirements(limits={"nvidia.com/gpu": "4"}))],
            ),
        ),
    )  # fmt: skip
    holds: list[float] = []
    try:
        workload = workload_submit(team=team, owner=user, spec=_spec("p100", 2))
        bound: dict[int, float] = {}  # attempt -> when its first pod was seen on a node
        deadline = time.monotonic() + HOLD_RELEASES * (settings.GANG_START_WINDOW_SECONDS + 60)
        while len(holds) < HOLD_RELEASES and time.monotonic() < deadline:
            pods = core.list_namespaced_pod(team.namespace, label_selector=f"{names.LABEL_WORKLOAD}={workload.uid}")
            on_node: dict[int, int] = {}
            for pod in pods.items:
                attempt = int(pod.metadata.labels[names.LABEL_GANG].rsplit("-", 1)[1])
                if pod.spec.node_name:
                    on_node[attempt] = on_node.get(attempt, 0) + 1
            now = time.monotonic()
            for attempt in on_node:
                bound.setdefault(attempt, now)
            for attempt, since in list(bound.items()):
                if attempt not in on_node:  # every pod of that attempt gone
                    holds.append(now - since)
                    del bound[attempt]
            time.sleep(0.2)
        workload_cancel(workload=Workload.objects.get(id=workload.id), by=user)
        wait_until(lambda: not core.list_namespaced_pod(team.namespace).items, 120, "the gang's pods did not go")
    finally:
        core.delete_namespaced_pod(hog, "default", grace_period_seconds=0)
    print(f"# gang partial holds (s): {' '.join(f'{h:.1f}' for h in holds)}", flush=True)
    yield "gang_window_s", settings.GANG_START_WINDOW_SECONDS
    yield "gang_partial_hold_samples", len(holds)
    yield "gang_partial_hold_max_s", round(max(holds), 1) if len(holds) == HOLD_RELEASES else float("nan")


def gang_starts(engine) -> Iterator[tuple[str, float]]:
    """Two gangs at once (each node then holds one rank of each), submitted -> RUNNING."""
    from kubernetes import client as k8s

    from benchmarks.engine import wait_until
    from jobs.models import State, Workload
    from jobs.services.cancel import workload_cancel
    from jobs.services.submission.intake import workload_submit

    team, user = engine.team(quota=16)
    core = k8s.CoreV1Api(engine.admin)
    times: list[float] = []
    for round_ in range(START_ROUNDS):
        gpu_type, per_node = ("p100", 2) if round_ % 2 == 0 else ("k2", 4)
        submitted = time.monotonic()
        ids = [workload_submit(team=team, owner=user, spec=_spec(gpu_type, per_node)).id for _ in range(2)]
        started: dict[int, float] = {}

        def all_running(ids: list[int] = ids, started: dict[int, float] = started) -> bool:
            for workload_id in Workload.objects.filter(id__in=ids, state=State.RUNNING).values_list("id", flat=True):
                started.setdefault(workload_id, time.monotonic())
            return len(started) == len(ids)

        wait_until(all_running, 180, "gangs did not start", interval=0.05)
        times += [t - submitted for t in started.values()]
        for workload in Workload.objects.filter(id__in=ids):
            workload_cancel(workload=workload, by=user)
        wait_until(lambda: not core.list_namespaced_pod(team.namespace).items, 120, "the gangs' pods did not go")
    ordered = sorted(times)
    yield "gang_start_samples", len(times)
    yield "gang_start_p50_s", round(statistics.median(ordered), 2)
    yield "gang_start_p95_s", round(ordered[max(0, int(0.95 * len(ordered) + 0.999) - 1)], 2)


PARTS = {
    "admission": FIGURES[:2],
    "cluster": FIGURES[2:],
}


def selected_parts() -> list[str]:
    """BENCH_GANG_PARTS=admission (or cluster) runs one part; both by default."""
    wanted = [p for p in os.environ.get("BENCH_GANG_PARTS", "").split(",") if p]
    return [p for p in PARTS if not wanted or p in wanted]


def expected() -> list[str]:
    return [figure for part in selected_parts() for figure in PARTS[part]]


def run(ctx: BenchContext) -> Iterator[tuple[str, float]]:
    ctx.django()
    parts = selected_parts()
    if "admission" in parts:
        yield from admission_10k()
    if "cluster" in parts:
        yield from on_cluster(ctx)
