"""drain_10k_ratio: 10,000 queued workloads whose quota opens at once, until the API server holds all
their Jobs, against the raw client creating the same Jobs, side by side in one run.

Each round has two sides, in alternating order, each in a fresh team namespace:
- portal: 10,000 workloads wait QUEUED (inserted as rows: the intake is not what this measures) on a
  quota of 0; the clock starts when an admin's quota change (`quota_change_record`, as admin calls it)
  raises it to 10,000, and stops when our own watch of the namespace has seen the 10,000th Job. The
  admission pass, the worker's creates and the tracker's reaction are all inside;
- raw: the same 10,000 Jobs (rendered by the portal's own `spec_for` + `make_objects` from the same
  workload fields; only the instance label differs, so the portal's tracker does not watch them) created
  by 8 threads with the portal's credentials and the same client call, clock from the first create to the
  10,000th Job seen by the same watch.
The worker runs 8 threads: both sides have 8 creates in flight at most.

The Jobs stay Jobs: the controller manager is stopped while the sides run (the cluster has 16 GPUs of
the type, and 10,000 pods the Job controller would make, the scheduler would try and the quota would
refuse would load the API server far more than the creates being measured). Before it starts again, the
Jobs are deleted. See benchmarks/README.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from benchmarks import cpu
from benchmarks.engine import (
    Engine,
    apiserver_requests,
    median,
    old_goal,
    requests_per_object,
    wait_until,
    worker_batches,
)
from benchmarks.engine_flow import CLIENTS, _fresh_namespace, _job_watch

FIGURES = (
    "drain_n",
    "drain_rounds",
    "drain_raw_s",
    "drain_portal_s",
    "drain_admit_ms",
    "drain_10k_ratio",
)


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def _workloads(team, user, n: int):
    """n workloads as a researcher would have queued them (unsaved; the same fields on both sides)."""
    from jobs.models import GpuType, Workload

    k2 = GpuType.objects.get(slug="k2")
    return [
        Workload(
            team=team, owner=user, name=f"drain-{i}", kind="batch", image="ubuntu", gpu_type=k2, gpu_count=1,
            time_limit_seconds=3600, env=[{"name": "SIM_RUN_SECONDS", "value": "600"}], mounts=[],
        )
        for i in range(n)
    ]  # fmt: skip


def _create(namespace: str, body) -> None:
    """The raw client's create, called as the portal calls it (the rendered dict POSTed, the answer read,
    not decoded: `kube.create`)."""
    from jobs.kube import client as kube

    kube.create(namespace, body)


def _delete_jobs(engine: Engine, namespace: str) -> None:
    """Delete a side's Jobs (10,000 of them: a loaded API server may time out and go on deleting)."""
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    batch = k8s.BatchV1Api(engine.admin)
    for _ in range(20):
        try:
            batch.delete_collection_namespaced_job(namespace, propagation_policy="Background", _request_timeout=300)
        except ApiException as exc:
            if exc.status not in (500, 504):
                raise
        if not batch.list_namespaced_job(namespace, limit=1, _request_timeout=120).items:
            return
        time.sleep(2)
    raise RuntimeError(f"the Jobs in {namespace} were not deleted")


def _delete_workloads(team) -> None:
    """The side's rows go (with their news); the engine may record news about them meanwhile: retry."""
    from django.db import IntegrityError

    from jobs.models import Workload
    from notifications.models import Event

    for attempt in range(5):
        try:
            Event.objects.filter(workload__team=team).delete()
            Workload.objects.filter(team=team).delete()
            return
        except IntegrityError:
            if attempt == 4:
                raise
            time.sleep(1)


def _print_cpu(side: str, n: int, seconds: dict[str, float]) -> None:
    """Where the side's CPU went (all of the run's processes, until the n-th Job was seen), and per Job."""
    print(f"# drain {side} side cpu {cpu.per_object(seconds, n)}", flush=True)


def _raw_side(engine: Engine, n: int, place) -> float:
    from django.conf import settings

    from jobs.kube import objects
    from jobs.services.cluster.object_creation import spec_for

    team, user, namespace = place
    instance = settings.PORTAL_INSTANCE
    settings.PORTAL_INSTANCE = f"{instance}-raw"  # our tracker watches only its own instance's objects
    try:
        bodies = [objects.make_job(spec_for(w, pull_secrets={})) for w in _workloads(team, user, n)]
    finally:
        settings.PORTAL_INSTANCE = instance
    watch = _job_watch(engine, namespace)
    try:
        calls = apiserver_requests(engine.admin)
        before = cpu.snapshot()
        started = time.time()
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(lambda body: _create(namespace, body), bodies))
        last = watch.wait_for(n, 1800, "raw creates")
        print(f"# drain raw side: {last - started:.1f} s, load {os.getloadavg()[0]:.2f}", flush=True)
        _print_cpu("raw", n, cpu.spent(before, cpu.snapshot()))
        print(
            f"# drain raw side API requests per Job: {requests_per_object(calls, apiserver_requests(engine.admin), n)}"
        )
    finally:
        watch.stop()
        _delete_jobs(engine, namespace)
    return last - started


def _portal_side(engine: Engine, n: int, place) -> tuple[float, float]:
    """Seconds from the quota change to the n-th Job seen, and the quota change's own milliseconds."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from jobs.models import GpuType, Quota, State, Workload
    from jobs.services.queue.settings_changes import quota_change_record

    team, user, namespace = place
    k2 = GpuType.objects.get(slug="k2")
    quota = Quota.objects.get(team=team, gpu_type=k2)
    Quota.objects.filter(id=quota.id).update(max_gpus=0)
    Workload.objects.bulk_create(_workloads(team, user, n), batch_size=2000)
    admin = get_user_model().objects.filter(is_superuser=True).first() or user
    wait_until(
        lambda: Workload.objects.filter(team=team, state=State.QUEUED).count() == n,
        30,
        "the queued workloads are not all QUEUED (something admitted them on a zero quota)",
    )
    watch = _job_watch(engine, namespace)
    worker_log = engine.log_dir / "worker.log"
    log_offset = worker_log.stat().st_size if worker_log.exists() else 0
    try:
        calls = apiserver_requests(engine.admin)
        before = cpu.snapshot()
        started = time.time()
        with transaction.atomic():  # as admin saves a quota and records the change
            Quota.objects.filter(id=quota.id).update(max_gpus=n)
            quota_change_record(team=team, gpu_type=k2, old=0, new=n, by=admin)
        admit_ms = (time.time() - started) * 1000
        last = watch.wait_for(n, 1800, "portal creates after the quota change")
        print(
            f"# drain portal side: {last - started:.1f} s (quota change {admit_ms:.0f} ms), "
            f"load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        _print_cpu("portal", n, cpu.spent(before, cpu.snapshot()))
        print(
            f"# drain portal side API requests per Job: "
            f"{requests_per_object(calls, apiserver_requests(engine.admin), n)}",
            flush=True,
        )
        wait_until(
            lambda: not Workload.objects.filter(team=team, state=State.SUBMITTING).exists(),
            120,
            "workloads stayed SUBMITTING after their Jobs were made",
        )
        print(f"# drain portal worker: {worker_batches(worker_log, log_offset)}", flush=True)
    finally:
        watch.stop()
        _delete_workloads(team)
        _delete_jobs(engine, namespace)
    return last - started, admit_ms


def drain(engine: Engine) -> Iterator[tuple[str, float]]:
    n, rounds = _env_int("BENCH_DRAIN_N", 10_000), _env_int("BENCH_DRAIN_ROUNDS", 1)
    cluster = engine.ctx.cluster()
    # Every side's namespace is set up first (with the controller manager running: it fills in their
    # ResourceQuotas' status), then the controller manager stops until every side is done.
    places = [{side: _fresh_namespace(engine) for side in ("raw", "portal")} for _ in range(rounds)]
    time.sleep(2)
    raw_times, portal_times, admit_times, ratios = [], [], [], []
    cluster.stop_component("kube-controller-manager")
    try:
        for i in range(rounds):
            sides = ("raw", "portal") if i % 2 == 0 else ("portal", "raw")
            for side in sides:
                if side == "raw":
                    raw = _raw_side(engine, n, places[i]["raw"])
                else:
                    portal, admit_ms = _portal_side(engine, n, places[i]["portal"])
            raw_times.append(raw)
            portal_times.append(portal)
            admit_times.append(admit_ms)
            ratios.append(portal / raw)
            print(
                f"# drain round {i + 1}/{rounds} ({' then '.join(sides)}): raw {raw:.1f} s ({n / raw:.0f}/s), "
                f"portal {portal:.1f} s ({n / portal:.0f}/s, quota change {admit_ms:.0f} ms), ratio "
                f"{portal / raw:.3f}, load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    finally:
        cluster.start_component("kube-controller-manager")
        for place in places:
            for _team, _user, namespace in place.values():
                engine.delete_namespace(namespace)
    yield "drain_n", n
    yield "drain_rounds", rounds
    yield "drain_raw_s", round(median(raw_times), 2)
    yield "drain_portal_s", round(median(portal_times), 2)
    yield "drain_admit_ms", round(median(admit_times), 1)
    yield "drain_10k_ratio", round(median(ratios), 3)
    print(old_goal("drain_10k_ratio", median(ratios), "<=", 1.25), flush=True)
