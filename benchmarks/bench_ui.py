"""Server time of the researcher pages with 100,000 workloads in one team, on the run's PostgreSQL.

ui_list_p95_ms: the workload list (first page, mine; and the team's, filtered), ui_dashboard_p95_ms: the
dashboard; each with its median (_p50_). Measured through Django's test Client (request to response, no network), after warm-up.
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta

WORKLOADS = 100_000
ROUNDS = 200


# What this module prints (benchmarks/__main__.py prints a missing one as an ERROR line).
FIGURES = (
    "ui_list_p95_ms",
    "ui_list_p50_ms",
    "ui_dashboard_p95_ms",
    "ui_dashboard_p50_ms",
)


def p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[94]


def run(ctx) -> Iterator[tuple[str, float]]:
    ctx.django()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client, override_settings
    from django.utils import timezone

    from identity.models import Membership, Role
    from jobs.models import GpuNode, GpuType, Quota, State, Team, Workload, WorkloadEvent

    suffix = uuid.uuid4().hex[:6]
    now = timezone.now()
    types = []
    for slug in ("p100", "k2", "v100"):
        gpu_type, _ = GpuType.objects.get_or_create(
            slug=slug, defaults={"display_name": slug.upper(), "node_label_value": slug}
        )
        types.append(gpu_type)
        GpuNode.objects.get_or_create(
            name=f"bench-{suffix}-{slug}",
            defaults={
                "gpu_type": gpu_type,
                "gpus_allocatable": 8,
                "gpus_capacity": 8,
                "ready": True,
                "last_seen_at": now,
            },
        )
    team = Team.objects.create(name=f"Bench {suffix}", slug=f"bench-{suffix}")
    users = get_user_model()
    researcher = users.objects.create_user(f"bench-{suffix}", password=None)
    colleague = users.objects.create_user(f"bench-mate-{suffix}", password=None)
    Membership.objects.create(user=researcher, team=team, role=Role.MEMBER)
    Membership.objects.create(user=colleague, team=team, role=Role.MEMBER)
    for gpu_type in types:
        Quota.objects.create(team=team, gpu_type=gpu_type, max_gpus=16)

    rng = random.Random(4)
    # Mostly finished history, some running and a queue, as a busy team accumulates; 80% the researcher's.
    states = [State.SUCCEEDED] * 70 + [State.FAILED] * 10 + [State.CANCELLED] * 8 + [State.RUNNING] * 6
    states += [State.QUEUED] * 4 + [State.PENDING] * 2
    workloads = []
    for i in range(WORKLOADS):
        state = rng.choice(states)
        created = now - timedelta(minutes=WORKLOADS - i)
        started = created + timedelta(seconds=30) if state in (State.RUNNING, State.SUCCEEDED, State.FAILED) else None
        workloads.append(
            Workload(
                team=team,
                owner=researcher if rng.random() < 0.8 else colleague,
                name=f"job-{i}",
                kind="batch" if rng.random() < 0.85 else "service",
                image="nvidia/cuda:12.2.0-base-ubuntu22.04",
                gpu_type=rng.choice(types),
                gpu_count=rng.choice([1, 1, 2, 4]),
                time_limit_seconds=3600,
                state=state,
                namespace=team.namespace,
                k8s_name=f"bench-{i}",
                created_at=created,
                started_at=started,
                finished_at=started + timedelta(minutes=20) if started and state != State.RUNNING else None,
                priority=rng.choice([0, 0, 0, 5]),
            )
        )
    Workload.objects.bulk_create(workloads, batch_size=2000)
    WorkloadEvent.objects.bulk_create(
        (WorkloadEvent(workload=w, to_state=State.QUEUED, reason="Submitted") for w in workloads), batch_size=2000
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")

    pages = {
        "ui_list_p95_ms": [("/workloads/", {}), ("/workloads/", {"scope": "team", "state": "finished", "page": "3"})],
        "ui_dashboard_p95_ms": [("/", {})],
    }
    client = Client()
    client.force_login(researcher)
    try:
        with override_settings(
            ALLOWED_HOSTS=["testserver"],
            STORAGES={
                "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
                "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
            },
        ):
            for metric, requests in pages.items():
                samples: list[float] = []
                for url, query in requests:
                    for _ in range(10):  # warm-up: connections, template caches, plans
                        client.get(url, query)
                    for _ in range(ROUNDS):
                        started = time.perf_counter()
                        response = client.get(url, query)
                        samples.append((time.perf_counter() - started) * 1000)
                        if response.status_code != 200:
                            raise RuntimeError(f"{url} answered {response.status_code}")
                yield metric, round(p95(samples), 2)
                # The median too: on a shared machine the tail says as much about neighbours as about us.
                yield metric.replace("_p95_", "_p50_"), round(statistics.median(samples), 2)
    finally:
        WorkloadEvent.objects.filter(workload__team=team).delete()
        Workload.objects.filter(team=team).delete()
        GpuNode.objects.filter(name__startswith=f"bench-{suffix}-").delete()
        # The team and its members stay: membership audit rows refer to them (the run's database is
        # thrown away at the end anyway).
