"""How cost grows with the work (issue 41, item 3): the passes and pages that read the live workloads, at
1k, 10k and 100k of them, each point measured in the same run, with the slope between points.

N live workloads are N queued plus 0.3 N running (as the 10k admission figure: 10,000 queued and 3,000
running), over 10 teams x 3 GPU types, inserted with one SQL statement per state so 100k costs seconds to
set up. The running ones are on simulated nodes: the tracker's view holds a Job and a running pod for each,
as its watches would. The points grow in place (1k, then 9k more, then 90k more) and the rows are deleted at
the end.

Per point: one admission pass (`admit_all`; the admitted are put back in the queue between passes), the
tracker's periodic resync from its view (`sync_workloads(full=True)` and `reap_finished`), the queue page of
one team (a member's GET /queue/) and the first page of the API list (GET /api/v1/workloads/). Each is timed
on the wall clock and on CPU counters (this thread plus the PostgreSQL backend serving it: what a shared
machine's neighbours disturb least), and its SQL statements are counted.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

DEFAULT_SIZES = (1_000, 10_000, 100_000)
# A plain `make bench` (every module) stops at 10k: the 100k point takes minutes on a loaded 2-core machine.
ALL_MODULES_SIZES = (1_000, 10_000)
RUNNING_SHARE = 0.3
PASSES = 3
PAGE_LOADS = 5
MEASURES = ("admission", "resync", "estimates", "queue_page", "api_list")
# The pages rendered without `collectstatic` (as bench_ui does): the manifest storage needs its manifest.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}


def asked_by_name() -> bool:
    """Whether this run was asked for the scale module by name (`make bench BENCH=scale`)."""
    return any(a in ("scale", "bench_scale") for a in sys.argv[1:])


def sizes() -> tuple[int, ...]:
    raw = os.environ.get("BENCH_SCALE_SIZES", "")
    if not raw:
        return DEFAULT_SIZES if asked_by_name() else ALL_MODULES_SIZES
    return tuple(sorted(int(s) for s in raw.split(",") if s.strip()))


def label(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def figures() -> list[str]:
    points = sizes()
    names: list[str] = []
    for what in MEASURES:
        for n in points:
            names += [f"scale_{what}_{label(n)}_{unit}" for unit in ("ms", "cpu_ms", "queries")]
        for small, large in itertools.pairwise(points):
            names.append(f"scale_{what}_cpu_ratio_{label(large)}_{label(small)}")
    if 100_000 in points:
        names.append("admission_100k_queued_ms")
    return names


# Every NOT NULL column of jobs_workload (as bench_engine.FINISHED_ROWS_SQL): a column added without a
# database default must be given here too (tests/unit/test_bench_modules.py reads a few rows back).
LIVE_ROWS_SQL = """
INSERT INTO jobs_workload (uid, team_id, owner_id, name, kind, image, gpu_type_id, gpu_count, command, args,
    env, time_limit_seconds, priority, state, reason, message, namespace, k8s_name, node_name, pod_name,
    pod_uid, created_at, submitted_at, admitted_at, started_at, state_changed_at, updated_at, shared_with_team,
    attempt, borrowed, restartable, wait_reason, mounts, secrets, retryable_exit_codes, checkpoint_workspace,
    retries, lost_gpu_seconds)
SELECT %(tag)s || lpad(g::text, 11, '0'), (%(teams)s::bigint[])[1 + g %% 10],
    (%(owners)s::bigint[])[1 + (g / 10) %% 4], 'w', 'batch', 'ubuntu', (%(types)s::bigint[])[1 + (g / 40) %% 3],
    CASE WHEN %(running)s THEN 1 ELSE (ARRAY[1, 2, 4, 8])[1 + (g * 7) %% 4] END, '[]', '[]', '[]',
    CASE WHEN %(running)s THEN 86400 ELSE 3600 END,
    CASE WHEN NOT %(running)s AND (g / 10) %% 10 = 3 THEN 10 ELSE 0 END,
    CASE WHEN %(running)s THEN 'RUNNING' ELSE 'QUEUED' END, CASE WHEN %(running)s THEN 'Running' ELSE '' END,
    CASE WHEN %(running)s THEN 'Running on sim-node-' || (g %% 500) || '.' ELSE '' END,
    CASE WHEN %(running)s THEN (%(namespaces)s::text[])[1 + g %% 10] ELSE '' END,
    CASE WHEN %(running)s THEN 'w-' || %(tag)s || lpad(g::text, 11, '0') ELSE '' END,
    CASE WHEN %(running)s THEN 'sim-node-' || (g %% 500) ELSE '' END,
    CASE WHEN %(running)s THEN 'w-' || %(tag)s || lpad(g::text, 11, '0') || '-abcde' ELSE '' END,
    CASE WHEN %(running)s THEN 'pod-' || %(tag)s || lpad(g::text, 11, '0') ELSE '' END, %(now)s - (%(last)s - g) * interval '1 second',
    CASE WHEN %(running)s THEN %(began)s END, CASE WHEN %(running)s THEN %(began)s END,
    CASE WHEN %(running)s THEN %(began)s END,
    %(now)s, %(now)s, false, 0, false, false, '', '[]', '[]', '[]', 'home', 0, 0
FROM generate_series(%(first)s::int, %(last)s::int) AS g
"""


def insert_live(first: int, last: int, *, running: bool, tag: str, teams, owners, types, now: datetime) -> None:
    """Rows `first`..`last` (inclusive) of one state in one statement: round robin over 10 teams, 4 owners
    and 3 GPU types; queued ones of 1, 2, 4 or 8 GPUs (a tenth at priority 10), running ones of 1 GPU in
    their team's namespace on one of 500 simulated nodes since an hour ago. Uids are `tag` + the row number."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            LIVE_ROWS_SQL,
            {
                "tag": tag, "teams": [t.id for t in teams], "owners": [u.id for u in owners],
                "types": [t.id for t in types], "namespaces": [t.namespace for t in teams], "running": running,
                "first": first, "last": last, "now": now, "began": now - timedelta(hours=1),
            },
        )  # fmt: skip


def _backend_cpu() -> Callable[[], float]:
    """CPU seconds so far of the PostgreSQL backend serving this thread's connection (user + system)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    tick = os.sysconf("SC_CLK_TCK")

    def read() -> float:
        try:
            stat = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 - read at once
        except OSError:  # PostgreSQL on another machine: its CPU is not ours to read
            return 0.0
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / tick

    return read


class Meter:
    """Wall and CPU (this thread + its PostgreSQL backend) of one call, and the statements it sent."""

    def __init__(self) -> None:
        self.backend = _backend_cpu()

    def measure(self, call: Callable[[], object]) -> tuple[float, float, int]:
        from django.db import connection

        statements = [0]

        def count(execute, sql, params, many, context):
            statements[0] += 1
            return execute(sql, params, many, context)

        pg, cpu, wall = self.backend(), time.thread_time(), time.perf_counter()
        with connection.execute_wrapper(count):
            call()
        wall, cpu, pg = time.perf_counter() - wall, time.thread_time() - cpu, self.backend() - pg
        return wall * 1000, (cpu + pg) * 1000, statements[0]


def _view_of(rows) -> object:
    """The tracker's view with a Job and a running pod for each (uid, namespace, k8s_name, node_name,
    pod_uid, started_at) row, as the watches leave it while nothing changes: what the rows already say."""
    from benchmarks.profile_tracker import _objects
    from jobs.services.cluster import watch_loop

    view = watch_loop.ClusterView()
    for uid, namespace, k8s_name, node_name, pod_uid, started_at in rows:
        job, pod = _objects(SimpleNamespace(uid=uid, namespace=namespace, k8s_name=k8s_name), succeeded=False,
                            started=started_at)  # fmt: skip
        pod["spec"]["nodeName"] = node_name
        pod["metadata"]["uid"] = pod_uid
        view.put("Job", job)
        view.put("Pod", pod)
    return view


def curve() -> Iterator[tuple[str, float]]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client, override_settings

    from identity.models import Membership, Role
    from jobs.models import Cohort, GpuType, Quota, State, Team, Workload
    from jobs.services.cluster import watch_loop
    from jobs.services.queue.admission import admit_all
    from jobs.services.queue.start_estimates import estimate_all
    from portal.celery import app

    run = uuid.uuid4().hex[:6]
    tag = f"s{run[:3]}"
    types = [
        GpuType.objects.create(
            slug=f"scl-{run}-{i}", display_name=f"Scale {run} {i}", node_label_value=f"scl-{run}-{i}"
        )
        for i in range(3)
    ]
    cohort = Cohort.objects.create(name=f"Scale {run}")
    teams = [
        Team.objects.create(
            slug=f"scl-{run}-{i}", name=f"Scale {run} {i}", monthly_gpu_hour_budget=10_000_000,
            cohort=cohort if i < 5 else None, fair_share=i in (0, 5),
        )
        for i in range(10)
    ]  # fmt: skip
    users = get_user_model()
    owners = [users.objects.create(username=f"scl-{run}-{u}") for u in range(4)]
    Membership.objects.bulk_create(Membership(team=t, user=u) for t in teams for u in owners)
    viewer = users.objects.create(username=f"scl-{run}-viewer")
    Membership.objects.create(team=teams[0], user=viewer, role=Role.MEMBER)
    quotas = Quota.objects.bulk_create(
        Quota(team=t, gpu_type=g, max_gpus=10, borrowing_limit=8 if t.cohort_id else 0) for t in teams for g in types
    )
    client = Client()
    client.force_login(viewer)
    meter = Meter()
    now = datetime.now(UTC)
    results: dict[tuple[str, int], tuple[float, float, int]] = {}
    queued_so_far = running_so_far = 0
    try:
        for n in sizes():
            queued, running = n, int(n * RUNNING_SHARE)
            began = time.perf_counter()
            insert_live(queued_so_far + 1, queued, running=False, tag=f"{tag}q", teams=teams, owners=owners,
                        types=types, now=now)  # fmt: skip
            insert_live(running_so_far + 1, running, running=True, tag=f"{tag}r", teams=teams, owners=owners,
                        types=types, now=now)  # fmt: skip
            queued_so_far, running_so_far = queued, running
            # Each team's quota holds what it runs (1-GPU each, running/30 per team and type) and 10 more.
            Quota.objects.filter(id__in=[q.id for q in quotas]).update(max_gpus=running // 30 + 10)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE jobs_workload")
            print(f"# scale {label(n)}: {queued} queued + {running} running inserted in "
                  f"{time.perf_counter() - began:.1f} s", flush=True)  # fmt: skip

            passes = []
            for _ in range(PASSES):
                passes.append(meter.measure(admit_all))
                Workload.objects.filter(team__in=teams, state=State.SUBMITTING).update(state=State.QUEUED)
            app.control.purge()  # the passes asked for Kubernetes objects; nobody is to create them
            results[("admission", n)] = _median(passes)

            view = _view_of(
                Workload.objects.filter(team__in=teams, state=State.RUNNING).values_list(
                    "uid", "namespace", "k8s_name", "node_name", "pod_uid", "started_at"
                )
            )

            def resync(view=view) -> None:
                watch_loop.sync_workloads(view, None, full=True)
                watch_loop.reap_finished(view)

            resync()  # the first one records what the rows lack (if anything); then the steady state
            results[("resync", n)] = _median([meter.measure(resync) for _ in range(PASSES)])

            # The periodic refresh of every cohort's stored start estimates (what the pages then show).
            estimate_all()  # the first stores every row's first estimate; then the steady state
            _profile("estimates", estimate_all)
            results[("estimates", n)] = _median([meter.measure(estimate_all) for _ in range(PASSES)])

            with override_settings(ALLOWED_HOSTS=["testserver"], STORAGES=STORAGES):
                for what, path in (("queue_page", "/queue/"), ("api_list", "/api/v1/workloads/")):
                    load = _page(client, path)
                    load()  # warm: templates, the session
                    _profile(what, load)
                    results[(what, n)] = _median([meter.measure(load) for _ in range(PAGE_LOADS)])
            for what in MEASURES:
                wall, cpu, statements = results[(what, n)]
                yield f"scale_{what}_{label(n)}_ms", round(wall, 1)
                yield f"scale_{what}_{label(n)}_cpu_ms", round(cpu, 1)
                yield f"scale_{what}_{label(n)}_queries", statements
            if n == 100_000:
                yield "admission_100k_queued_ms", round(results[("admission", n)][0], 1)
    finally:
        _delete(teams)
        app.control.purge()
    points = sizes()
    for what in MEASURES:
        for small, large in itertools.pairwise(points):
            ratio = results[(what, large)][1] / max(results[(what, small)][1], 0.001)
            yield f"scale_{what}_cpu_ratio_{label(large)}_{label(small)}", round(ratio, 2)


def _profile(what: str, call: Callable[[], object]) -> None:
    """With BENCH_SCALE_PROFILE=`what`: one more call under the profiler, its top functions on stderr, and
    its statements by PostgreSQL's execution time where the run loads pg_stat_statements."""
    if os.environ.get("BENCH_SCALE_PROFILE") != what:
        return
    import cProfile
    import pstats

    from benchmarks import pgstat

    pgstat.reset(force=True)
    profile = cProfile.Profile()
    profile.runcall(call)
    pstats.Stats(profile, stream=sys.stderr).sort_stats("cumulative").print_stats(45)
    print("\n".join(pgstat.window(what, 1)[1]), file=sys.stderr)


def _page(client, path: str) -> Callable[[], None]:
    def load() -> None:
        response = client.get(path)
        if response.status_code != 200:
            raise RuntimeError(f"GET {path}: {response.status_code}")

    return load


def _median(samples: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    return (
        statistics.median(s[0] for s in samples),
        statistics.median(s[1] for s in samples),
        int(statistics.median(s[2] for s in samples)),
    )


def _delete(teams) -> None:
    from jobs.models import Workload

    Workload.objects.filter(team__in=teams).delete()
