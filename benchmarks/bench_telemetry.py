"""The portal's side of GPU telemetry: storing one agent report.

Lines printed:
  telemetry_ingest_ms          one 8-GPU report (4 GPUs busy, each with a running workload's pod)
                               POSTed through the full Django stack to /api/v1/agent/reports and
                               stored; median of 300 reports, each a new sample (no duplicates)
  telemetry_ingest_ms_p95      the 95th percentile of the same
  telemetry_ingest_queries     SQL queries one such report costs
  telemetry_report_bytes       the size of that report's JSON body
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

REPORTS = 300
GPUS = 8


# What this module prints (benchmarks/__main__.py prints a missing one as an ERROR line).
FIGURES = (
    "telemetry_ingest_ms",
    "telemetry_ingest_ms_p95",
    "telemetry_ingest_queries",
    "telemetry_report_bytes",
)


def run(ctx: Any) -> Iterator[tuple[str, float | int]]:
    ctx.django()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from agent.report import build_report
    from agent.simulated import BusyGpu, SimulatedSampler
    from jobs.models import GpuType, Kind, State, Team, Workload
    from telemetry.services.tokens import agent_token_issue

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    run_id = uuid.uuid4().hex[:8]
    team = Team.objects.create(name=f"Bench {run_id}", slug=f"bench-{run_id}")
    owner = get_user_model().objects.create_user(username=f"bench-{run_id}")
    gpu_type, _ = GpuType.objects.get_or_create(
        slug="bench-p100", defaults={"display_name": "Bench P100", "node_label_value": "bench-p100"}
    )
    node = f"bench-node-{run_id}"
    pods = {}
    for index in range(0, GPUS, 2):
        pod_uid = str(uuid.uuid4())
        Workload.objects.create(
            team=team, owner=owner, name=f"bench-{index}", kind=Kind.BATCH, image="nvidia/cuda:12.2.0-base",
            gpu_type=gpu_type, gpu_count=1, time_limit_seconds=3600, state=State.RUNNING, node_name=node,
            pod_uid=pod_uid, started_at=timezone.now(),
        )  # fmt: skip
        pods[index] = BusyGpu(pod_uid=pod_uid)
    _row, token = agent_token_issue(name=f"bench {run_id}", node=node)
    sampler = SimulatedSampler(node, GPUS, "Tesla P100-PCIE-16GB", "12.2", busy_fn=lambda: pods, seed=1)
    start = datetime.now(UTC) - timedelta(seconds=5 * (REPORTS + 10))
    bodies = [
        json.dumps(
            build_report(
                sampler.sample(),
                node=node,
                simulated=True,
                timestamp=start + timedelta(seconds=5 * i),
                interval_seconds=5.0,
                agent_version="bench",
            ).to_dict()
        )
        for i in range(REPORTS + 1)
    ]
    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    url = "/api/v1/agent/reports"
    # The first report creates the node's rows; time the steady state after it.
    assert client.post(url, bodies[0], content_type="application/json", **headers).status_code == 202
    times = []
    for body in bodies[1:-1]:
        began = time.perf_counter()
        response = client.post(url, body, content_type="application/json", **headers)
        times.append((time.perf_counter() - began) * 1000)
        if response.status_code != 202:
            raise RuntimeError(f"ingest answered {response.status_code}: {response.content[:300]!r}")
    with CaptureQueriesContext(connection) as queries:
        client.post(url, bodies[-1], content_type="application/json", **headers)
    yield "telemetry_ingest_ms", statistics.median(times)
    yield "telemetry_ingest_ms_p95", statistics.quantiles(times, n=20)[-1]
    yield "telemetry_ingest_queries", len(queries)
    yield "telemetry_report_bytes", len(bodies[-1])
