"""Where a submission's time goes, stage by stage, with the SQL queries each stage sends.

    python -m devtools.testenv -- python -m benchmarks.profile_submit [N] [--api]   (GPUPORTAL_PG_DURABLE=1 as `make bench`)

Runs the engine's own service functions in this process, one workload at a time (no worker, no
concurrency), against the local cluster: the intake (`workload_submit`: membership, facts, rules, store,
admission) and then the worker's part (`workload_create_objects`: load, render, namespace, create,
transition) for each workload. Stages are timed by wrapping the service functions they call; what is
a caller's line counts only its own time, without that of the stages it calls.

With --api each submission is a POST /api/v1/workloads/ with a token and an Idempotency-Key through
Django's test client (the whole middleware and DRF stack, in process), and the REST view's own parts
get lines of their own: authentication, throttling, parsing, the idempotency record, the response.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from benchmarks.context import BenchContext

own_time: dict[str, float] = defaultdict(float)  # a stage's time less that of the stages it called
queries: dict[str, int] = defaultdict(int)  # queries sent while a stage was the innermost one
stack: list[list[Any]] = []  # [name, time spent in called stages]


@contextmanager
def stage(name: str):
    frame: list[Any] = [name, 0.0]
    stack.append(frame)
    started = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - started
        stack.pop()
        own_time[name] += elapsed - frame[1]
        if stack:
            stack[-1][1] += elapsed


def wrap(module: Any, attribute: str, name: str) -> None:
    original: Callable = getattr(module, attribute)

    def timed(*args: Any, **kwargs: Any) -> Any:
        with stage(name):
            return original(*args, **kwargs)

    setattr(module, attribute, timed)


def count_queries(execute, sql, params, many, context):
    queries[stack[-1][0] if stack else "outside"] += 1
    return execute(sql, params, many, context)


def wrap_api() -> None:
    """Time the REST create path's own parts (the view's time less these is DRF and the view itself)."""
    from api import authentication, throttling, views

    wrap(authentication.ApiTokenAuthentication, "authenticate", "api: token authentication")
    wrap(throttling, "count_together", "api: throttling (per token and per person)")
    wrap(views, "parse_submission", "api: parse the body")
    wrap(views.access, "resolve_team_to_submit", "api: resolve the team (with the intake facts)")
    wrap(views, "create_once", "api: idempotency record")
    wrap(views.WorkloadViewSet, "_render_stored", "api: render the response")
    wrap(views, "workload_submit", "intake (workload_submit)")


def main(argv: list[str]) -> int:
    api = "--api" in argv
    argv = [a for a in argv if a != "--api"]
    n = int(argv[0]) if argv else 100
    ctx = BenchContext()
    try:
        ctx.django()
        from django.db import connection

        from benchmarks.engine import Engine
        from benchmarks.engine_flow import _fresh_namespace
        from jobs.kube import objects
        from jobs.models import Workload
        from jobs.services import provisioning
        from jobs.services.cluster import object_creation
        from jobs.services.submission import intake, intake_facts

        engine = Engine(ctx, start_processes=False)
        team, user, _ = _fresh_namespace(engine)  # set up and usable by the portal (RBAC) before timing
        wrap(intake_facts, "snapshot", "intake: gather facts")
        wrap(intake, "validate_submission", "intake: validation rules")
        wrap(intake, "create_with_fresh_uid", "intake: store workload")
        wrap(intake, "admit_now", "intake: admission (+ enqueue)")
        wrap(object_creation, "spec_for", "worker: render spec")
        wrap(objects, "make_objects", "worker: render manifests")
        wrap(provisioning, "namespace_ensure", "worker: namespace ensure")
        wrap(object_creation, "_create_or_adopt", "worker: create in API server")
        wrap(object_creation, "transition", "worker: transition to PENDING")
        spec = {"image": "ubuntu", "gpu_type": "k2", "env": {"SIM_RUN_SECONDS": "600"}}

        def submit(**kwargs) -> int:
            return intake.workload_submit(**kwargs).id

        if api:
            submit = api_submitter(user)
            wrap_api()
        with connection.execute_wrapper(count_queries):
            for _ in range(3):  # warm-up: namespace, connections, caches
                object_creation.workload_create_objects(submit(team=team, owner=user, spec=spec))
            own_time.clear()
            queries.clear()
            ids = []
            started = time.perf_counter()
            for _ in range(n):
                with stage("api: the rest of the view and DRF" if api else "intake (workload_submit)"):
                    ids.append(submit(team=team, owner=user, spec=spec))
            intake_s = time.perf_counter() - started
            started = time.perf_counter()
            for workload_id in ids:
                with stage("worker (workload_create_objects)"):
                    object_creation.workload_create_objects(workload_id)
            worker_s = time.perf_counter() - started
        created = Workload.objects.filter(id__in=ids, k8s_name__gt="").count()
        print(
            f"# {n} workloads one at a time; {created} created; intake {n / intake_s:.1f}/s, worker {n / worker_s:.1f}/s"
        )
        print(f"# {'stage (own time, without the stages it calls)':50} {'ms/workload':>12} {'queries/workload':>17}")
        for name in sorted(own_time, key=lambda k: (not k.startswith("api"), not k.startswith("intake"), k)):
            print(f"{name:52} {own_time[name] / n * 1000:12.2f} {queries.get(name, 0) / n:17.2f}")
        print(f"{'total':52} {sum(own_time.values()) / n * 1000:12.2f} {sum(queries.values()) / n:17.2f}")
        engine.delete_namespace(team.namespace)
        engine.close()
    finally:
        ctx.close()
    return 0


def api_submitter(user):
    """A submit function that goes through POST /api/v1/workloads/ as `user`; returns the workload id."""
    import uuid

    from django.conf import settings
    from rest_framework.test import APIClient

    from api.tokens import token_create
    from jobs.models import Workload

    settings.ALLOWED_HOSTS = ["*"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_create(user=user, name='profile').raw}")

    def submit(*, team, owner, spec) -> int:
        response = client.post(
            "/api/v1/workloads/",
            {**spec, "team": team.slug, "env": [{"name": k, "value": v} for k, v in spec["env"].items()]},
            format="json",
            HTTP_IDEMPOTENCY_KEY=str(uuid.uuid4()),
        )
        if response.status_code != 201:
            raise RuntimeError(f"POST answered {response.status_code}: {response.content[:300]!r}")
        with stage("profiler: look up the new id"):
            return Workload.objects.values_list("id", flat=True).get(uid=response.json()["uid"])

    return submit


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
