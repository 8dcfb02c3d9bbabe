"""Workload engine benchmarks (issue 3). Every ratio is taken against a baseline run side by side.

submit_throughput_ratio    portal (submit service -> Job created) / raw kubernetes-client creates, same API server
tracking_lag_p50_ms/p95_ms pod phase change (seen by our own watch) -> workload state recorded by the tracker
admission_10k_queued_ms    one admission pass with 10,000 queued workloads
quota_overadmissions       GPUs held beyond the quota after 50 concurrent submissions + admissions
crash_duplicates/_lost     kill -9 of the worker at random points during 200 submissions
usage_report_1m_ms         a month's report by team and GPU type over 1,000,000 workloads (with the roll-up),
                           beside usage_report_1m_live_ms (the same report computed from the workloads table)
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

from benchmarks.context import BenchContext


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


class Engine:
    """Cluster + the portal's identity + worker/beat/tracker processes on the bench database."""

    def __init__(self, ctx: BenchContext) -> None:
        from django.conf import settings
        from django.db import connection
        from kubernetes import config

        from devtools.engine import FAST_INTERVALS, EngineProcesses, install_identity
        from jobs.kube import client as kube
        from jobs.services.submission import forget_namespaces

        cluster = ctx.cluster()
        self.admin = config.new_client_from_config(config_file=str(cluster.kubeconfig))
        self.identity = install_identity(
            admin_api=self.admin,
            server=cluster.server,
            admin_kubeconfig=Path(cluster.kubeconfig),
            directory=ctx.work_dir,
        )
        for key, value in {**self.identity.settings(), **{k: int(v) for k, v in FAST_INTERVALS.items()}}.items():
            setattr(settings, key, value)
        kube.reset()
        forget_namespaces()
        s = connection.settings_dict
        env = {
            **os.environ,
            **self.identity.env(),
            **FAST_INTERVALS,
            "DATABASE_URL": f"postgres://{s['USER'] or 'postgres'}:{s['PASSWORD'] or ''}@{s['HOST']}:{s['PORT']}/{s['NAME']}",
            "DEBUG": "0",
            "SECRET_KEY": "bench-secret-key",
            "PYTHONUNBUFFERED": "1",
        }
        log_dir = ctx.work_dir / "engine-logs"
        log_dir.mkdir(exist_ok=True)
        self.processes = EngineProcesses(env, log_dir)
        self.processes.start_all()

    def team(self, quota: int = 100_000):
        from django.contrib.auth import get_user_model

        from jobs.models import GpuType, Membership, Quota, Team
        from jobs.services.inventory import inventory_sync
        from jobs.services.seeding import DEMO, apply_seed

        apply_seed({"gpu_types": DEMO["gpu_types"], "allowed_registries": ["docker.io"]})
        inventory_sync()
        suffix = uuid.uuid4().hex[:6]
        team = Team.objects.create(slug=f"bench-{suffix}", name=f"Bench {suffix}")
        user = get_user_model().objects.create(username=f"bench-{suffix}")
        Membership.objects.create(team=team, user=user)
        for gpu_type in GpuType.objects.all():
            Quota.objects.create(team=team, gpu_type=gpu_type, max_gpus=quota)
        return team, user

    def close(self) -> None:
        self.processes.stop_all()


def wait_until(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def submit_throughput(engine: Engine, n: int = 150) -> Iterator[tuple[str, float]]:
    from kubernetes import client as k8s

    from devtools.engine import provision_now
    from jobs.kube import client as kube
    from jobs.kube import objects
    from jobs.models import State, Workload
    from jobs.services.submit import workload_submit

    team, user = engine.team()
    namespace = provision_now(engine.identity, team)
    # Baseline: the raw client creating the same Jobs with the worker's concurrency (8), same credentials.
    gpu = objects.GpuTypeSpec("k2", "gputype", "k2", "nvidia.com/gpu", 2000, 8192)
    specs = [
        objects.WorkloadSpec(
            uid=uuid.uuid4().hex[:10],
            name="raw",
            kind="batch",
            team_slug=team.slug,
            username="bench",
            namespace=namespace,
            image="ubuntu",
            gpu_type=gpu,
            gpu_count=1,
            time_limit_seconds=600,
            env=(("SIM_RUN_SECONDS", "600"),),
        )
        for _ in range(n)
    ]
    batch = k8s.BatchV1Api(kube.api_client())
    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda s: batch.create_namespaced_job(namespace, objects.make_job(s)), specs))
    raw_rate = n / (time.perf_counter() - started)
    time.sleep(5)  # let the controllers finish with the baseline's Jobs before the portal's turn

    # The portal, with the same client concurrency (8 clients submitting at once).
    from django.db import connection

    def submit_one(_: int) -> int:
        try:
            spec = {"image": "ubuntu", "gpu_type": "k2", "env": {"SIM_RUN_SECONDS": "600"}}
            return workload_submit(team=team, owner=user, spec=spec).id
        finally:
            connection.close()

    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(submit_one, range(n)))
    wait_until(
        lambda: not Workload.objects.filter(id__in=ids, state__in=[State.QUEUED, State.SUBMITTING]).exists(),
        300,
        "portal submissions did not all reach Kubernetes",
    )
    portal_rate = n / (time.perf_counter() - started)
    yield "submit_raw_creates_per_s", round(raw_rate, 1)
    yield "submit_portal_per_s", round(portal_rate, 1)
    yield "submit_throughput_ratio", round(portal_rate / raw_rate, 3)
    for s in specs:
        batch.delete_namespaced_job(s.object_name, namespace, propagation_policy="Background")
    from jobs.services.cancel import workload_cancel

    for workload in Workload.objects.filter(id__in=ids):
        workload_cancel(workload=workload, by=user)


def tracking_lag(engine: Engine, n: int = 60) -> Iterator[tuple[str, float]]:
    from jobs.kube import client as kube
    from jobs.models import State, Workload
    from jobs.services.submit import workload_submit
    from jobs.services.tracker import selector

    team, user = engine.team()
    seen: dict[tuple[str, str], float] = {}  # (workload uid, phase) -> when our own watch saw it
    stop = threading.Event()

    def watch() -> None:
        response = kube.stream_get(
            "/api/v1/pods", {"watch": "true", "labelSelector": selector(), "timeoutSeconds": "300"}, read_timeout=320
        )
        buffer = b""
        for chunk in response.stream(65536, decode_content=False):
            now = time.time()
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                pod = json.loads(line)["object"]
                uid = pod["metadata"]["labels"].get("gpuportal.dev/workload")
                phase = pod.get("status", {}).get("phase")
                seen.setdefault((uid, phase), now)
            if stop.is_set():
                break

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(1)
    ids = [
        workload_submit(
            team=team,
            owner=user,
            spec={"image": "ubuntu", "gpu_type": ("k2", "v100", "p100")[i % 3], "env": {"SIM_RUN_SECONDS": "2"}},
        ).id
        for i in range(n)
    ]
    wait_until(
        lambda: Workload.objects.filter(id__in=ids, state=State.SUCCEEDED).count() == n, 300, "jobs did not finish"
    )
    stop.set()
    from jobs.models import WorkloadEvent

    lags = []
    for workload in Workload.objects.filter(id__in=ids):
        for event in WorkloadEvent.objects.filter(
            workload=workload, to_state__in=[State.RUNNING, State.SUCCEEDED]
        ).exclude(from_state=State.RUNNING, to_state=State.RUNNING):
            phase = "Running" if event.to_state == State.RUNNING else "Succeeded"
            if (workload.uid, phase) in seen and event.to_state != event.from_state:
                # The portal's record time: the event row's id order follows inserts; use state_changed_at
                # for the final state and the RUNNING event's insertion (approximated by the next poll).
                recorded = workload.state_changed_at.timestamp() if phase == "Succeeded" else None
                if recorded:
                    lags.append((recorded - seen[(workload.uid, phase)]) * 1000)
    yield "tracking_lag_samples", len(lags)
    yield "tracking_lag_p50_ms", round(statistics.median(lags), 1)
    yield "tracking_lag_p95_ms", round(p95(lags), 1)


def admission_10k(engine_free: bool = True) -> Iterator[tuple[str, float]]:
    from django.contrib.auth import get_user_model

    from jobs.models import GpuType, Membership, Quota, State, Team, Workload
    from jobs.services.admission import quota_admit

    suffix = uuid.uuid4().hex[:6]
    team = Team.objects.create(slug=f"adm-{suffix}", name=f"Admission {suffix}")
    user = get_user_model().objects.create(username=f"adm-{suffix}")
    Membership.objects.create(team=team, user=user)
    gpu_type, _ = GpuType.objects.get_or_create(
        slug="bench-gpu", defaults={"display_name": "Bench", "node_label_value": "bench"}
    )
    Quota.objects.create(team=team, gpu_type=gpu_type, max_gpus=4)
    rng = random.Random(3)
    now = datetime.now(UTC)
    Workload.objects.bulk_create(
        Workload(
            team=team,
            owner=user,
            name=f"q{i}",
            kind="batch",
            image="ubuntu",
            gpu_type=gpu_type,
            gpu_count=rng.choice([1, 2, 4, 8]),
            time_limit_seconds=3600,
            priority=rng.choice([0, 0, 0, 10]),
            created_at=now - timedelta(seconds=10_000 - i),
        )
        for i in range(10_000)
    )
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        admitted = quota_admit(team_id=team.id, gpu_type_id=gpu_type.id)
        timings.append((time.perf_counter() - started) * 1000)
        Workload.objects.filter(id__in=admitted).update(state=State.QUEUED)
    yield "admission_10k_queued_ms", round(statistics.median(timings), 1)


def overadmission() -> Iterator[tuple[str, float]]:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from jobs.models import GpuNode, GpuType, Membership, Quota, State, Team, Workload
    from jobs.services.admission import quota_admit
    from jobs.services.submit import workload_submit

    suffix = uuid.uuid4().hex[:6]
    team = Team.objects.create(slug=f"race-{suffix}", name=f"Race {suffix}")
    user = get_user_model().objects.create(username=f"race-{suffix}")
    Membership.objects.create(team=team, user=user)
    gpu_type, _ = GpuType.objects.get_or_create(
        slug="race-gpu", defaults={"display_name": "Race", "node_label_value": "race"}
    )
    GpuNode.objects.update_or_create(
        name="race-node",
        defaults={
            "gpu_type": gpu_type,
            "gpus_capacity": 8,
            "gpus_allocatable": 8,
            "ready": True,
            "last_seen_at": datetime.now(UTC),
        },
    )
    from jobs.models import AllowedRegistry

    AllowedRegistry.objects.get_or_create(host="docker.io")
    Quota.objects.create(team=team, gpu_type=gpu_type, max_gpus=4)
    barrier = threading.Barrier(50)

    def one(i: int) -> None:
        try:
            barrier.wait()
            workload_submit(
                team=team, owner=user, spec={"image": "ubuntu", "gpu_type": "race-gpu", "gpu_count": 1 + i % 2}
            )
            quota_admit(team_id=team.id, gpu_type_id=gpu_type.id)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = sum(Workload.objects.filter(team=team, state__in=State.holding()).values_list("gpu_count", flat=True))
    yield "quota_overadmissions", max(0, held - 4)


def crash(engine: Engine) -> Iterator[tuple[str, float]]:
    from kubernetes import client as k8s

    from jobs.models import State, Workload
    from jobs.services.submit import workload_submit

    team, user = engine.team(quota=16)
    rng = random.Random(7)
    ids = []
    next_kill = time.monotonic() + rng.uniform(0.5, 2.0)
    kills = 0
    for i in range(200):
        ids.append(
            workload_submit(
                team=team,
                owner=user,
                spec={"image": "ubuntu", "gpu_type": ("p100", "k2", "v100")[i % 3], "env": {"SIM_RUN_SECONDS": "1"}},
            ).id
        )
        if time.monotonic() >= next_kill:
            engine.processes.kill("worker")
            engine.processes.start("worker")
            kills += 1
            next_kill = time.monotonic() + rng.uniform(0.5, 2.0)
    for _ in range(4):
        time.sleep(rng.uniform(0.5, 2.0))
        engine.processes.kill("worker")
        engine.processes.start("worker")
        kills += 1
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: Workload.objects.filter(id__in=ids, state=State.SUCCEEDED).count() == 200, 400, "crash run")
    jobs = k8s.BatchV1Api(engine.admin).list_namespaced_job(team.namespace).items
    uids = [j.metadata.labels["gpuportal.dev/workload"] for j in jobs]
    yield "crash_kills", kills
    yield "crash_duplicates", len(uids) - len(set(uids))
    yield "crash_lost", 200 - Workload.objects.filter(id__in=ids, state=State.SUCCEEDED).count()


def usage_report_1m() -> Iterator[tuple[str, float]]:
    from django.db import connection

    from jobs.models import GpuType, Team
    from jobs.models.usage import RolledUpDay
    from jobs.services.accounting import rollup_pending, usage_report

    types = [
        GpuType.objects.get_or_create(slug=s, defaults={"display_name": s, "node_label_value": s})[0]
        for s in ("u-a", "u-b", "u-c")
    ]
    from django.contrib.auth import get_user_model

    users = get_user_model()
    teams = [
        Team.objects.create(slug=f"usage-{i}-{uuid.uuid4().hex[:4]}", name=f"Usage {i} {uuid.uuid4().hex[:4]}")
        for i in range(10)
    ]
    members = [users.objects.create(username=f"u-{uuid.uuid4().hex[:8]}") for _ in range(40)]
    month = datetime(2026, 9, 1, tzinfo=UTC)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO jobs_workload (uid, team_id, owner_id, name, kind, image, gpu_type_id, gpu_count, command, args,
                env, time_limit_seconds, priority, state, reason, message, namespace, k8s_name, node_name, pod_name,
                pod_uid, created_at, started_at, finished_at, state_changed_at, updated_at)
            SELECT substr(md5(g::text || %s), 1, 10), (%s::bigint[])[1 + g %% 10], (%s::bigint[])[1 + g %% 40], 'w', 'batch',
                'ubuntu', (%s::bigint[])[1 + g %% 3], 1 + g %% 4, '[]', '[]', '[]', 86400, 0, 'SUCCEEDED', '', '', '', '',
                '', '', '', s, s, s + ((60 + g %% 7200) * interval '1 second'), s, s
            FROM generate_series(1, 1000000) AS g,
                 LATERAL (SELECT %s::timestamptz + (g * 2.592) * interval '1 second' AS s) AS start
            """,
            [uuid.uuid4().hex, [t.id for t in teams], [u.id for u in members], [t.id for t in types], month],
        )
        cursor.execute("ANALYZE jobs_workload")
    now = datetime(2026, 10, 15, tzinfo=UTC)
    start, end = month, datetime(2026, 10, 1, tzinfo=UTC)
    team_ids = [t.id for t in teams]
    RolledUpDay.objects.all().delete()
    started = time.perf_counter()
    live_rows = usage_report(start=start, end=end, team_ids=team_ids, now=now)
    live_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    rollup_pending(now=now, max_days=60)
    rollup_s = time.perf_counter() - started
    timings = []
    for _ in range(5):
        started = time.perf_counter()
        rows = usage_report(start=start, end=end, team_ids=team_ids, now=now)
        timings.append((time.perf_counter() - started) * 1000)
    assert abs(sum(r.gpu_seconds for r in rows) - sum(r.gpu_seconds for r in live_rows)) < 1e-3 * sum(
        r.gpu_seconds for r in rows
    )
    yield "usage_report_1m_live_ms", round(live_ms, 1)
    yield "usage_report_1m_ms", round(statistics.median(timings), 1)
    yield "usage_report_1m_speedup", round(live_ms / statistics.median(timings), 1)
    yield "usage_rollup_month_s", round(rollup_s, 1)


def run(ctx: BenchContext) -> Iterator[tuple[str, float]]:
    """All parts, or those named in BENCH_ENGINE_PARTS (admission, race, submit, lag, crash, usage)."""
    parts = set(filter(None, os.environ.get("BENCH_ENGINE_PARTS", "").split(","))) or {
        "admission", "race", "submit", "lag", "crash", "usage"
    }  # fmt: skip
    ctx.django()
    if "admission" in parts:
        yield from admission_10k()
    if "race" in parts:
        yield from overadmission()
    if parts & {"submit", "lag", "crash"}:
        engine = Engine(ctx)
        try:
            if "submit" in parts:
                yield from submit_throughput(engine)
            if "lag" in parts:
                yield from tracking_lag(engine)
            if "crash" in parts:
                yield from crash(engine)
        finally:
            engine.close()
    if "usage" in parts:
        yield from usage_report_1m()
