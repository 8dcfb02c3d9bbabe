"""The parts that scale out, shown to (issue 41, item 2): the web with 1 and 2 gunicorn processes and the
worker with 1 and 2 processes, side by side in one run, sides alternating (1, 2, then 2, 1).

- web (no cluster): 8 threads of a team's script POST `BENCH_SCALE_WEB_N` workloads each side
  (`/api/v1/workloads/`, token and Idempotency-Key, as `submit_throughput`'s portal side) to gunicorn with 1
  or 2 processes of 8 gthreads; the figure is REST submissions answered per second (the intake: each stored,
  admitted and its create handed to the broker; every 201 back). The inventory holds ready nodes as the
  tracker's sync leaves them; no worker runs (the broker is purged afterwards).
- worker: `BENCH_SCALE_WORKER_N` workloads queued on a quota of 0 are admitted at once by an admin's quota
  change (the drain's portal side, controller manager stopped so no pods are made) with 1 or 2 Celery
  worker processes of 8 threads each; the figure is Jobs held by the API server per second.

Each side also prints, from the processes' own CPU counters, the CPU-seconds per second of wall time of
every part of the run (`busy_cores`: all parts together). On a machine of two cores, a second replica helps
only while the parts together use less than two cores; once `busy_cores` is near 2, the second process
takes its CPU from PostgreSQL, the API server and the first process, and the rate stays where it was.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator

from benchmarks import cpu, web
from benchmarks.engine import Engine, median

WEB_FIGURES = (
    "replicas_web_n",
    "replicas_web_1_per_s",
    "replicas_web_2_per_s",
    "web_scaling_2x",
    "replicas_web_1_busy_cores",
    "replicas_web_2_busy_cores",
)
WORKER_FIGURES = (
    "replicas_worker_n", "replicas_worker_1_per_s", "replicas_worker_2_per_s", "worker_scaling_2x",
    "replicas_worker_1_busy_cores", "replicas_worker_2_busy_cores",
)  # fmt: skip
ORDERS = ((1, 2), (2, 1))


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def _cores(seconds: dict[str, float], wall: float) -> str:
    parts = sorted(((p, v / wall) for p, v in seconds.items() if v / wall >= 0.01), key=lambda kv: -kv[1])
    return ", ".join(f"{part} {value:.2f}" for part, value in parts)


def _machine_busy() -> float:
    """CPU-seconds the whole machine has spent busy so far (every process, the neighbours' too: /proc/stat)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _web_world():
    """A team with a large quota and an API token, and ready nodes of its GPU type in the inventory (as the
    tracker's inventory sync leaves them): what the intake checks, without a cluster."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from api.tokens import token_create
    from identity.models import Membership
    from jobs.models import GpuNode, GpuType, Quota, Team
    from jobs.services.seeding import DEMO, apply_seed

    apply_seed({"gpu_types": DEMO["gpu_types"], "allowed_registries": ["docker.io"]})
    k2 = GpuType.objects.get(slug="k2")
    suffix = uuid.uuid4().hex[:8]
    for i in range(4):
        GpuNode.objects.update_or_create(
            name=f"replicas-{suffix}-{i}",
            defaults={"gpu_type": k2, "gpus_capacity": 8, "gpus_allocatable": 8, "ready": True,
                      "schedulable": True, "last_seen_at": timezone.now()},
        )  # fmt: skip
    team = Team.objects.create(slug=f"replicas-{suffix}", name=f"Replicas {suffix}")
    user = get_user_model().objects.create(username=f"replicas-{suffix}")
    Membership.objects.create(team=team, user=user)
    Quota.objects.create(team=team, gpu_type=k2, max_gpus=1_000_000)
    return team, token_create(user=user, name="bench").raw, suffix


def _web_side(ctx, workers: int, n: int, team, token: str) -> tuple[float, float, float]:
    """REST submissions per second through gunicorn with `workers` processes, the cores this run kept busy
    meanwhile, and the CPU milliseconds of all its processes per submission."""
    from benchmarks.engine_flow import CLIENTS, _rest_submit

    with web.gunicorn(ctx, workers=workers) as url:
        api = web.Api(url, clients=CLIENTS)
        _rest_submit(api, token, team.slug, 4 * CLIENTS, {})  # every process and thread warm
        before, machine, started = cpu.snapshot(), _machine_busy(), time.perf_counter()
        _rest_submit(api, token, team.slug, n, {})
        wall, seconds = time.perf_counter() - started, cpu.spent(before, cpu.snapshot())
        machine = (_machine_busy() - machine) / wall
    busy = sum(seconds.values()) / wall
    print(
        f"# replicas web x{workers}: {n} submissions in {wall:.2f} s ({n / wall:.1f}/s), load "
        f"{os.getloadavg()[0]:.2f}; machine cores busy {machine:.2f} of {os.cpu_count()} (neighbours included); "
        f"this run's cores {busy:.2f}: {_cores(seconds, wall)}; "
        f"{cpu.per_object(seconds, n, 'submission')}",
        flush=True,
    )
    return n / wall, busy, 1000 * sum(seconds.values()) / n


def web_scaling(ctx) -> Iterator[tuple[str, float]]:
    """The web with 1 and 2 gunicorn processes, sides alternating; no worker runs (the intake is measured:
    each submission stored, admitted and its create handed to the broker, which is purged afterwards)."""
    from jobs.models import GpuNode, Workload
    from portal.celery import app

    n = _env_int("BENCH_SCALE_WEB_N", 300)
    team, token, suffix = _web_world()
    rates: dict[int, list[float]] = {}
    busy: dict[int, list[float]] = {}
    per_submission: list[float] = []
    try:
        for order in ORDERS:
            for workers in order:
                rate, cores, cpu_ms = _web_side(ctx, workers, n, team, token)
                per_submission.append(cpu_ms)
                # No worker takes them on: the team's waiting limit must not refuse the next side's.
                app.control.purge()
                Workload.objects.filter(team=team).delete()
                rates.setdefault(workers, []).append(rate)
                busy.setdefault(workers, []).append(cores)
    finally:
        app.control.purge()  # the creates the submissions asked for: no worker is to make them
        Workload.objects.filter(team=team).delete()
        GpuNode.objects.filter(name__startswith=f"replicas-{suffix}-").delete()
    yield "replicas_web_n", n
    for workers in (1, 2):
        yield f"replicas_web_{workers}_per_s", round(median(rates[workers]), 1)
    yield "web_scaling_2x", round(median(rates[2]) / median(rates[1]), 3)
    for workers in (1, 2):
        yield f"replicas_web_{workers}_busy_cores", round(median(busy[workers]), 2)
    # What the machine's cores allow, however many web processes: all of them busy with submissions only.
    yield "replicas_web_cpu_ms_per_submission", round(median(per_submission), 2)
    yield "replicas_web_ceiling_per_s", round(1000 * (os.cpu_count() or 1) / median(per_submission), 1)


def _second_worker(engine: Engine) -> subprocess.Popen:
    """A second Celery worker process beside the engine's own, as a second replica of the chart's worker."""
    from devtools.engine import REPO, process_env

    log = open(engine.log_dir / "worker-2.log", "ab")  # noqa: SIM115 - the child owns it
    return subprocess.Popen(
        [*engine.processes.argv("worker"), "--hostname", "second@%h"],
        cwd=REPO, env=process_env("worker", engine.processes.env), stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def _stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def _worker_side(engine: Engine, workers: int, n: int) -> tuple[float, float]:
    """Jobs created per second after a quota change admits `n` at once, with `workers` worker processes."""
    from benchmarks.engine_drain import _portal_side
    from benchmarks.engine_flow import _fresh_namespace

    place = _fresh_namespace(engine)
    second = _second_worker(engine) if workers == 2 else None
    try:
        if second is not None:
            time.sleep(5)  # the second process connected to the broker before the clock starts
        before, machine, started = cpu.snapshot(), _machine_busy(), time.perf_counter()
        seconds_to_last, _admit_ms = _portal_side(engine, n, place)
        wall, seconds = time.perf_counter() - started, cpu.spent(before, cpu.snapshot())
        machine = (_machine_busy() - machine) / wall
    finally:
        if second is not None:
            _stop(second)
        engine.delete_namespace(place[2])
    busy = sum(seconds.values()) / wall
    print(
        f"# replicas worker x{workers}: {n} Jobs in {seconds_to_last:.2f} s ({n / seconds_to_last:.1f}/s), load "
        f"{os.getloadavg()[0]:.2f}; machine cores busy {machine:.2f} of {os.cpu_count()}; this run's cores "
        f"{busy:.2f}: {_cores(seconds, wall)}",
        flush=True,
    )
    return n / seconds_to_last, busy


def worker_scaling(engine: Engine) -> Iterator[tuple[str, float]]:
    worker_n = _env_int("BENCH_SCALE_WORKER_N", 1000)
    rates: dict[int, list[float]] = {}
    busy: dict[int, list[float]] = {}
    cluster = engine.ctx.cluster()
    cluster.stop_component("kube-controller-manager")  # Jobs stay Jobs, as in the drain
    try:
        for order in ORDERS:
            for workers in order:
                rate, cores = _worker_side(engine, workers, worker_n)
                rates.setdefault(workers, []).append(rate)
                busy.setdefault(workers, []).append(cores)
    finally:
        cluster.start_component("kube-controller-manager")
    yield "replicas_worker_n", worker_n
    for workers in (1, 2):
        yield f"replicas_worker_{workers}_per_s", round(median(rates[workers]), 1)
    yield "worker_scaling_2x", round(median(rates[2]) / median(rates[1]), 3)
    for workers in (1, 2):
        yield f"replicas_worker_{workers}_busy_cores", round(median(busy[workers]), 2)
