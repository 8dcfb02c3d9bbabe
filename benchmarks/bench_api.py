"""The REST API on PostgreSQL with 100,000 workloads.

Lines printed:
  api_list_p95_ms              GET /api/v1/workloads/ (50 per page, newest first) as a member of the team
                               that owns all 100,000 workloads (200 of them queued, 50 running); p95 over
                               first pages and cursor pages up to 20 deep, through the full stack (token
                               auth, throttle, filters, paging, queue positions, serializer) with Django's
                               test client in process. Target ≤ 50 ms.
  api_list_p50_ms              the median of the same requests
  api_list_filtered_p95_ms     the same with ?state=SUCCEEDED&gpu_type=<slug>
  api_list_queries_per_page    SQL queries for one page of queued workloads (page 1); a page without
                               queued ones needs one fewer. Independent of page size and table size.
  api_submit_p95_ms            POST /api/v1/workloads/ with an Idempotency-Key, 20 client threads at once,
                               each submitting in a loop (validation, admission request, stored response),
                               over HTTP (urllib3, kept-alive connections) to the portal under gunicorn run as the chart runs it (3 workers,
                               gthread, 8 threads each), on its own processes beside this one
  api_submit_per_s             submissions per second over that run
  api_submit_in_process_p95_ms the same 20 clients through Django's test client in this process (one GIL
                               for clients and server alike: no deployment runs like this)
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from typing import Any

from benchmarks import web

WORKLOADS = int(os.environ.get("BENCH_API_WORKLOADS") or 100_000)  # smaller only while developing
LIST_SAMPLES = 200
SUBMIT_CLIENTS = 20
SUBMITS_PER_CLIENT = 15


# What this module prints (benchmarks/__main__.py prints a missing one as an ERROR line).
FIGURES = (
    "api_list_p95_ms",
    "api_list_p50_ms",
    "api_list_filtered_p95_ms",
    "api_list_queries_per_page",
    "api_submit_p95_ms",
    "api_submit_per_s",
    "api_submit_in_process_p95_ms",
)


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[94]


def _setup() -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from api.tokens import token_create
    from identity.models import Membership
    from jobs.models import AllowedRegistry, GpuNode, GpuType, Quota, State, Team, Workload

    run = uuid.uuid4().hex[:6]
    team = Team.objects.create(name=f"Bench {run}", slug=f"bench-{run}")
    # Its own node label: a type labelled like a real pool (p100) would take that pool's nodes in the
    # inventory (types are matched in slug order) and leave "Tesla P100" with none for the engine parts.
    gpu_type = GpuType.objects.create(
        slug=f"bp100-{run}", display_name=f"Bench P100 {run}", node_label_value=f"bench-{run}"
    )
    GpuNode.objects.create(
        name=f"bench-node-{run}", gpu_type=gpu_type, gpus_capacity=8, gpus_allocatable=8, ready=True,
        last_seen_at=timezone.now(),
    )  # fmt: skip
    Quota.objects.create(team=team, gpu_type=gpu_type, max_gpus=8)
    AllowedRegistry.objects.get_or_create(host="docker.io")
    users = [get_user_model().objects.create_user(f"bench-{run}-{i}") for i in range(SUBMIT_CLIENTS)]
    Membership.objects.bulk_create(Membership(user=u, team=team) for u in users)
    tokens = [token_create(user=u, name="bench").raw for u in users]

    # A year of history: finished work, and at the newest end what a busy team has open at once
    # (200 queued, 50 running), so the first pages carry queue positions.
    finished = [State.SUCCEEDED] * 8 + [State.FAILED, State.CANCELLED]
    start = timezone.now() - timedelta(days=365)
    rng = random.Random(7)
    batch: list[Workload] = []
    for i in range(WORKLOADS):
        created = start + timedelta(seconds=i * 300)
        newest = WORKLOADS - i
        state = State.QUEUED if newest <= 200 else State.RUNNING if newest <= 250 else rng.choice(finished)
        batch.append(
            Workload(
                team=team,
                owner=users[i % len(users)],
                name=f"job-{i}",
                kind="batch",
                image="docker.io/library/python:3.12",
                gpu_type=gpu_type,
                gpu_count=1 + i % 4,
                command=["python", "train.py"],
                time_limit_seconds=3600,
                state=state,
                created_at=created,
                started_at=created + timedelta(seconds=30) if state != State.QUEUED else None,
                finished_at=created + timedelta(seconds=900) if state in State.final() else None,
                namespace=team.namespace,
                k8s_name=f"wl-{i}",
            )
        )
        if len(batch) == 5000:
            Workload.objects.bulk_create(batch)
            batch = []
    if batch:
        Workload.objects.bulk_create(batch)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE jobs_workload")
    return {"team": team, "gpu_type": gpu_type, "tokens": tokens}


def _client(token: str):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _timed_get(client, url: str) -> tuple[float, dict]:
    started = time.perf_counter()
    response = client.get(url)
    elapsed = (time.perf_counter() - started) * 1000
    assert response.status_code == 200, response.content[:300]
    return elapsed, response.json()


def _list_p95(client, first_url: str) -> tuple[float, float]:
    """p95 over first pages and pages reached by following the cursor (up to 20 deep)."""
    for _ in range(10):  # warm caches and connections
        _timed_get(client, first_url)
    timings: list[float] = []
    url = first_url
    while len(timings) < LIST_SAMPLES:
        elapsed, page = _timed_get(client, url)
        timings.append(elapsed)
        nxt = page.get("next")
        url = nxt if nxt and len(timings) % 20 else first_url
    return p95(timings), statistics.median(timings)


def _queries(client, url: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        client.get(url)
    return len(captured.captured_queries)


def _submit_run(
    tokens: list[str], gpu_type_slug: str, base_url: str | None = None, *, each: int = SUBMITS_PER_CLIENT
) -> tuple[float, float]:
    """20 clients submitting at once: through Django's test client, or over HTTP to `base_url`."""
    from django.db import connection

    api = web.Api(base_url, len(tokens)) if base_url else None
    barrier = threading.Barrier(len(tokens))
    timings: list[float] = []
    first_ms: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()

    def client_loop(token: str) -> None:
        post = partial(api.submit, token) if api else _test_client_poster(token)
        mine = []
        try:
            barrier.wait()
            for _ in range(each):
                spec = {"image": "docker.io/library/python:3.12", "gpu_type": gpu_type_slug, "command": ["true"]}
                started = time.perf_counter()
                status, body = post(spec, str(uuid.uuid4()))
                mine.append((time.perf_counter() - started) * 1000)
                if status != 201:
                    failures.append(f"{status}: {body[:200]!r}")
        finally:
            connection.close()
            with lock:
                timings.extend(mine)
                first_ms.extend(mine[:1])

    threads = [threading.Thread(target=client_loop, args=(t,)) for t in tokens]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"{len(failures)} submissions failed, e.g. {failures[0]}")
    ordered = sorted(timings)
    where = ("HTTP" if base_url else "in process") + (", warm-up" if each != SUBMITS_PER_CLIENT else "")
    print(
        f"# submit ({where}) ms: p50 {statistics.median(ordered):.1f}, p90 {ordered[int(0.9 * len(ordered))]:.1f}, "
        f"p99 {ordered[int(0.99 * len(ordered))]:.1f}, max {ordered[-1]:.1f}; first per client "
        f"{statistics.median(first_ms):.1f} (median)",
        flush=True,
    )
    return p95(timings), len(timings) / wall


def _test_client_poster(token: str):
    client = _client(token)

    def post(spec: dict, key: str) -> tuple[int, bytes]:
        response = client.post("/api/v1/workloads/", spec, format="json", HTTP_IDEMPOTENCY_KEY=key)
        return response.status_code, response.content

    return post


def run(ctx) -> Iterator[tuple[str, float | int]]:
    ctx.django()
    import logging

    from django.conf import settings
    from django.test.utils import override_settings

    logging.getLogger("jobs.services.dispatch").setLevel(logging.ERROR)  # no broker consumer needed here
    rest = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"token": "1000000/min"}}
    with override_settings(ALLOWED_HOSTS=["*"], REST_FRAMEWORK=rest, DEBUG=False):
        world = _setup()
        client = _client(world["tokens"][0])
        slug = world["gpu_type"].slug
        plain = _list_p95(client, "/api/v1/workloads/?page_size=50")
        filtered = _list_p95(client, f"/api/v1/workloads/?page_size=50&state=SUCCEEDED&gpu_type={slug}")
        yield "api_list_p95_ms", round(plain[0], 2)
        yield "api_list_p50_ms", round(plain[1], 2)
        yield "api_list_filtered_p95_ms", round(filtered[0], 2)
        first = _queries(client, "/api/v1/workloads/?page_size=50")
        small = _queries(client, "/api/v1/workloads/?page_size=5")
        url = "/api/v1/workloads/?page_size=50"
        for _ in range(19):
            url = client.get(url).json()["next"]
        deep = _queries(client, url)  # page 20: no queued workloads on it
        if small != first or deep not in (first, first - 1):
            raise RuntimeError(f"queries per page vary: page 1 {first}, 5 per page {small}, page 20 {deep}")
        yield "api_list_queries_per_page", first
        in_process_p95, _ = _submit_run(world["tokens"], slug)
        with web.gunicorn(ctx) as base_url:
            # Warm-up: as many clients at once as the web process has threads (each thread's first request
            # opens its database connection, each process fills its caches per person), a few times each;
            # its times are printed, not judged.
            threads = web.GUNICORN_WORKERS * web.GUNICORN_THREADS
            _submit_run([world["tokens"][i % len(world["tokens"])] for i in range(threads)], slug, base_url, each=3)
            submit_p95, rate = _submit_run(world["tokens"], slug, base_url)
        yield "api_submit_p95_ms", round(submit_p95, 2)
        yield "api_submit_per_s", round(rate, 1)
        yield "api_submit_in_process_p95_ms", round(in_process_p95, 2)
