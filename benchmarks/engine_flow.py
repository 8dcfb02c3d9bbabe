"""Engine benchmarks against the live engine and the local cluster: submit throughput (A/B against the
raw client), tracking lag, and crash safety. Figures count what the API server holds, seen by our own
watch with admin credentials; see benchmarks/README.md for what each measures and how it could lie."""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from benchmarks import cpu, pgstat, web
from benchmarks.engine import Engine, median, old_goal, percentile, wait_until, worker_batches
from benchmarks.kwatch import ObjectWatch

CLIENTS = 8  # submitting threads on both sides; the worker's concurrency is 8 as well
ARRAY = 50  # workloads per request on the sweeps side (`gpuportal submit --array 50`)


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def _rbac_ready(namespace: str) -> None:
    """The portal's credentials may act in a new namespace (RBAC caches learn of a RoleBinding late)."""
    from kubernetes.client.exceptions import ApiException

    from jobs.kube import client as kube

    def allowed() -> bool:
        try:
            kube.batch().list_namespaced_job(namespace, limit=1, _request_timeout=kube.timeout())
            return True
        except ApiException as exc:
            if exc.status != 403:
                raise
            return False

    wait_until(allowed, 60, f"RBAC never allowed the portal into {namespace}", interval=0.1)


def _fresh_namespace(engine: Engine):
    """A new team and its namespace, set up (and usable by the portal) before any timing starts."""
    from devtools.engine import provision_now

    team, user = engine.team()
    # Made by the provisioner's identity, as the engine's provisioner process would (provision_now waits
    # until RBAC lets the engine in).
    namespace = provision_now(engine.identity, team)
    _rbac_ready(namespace)
    return team, user, namespace


def _job_watch(engine: Engine, namespace: str) -> ObjectWatch:
    return ObjectWatch(engine.admin, f"/apis/batch/v1/namespaces/{namespace}/jobs")


def _raw_round(engine: Engine, n: int) -> float:
    """The raw kubernetes client creating n Jobs (the portal's own manifests and credentials), per second."""
    from jobs.kube import client as kube
    from jobs.kube import objects

    team, _, namespace = _fresh_namespace(engine)
    gpu = objects.GpuTypeSpec("k2", "gputype", "k2", "nvidia.com/gpu", 2000, 8192)
    specs = [
        objects.WorkloadSpec(
            uid=uuid.uuid4().hex[:10], name="raw", kind="batch", team_slug=team.slug, username="bench",
            namespace=namespace, image="ubuntu", gpu_type=gpu, gpu_count=1, time_limit_seconds=600,
            env=(("SIM_RUN_SECONDS", "600"),),
        )
        for _ in range(n)
    ]  # fmt: skip
    bodies = [objects.make_job(s) for s in specs]
    watch = _job_watch(engine, namespace)
    try:
        before = cpu.snapshot()
        started = time.time()
        with ThreadPoolExecutor(CLIENTS) as pool:
            # The create the worker makes (kube.create: the rendered dict, the answer not decoded).
            list(pool.map(lambda b: kube.create(namespace, b), bodies))
        last = watch.wait_for(n, 300, "raw creates")
        print(f"# submit raw side cpu {cpu.per_object(cpu.spent(before, cpu.snapshot()), n)}", flush=True)
    finally:
        watch.stop()
        engine.delete_namespace(namespace)
    engine.settle(namespace)
    return n / (last - started)


def _rest_submit(api: web.Api, token: str, team_slug: str, count: int, env: dict[str, str]) -> None:
    """CLIENTS threads of a team's script submitting `count` workloads over REST."""
    variables = [{"name": name, "value": value} for name, value in env.items()]
    spec = {"team": team_slug, "image": "ubuntu", "gpu_type": "k2", "env": variables}

    def post(_: int) -> None:
        status, body = api.submit(token, spec, uuid.uuid4().hex)
        if status != 201:
            raise RuntimeError(f"submission refused: {status} {body[:300]!r}")

    with ThreadPoolExecutor(CLIENTS) as threads:
        list(threads.map(post, range(count)))


def _rest_submit_arrays(api: web.Api, token: str, team_slug: str, count: int, env: dict[str, str]) -> None:
    """A team's script submitting `count` workloads as sweeps of ARRAY each (`gpuportal submit --array`),
    from up to CLIENTS threads."""
    variables = [{"name": name, "value": value} for name, value in env.items()]
    sizes = [min(ARRAY, count - start) for start in range(0, count, ARRAY)]

    def post(size: int) -> None:
        specs = [
            {
                "image": "ubuntu",
                "gpu_type": "k2",
                "env": [*variables, {"name": "GPUPORTAL_ARRAY_INDEX", "value": str(i)}],
            }
            for i in range(size)
        ]
        status, body = api.submit_many(token, team_slug, specs, uuid.uuid4().hex)
        if status != 201:
            raise RuntimeError(f"sweep refused: {status} {body[:300]!r}")

    with ThreadPoolExecutor(min(CLIENTS, len(sizes))) as threads:
        list(threads.map(post, sizes))


def _token(user) -> str:
    from api.tokens import token_create

    return token_create(user=user, name="bench").raw


def _portal_round(engine: Engine, n: int, api: web.Api, *, arrays: bool = False) -> float:
    """The portal from a REST submission (token, validation, store, admission) to the Job held by the API
    server, per second: one POST per workload, or (`arrays`) sweeps of ARRAY workloads per POST."""
    team, user, namespace = _fresh_namespace(engine)
    token = _token(user)
    watch = _job_watch(engine, namespace)
    worker_log = engine.log_dir / "worker.log"
    try:
        pgstat.reset()
        before = cpu.snapshot()
        log_offset = worker_log.stat().st_size if worker_log.exists() else 0
        started = time.time()
        (_rest_submit_arrays if arrays else _rest_submit)(api, token, team.slug, n, {"SIM_RUN_SECONDS": "600"})
        intake_done = time.time()
        last = watch.wait_for(n, 600, "portal submissions reaching the API server")
        first = watch.wait_for(1, 1, "the first Job")
        side = "portal arrays" if arrays else "portal"
        for line in pgstat.report(f"submit {side} side", n):
            print(line, flush=True)
        print(f"# submit {side} side cpu {cpu.per_object(cpu.spent(before, cpu.snapshot()), n)}", flush=True)
        print(f"# submit {side} worker: {worker_batches(worker_log, log_offset)}", flush=True)
    finally:
        watch.stop()
        engine.delete_namespace(namespace)
    engine.settle(namespace, team=team)
    # Where the portal's time went: the intake (every submission answered) and the rest (the worker).
    print(
        f"# {side} round: intake {intake_done - started:.2f} s, first Job {first - started:.2f} s, "
        f"last Job {last - started:.2f} s",
        flush=True,
    )
    return n / (last - started)


def _web_ready(engine: Engine, api: web.Api) -> None:
    """Before any timing: every web worker has answered submissions, and the engine took them to the end."""
    from jobs.models import State, Workload

    team, user, _ = _fresh_namespace(engine)
    _rest_submit(api, _token(user), team.slug, 4 * CLIENTS, {"SIM_RUN_SECONDS": "1"})
    wait_until(
        lambda: not Workload.objects.filter(team=team).exclude(state=State.SUCCEEDED).exists(),
        180,
        "the warm-up submissions through the web did not all succeed",
        interval=0.2,
    )


def submit_throughput(engine: Engine) -> Iterator[tuple[str, float]]:
    """Alternating rounds, a fresh namespace each: the raw client, the portal with one POST per workload
    and the portal with sweeps (`submit/batch`), the order turning each round; the portal's sides
    through its REST API under gunicorn, as the chart runs it."""
    rounds, n = _env_int("BENCH_SUBMIT_ROUNDS", 5), _env_int("BENCH_SUBMIT_N", 300)
    rates: dict[str, list[float]] = {"raw": [], "portal": [], "arrays": []}
    with web.gunicorn(engine.ctx, env=engine.identity.env_as("web")) as base_url:
        api = web.Api(base_url, CLIENTS)
        _web_ready(engine, api)
        sides = {
            "raw": lambda: _raw_round(engine, n),
            "portal": lambda: _portal_round(engine, n, api),
            "arrays": lambda: _portal_round(engine, n, api, arrays=True),
        }
        order = list(sides)
        for i in range(rounds):
            for side in order[i % 3 :] + order[: i % 3]:
                rates[side].append(sides[side]())
            raw, portal, arrays = (rates[side][-1] for side in order)
            print(
                f"# submit round {i + 1}/{rounds}: raw {raw:.1f}/s, portal {portal:.1f}/s (ratio {portal / raw:.3f}), "
                f"portal with sweeps of {ARRAY} {arrays:.1f}/s (ratio {arrays / raw:.3f}), "
                f"load {os.getloadavg()[0]:.2f}",
                flush=True,
            )
    ratios = [p / r for p, r in zip(rates["portal"], rates["raw"], strict=True)]
    array_ratios = [a / r for a, r in zip(rates["arrays"], rates["raw"], strict=True)]
    yield "submit_rounds", rounds
    yield "submit_workloads_per_round", n
    yield "submit_raw_creates_per_s", round(median(rates["raw"]), 1)
    yield "submit_portal_per_s", round(median(rates["portal"]), 1)
    yield "submit_throughput_ratio", round(median(ratios), 3)
    yield "submit_throughput_ratio_min", round(min(ratios), 3)
    yield "submit_throughput_ratio_max", round(max(ratios), 3)
    print(old_goal("submit_throughput_ratio", median(ratios), ">=", 0.8), flush=True)
    yield "submit_array_size", ARRAY
    yield "submit_array_portal_per_s", round(median(rates["arrays"]), 1)
    yield "submit_array_throughput_ratio", round(median(array_ratios), 3)
    yield "submit_array_throughput_ratio_min", round(min(array_ratios), 3)
    yield "submit_array_throughput_ratio_max", round(max(array_ratios), 3)


# --- tracking lag ----------------------------------------------------------------------------------
# The recorder is a deferred constraint trigger: it runs as the transaction that inserted the timeline row
# commits, so a transition is stamped when it is about to become visible (less the commit's own flush), not
# when its row was written; a transaction that records many transitions is not credited before it commits.
RECORDER_SQL = """
CREATE TABLE IF NOT EXISTS bench_transition_recorded (
    workload_id bigint, to_state varchar(12), recorded_at timestamptz DEFAULT clock_timestamp());
TRUNCATE bench_transition_recorded;
CREATE OR REPLACE FUNCTION bench_record_transition() RETURNS trigger AS $$
BEGIN
    INSERT INTO bench_transition_recorded (workload_id, to_state) VALUES (NEW.workload_id, NEW.to_state);
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS bench_record_transition ON jobs_workloadevent;
CREATE CONSTRAINT TRIGGER bench_record_transition AFTER INSERT ON jobs_workloadevent
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.to_state IN ('RUNNING', 'SUCCEEDED', 'FAILED'))
    EXECUTE FUNCTION bench_record_transition();
"""


def _sim_writes(path, namespace: str) -> dict[tuple[str, str], float]:
    """(pod name, 'Running' | 'final') -> the simulator's clock when that status write succeeded (the first)."""
    writes: dict[tuple[str, str], float] = {}
    with open(path) as fh:
        for line in fh:
            entry = json.loads(line)
            if entry["namespace"] != namespace:
                continue
            phase = {"Running": "Running", "Succeeded": "final", "Failed": "final"}.get(entry["phase"])
            if phase:
                writes.setdefault((entry["pod"], phase), entry["at"])
    return writes


def _lags(engine: Engine, namespace: str, ids: list[int]) -> dict[str, list[float]]:
    from django.db import connection

    from jobs.models import Workload

    names = dict(Workload.objects.filter(id__in=ids).values_list("id", "k8s_name"))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT workload_id, to_state, recorded_at FROM bench_transition_recorded WHERE workload_id = ANY(%s)",
            [ids],
        )
        recorded: dict[tuple[int, str], datetime] = {}
        for workload_id, to_state, at in cursor.fetchall():
            key = (workload_id, "Running" if to_state == "RUNNING" else "final")
            recorded[key] = min(at, recorded.get(key, at))
    writes = _sim_writes(engine.ctx.status_log, namespace)
    pod_of: dict[str, str] = {}
    for pod, _ in writes:
        pod_of.setdefault(re.sub(r"-[a-z0-9]{5}$", "", pod), pod)  # a Job's pod is <job name>-<5 chars>
    lags: dict[str, list[float]] = {"Running": [], "final": []}
    for workload_id, name in names.items():
        pod = pod_of.get(name)
        for phase in lags:
            if pod and (pod, phase) in writes and (workload_id, phase) in recorded:
                lags[phase].append((recorded[(workload_id, phase)].timestamp() - writes[(pod, phase)]) * 1000)
    return lags


def tracking_lag(engine: Engine) -> Iterator[tuple[str, float]]:
    """Staggered arrivals (exponential gaps, mean 100 ms) then a burst; lag per transition and pattern."""
    from django.db import connection

    from jobs.models import State, Workload
    from jobs.services.submission.intake import workload_submit

    staggered_n, burst_n = _env_int("BENCH_LAG_STAGGERED", 300), _env_int("BENCH_LAG_BURST", 150)
    with connection.cursor() as cursor:
        cursor.execute(RECORDER_SQL)
    rng = random.Random(11)
    results: dict[str, dict[str, list[float]]] = {}
    try:
        for pattern, n in (("staggered", staggered_n), ("burst", burst_n)):
            team, user, namespace = _fresh_namespace(engine)

            def submit(i: int, team=team, user=user) -> int:
                try:
                    gpu = ("k2", "v100", "p100")[i % 3]
                    spec = {"image": "ubuntu", "gpu_type": gpu, "env": {"SIM_RUN_SECONDS": "2"}}
                    return workload_submit(team=team, owner=user, spec=spec).id
                finally:
                    connection.close()

            if pattern == "staggered":
                ids = []
                for i in range(n):
                    ids.append(submit(i))
                    time.sleep(rng.expovariate(10))
            else:
                with ThreadPoolExecutor(CLIENTS) as pool:
                    ids = list(pool.map(submit, range(n)))
            wait_until(
                lambda ids=ids: Workload.objects.filter(id__in=ids, state__in=State.final()).count() == len(ids),
                600,
                f"{pattern}: not every workload finished",
                interval=0.5,
            )
            results[pattern] = _lags(engine, namespace, ids)
            engine.delete_namespace(namespace)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS bench_record_transition ON jobs_workloadevent")
    for pattern, lags in results.items():
        for phase, name in (("Running", "running"), ("final", "final")):
            values = lags[phase]
            yield f"tracking_lag_{pattern}_{name}_samples", len(values)
            yield f"tracking_lag_{pattern}_{name}_p50_ms", round(percentile(values, 50), 1)
            yield f"tracking_lag_{pattern}_{name}_p95_ms", round(percentile(values, 95), 1)
    every = [v for lags in results.values() for values in lags.values() for v in values]
    yield "tracking_lag_samples", len(every)
    yield "tracking_lag_p95_ms", round(percentile(every, 95), 1)


LAG_FIGURES = (
    *(
        f"tracking_lag_{pattern}_{phase}_{what}"
        for pattern in ("staggered", "burst")
        for phase in ("running", "final")
        for what in ("samples", "p50_ms", "p95_ms")
    ),
    "tracking_lag_samples",
    "tracking_lag_p95_ms",
)


# --- crash safety -----------------------------------------------------------------------------------
TASK_LINE = re.compile(r"Task (jobs\.tasks\.\w+)\[([0-9a-f-]+)\] (received|succeeded|retry|raised)")


def _in_flight(log_path, offset: int) -> int:
    """Tasks the worker received since `offset` in its log and had not finished (its own log lines)."""
    open_tasks: set[str] = set()
    with open(log_path, errors="replace") as fh:
        fh.seek(offset)
        for line in fh:
            match = TASK_LINE.search(line)
            if match:
                if match.group(3) == "received":
                    open_tasks.add(match.group(2))
                else:
                    open_tasks.discard(match.group(2))
    return len(open_tasks)


AIM_SECONDS = 3.0  # how long a kill may wait for the worker to be in the middle of a task


def crash(engine: Engine) -> Iterator[tuple[str, float]]:
    """kill -9 of the worker at random points while 200 workloads go through; every Job and pod ever
    created is counted by watches started before the first submission."""
    from jobs.models import State, Workload
    from jobs.services.submission.intake import workload_submit

    n = _env_int("BENCH_CRASH_N", 200)
    team, user, namespace = _fresh_namespace(engine)
    team.refresh_from_db()
    from jobs.models import Quota

    Quota.objects.filter(team=team).update(max_gpus=16)
    jobs = ObjectWatch(engine.admin, f"/apis/batch/v1/namespaces/{namespace}/jobs", label="gpuportal.dev/workload")
    pods = ObjectWatch(engine.admin, f"/api/v1/namespaces/{namespace}/pods", label="gpuportal.dev/workload")
    worker_log = engine.log_dir / "worker.log"
    rng = random.Random(7)
    kills = in_flight_kills = 0
    offset = worker_log.stat().st_size if worker_log.exists() else 0

    def kill() -> None:
        """Wait up to AIM_SECONDS for the worker to hold a task it has not finished (its log says so), then
        kill it: a kill between tasks proves little. Counted as in flight only if the log said so."""
        nonlocal kills, in_flight_kills, offset
        aim_until = time.monotonic() + AIM_SECONDS
        while (busy := _in_flight(worker_log, offset)) == 0 and time.monotonic() < aim_until:
            time.sleep(0.005)
        engine.processes.kill("worker")
        offset = worker_log.stat().st_size
        engine.processes.start("worker")
        kills += 1
        in_flight_kills += busy > 0

    submitting = threading.Event()
    submitting.set()

    def killer() -> None:  # beside the submissions, so it can watch for a task in flight while they go on
        while submitting.is_set():
            time.sleep(rng.uniform(0.5, 2.0))
            if submitting.is_set():
                kill()

    killing = threading.Thread(target=killer, name="crash-killer", daemon=True)
    killing.start()
    ids = []
    try:
        for i in range(n):
            spec = {"image": "ubuntu", "gpu_type": ("p100", "k2", "v100")[i % 3], "env": {"SIM_RUN_SECONDS": "1"}}
            ids.append(workload_submit(team=team, owner=user, spec=spec).id)
    finally:
        submitting.clear()
        killing.join()
    for _ in range(4):
        time.sleep(rng.uniform(0.5, 2.0))
        kill()
    with contextlib.suppress(TimeoutError):  # what did not finish is counted as lost below
        wait_until(
            lambda: Workload.objects.filter(id__in=ids, state=State.SUCCEEDED).count() == n, 400, "crash run", 0.5
        )
    time.sleep(2)  # a late duplicate would show in the watches by now
    jobs.stop()
    pods.stop()
    uids = set(Workload.objects.filter(id__in=ids).values_list("uid", flat=True))
    duplicates = sum(
        max(0, len(jobs.uids_by_label.get(u, ())) - 1) + max(0, len(pods.uids_by_label.get(u, ())) - 1) for u in uids
    )
    engine.delete_namespace(namespace)
    yield "crash_kills", kills
    yield "crash_kills_in_flight", in_flight_kills
    yield "crash_duplicates", duplicates
    yield "crash_lost", n - Workload.objects.filter(id__in=ids, state=State.SUCCEEDED).count()
