"""Workload engine benchmarks (issues 3 and 13). Every ratio is taken against a baseline run side by side.

Parts (BENCH_ENGINE_PARTS=admission,race,submit,lag,crash,usage selects some; all by default):
admission  admission_10k_queued_ms: one `admit_all` pass, 10,000 queued over 10 teams x 3 GPU types with budgets,
           a cohort and 3,000 running
race       quota_overadmissions: GPUs held beyond the quota after 50 concurrent submissions + admissions
submit     submit_throughput_ratio: portal (submission -> Job held by the API server) / raw client creates,
           alternating A/B rounds, fresh namespaces, counted by our own watch (engine_flow.py)
lag        tracking_lag_*: the simulator's successful status write -> the transition recorded in PostgreSQL
crash      crash_duplicates/_lost: kill -9 of the worker mid-task at random points; Jobs and pods ever created
drain      drain_10k_ratio: 10,000 queued workloads whose quota opens at once, until the API server holds all
           their Jobs / the raw client creating the same Jobs (engine_drain.py)
usage      usage_report_1m_*: a month's report over 1,000,000 workloads (roll-up, fully live, and the current
           month with days reset by late-finishing workloads)
benchmarks/README.md says what each figure measures and what could make it lie.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

from benchmarks import engine_drain
from benchmarks.context import BenchContext
from benchmarks.engine import Engine
from benchmarks.engine_flow import LAG_FIGURES, crash, submit_throughput, tracking_lag

PARTS: dict[str, tuple[str, ...]] = {
    "admission": ("admission_10k_queued_ms", "admission_10k_admitted_per_pass"),
    "race": ("quota_overadmissions",),
    "submit": (
        "submit_rounds", "submit_workloads_per_round", "submit_raw_creates_per_s", "submit_portal_per_s",
        "submit_throughput_ratio", "submit_throughput_ratio_min", "submit_throughput_ratio_max",
    ),
    "lag": LAG_FIGURES,
    "crash": ("crash_kills", "crash_kills_in_flight", "crash_duplicates", "crash_lost"),
    "drain": engine_drain.FIGURES,
    "usage": (
        "usage_report_1m_live_ms", "usage_report_1m_ms", "usage_report_1m_speedup", "usage_rollup_month_s",
        "usage_report_1m_current_month_ms", "usage_report_1m_current_month_live_days",
        "usage_report_1m_current_month_late_ends_ms", "usage_report_1m_current_month_late_ends_live_days",
    ),
}  # fmt: skip
ENGINE_PARTS = ("submit", "lag", "crash", "drain")


def selected_parts() -> list[str]:
    wanted = set(filter(None, os.environ.get("BENCH_ENGINE_PARTS", "").split(",")))
    unknown = wanted - set(PARTS)
    if unknown:
        raise ValueError(f"unknown BENCH_ENGINE_PARTS {sorted(unknown)}; have {list(PARTS)}")
    return [p for p in PARTS if not wanted or p in wanted]


def expected() -> list[str]:
    return [figure for part in selected_parts() for figure in PARTS[part]]


def admission_10k() -> Iterator[tuple[str, float]]:
    """`admit_all` with 10,000 queued workloads over 10 teams x 3 GPU types: every team with a monthly
    budget, five of them in a cohort (borrowing limits, one team using fair share), the others alone, and
    3,000 workloads already running (100 per team and type, some of them on borrowed GPUs)."""
    from django.contrib.auth import get_user_model

    from identity.models import Membership
    from jobs.models import Cohort, GpuType, Quota, State, Team, Workload
    from jobs.services.queue.admission import admit_all
    from portal.celery import app

    run = uuid.uuid4().hex[:6]
    types = [
        GpuType.objects.create(
            slug=f"adm-{run}-{i}", display_name=f"Admission {run} {i}", node_label_value=f"adm-{run}-{i}"
        )
        for i in range(3)
    ]
    cohort = Cohort.objects.create(name=f"Admission {run}")
    teams = [
        Team.objects.create(
            slug=f"adm-{run}-{i}", name=f"Admission {run} {i}", monthly_gpu_hour_budget=100_000,
            cohort=cohort if i < 5 else None, fair_share=i in (0, 5),
        )
        for i in range(10)
    ]  # fmt: skip
    users = [get_user_model().objects.create(username=f"adm-{run}-{u}") for u in range(4)]
    Membership.objects.bulk_create(Membership(team=t, user=u) for t in teams for u in users)
    Quota.objects.bulk_create(
        Quota(team=t, gpu_type=g, max_gpus=110, borrowing_limit=8 if t.cohort_id else 0) for t in teams for g in types
    )
    rng = random.Random(3)
    now = datetime.now(UTC)
    began = now - timedelta(hours=1)  # this month's use so far: 3,000 GPU-hours, far below the budgets
    # Already running: 100 one-GPU workloads per team and type (in the cohort, 4 of them borrowed).
    Workload.objects.bulk_create(
        (
            Workload(
                team=t, owner=users[i % 4], name=f"r{i}", kind="batch", image="ubuntu", gpu_type=g, gpu_count=1,
                time_limit_seconds=86400, state=State.RUNNING, borrowed=bool(t.cohort_id) and i < 4,
                created_at=began, admitted_at=began, submitted_at=began, started_at=began + timedelta(seconds=i),
            )
            for t in teams for g in types for i in range(100)
        ),
        batch_size=2000,
    )  # fmt: skip
    Workload.objects.bulk_create(
        (
            Workload(
                team=teams[i % 10], owner=users[(i // 10) % 4], name=f"q{i}", kind="batch", image="ubuntu",
                gpu_type=types[(i // 40) % 3], gpu_count=rng.choice([1, 2, 4, 8]), time_limit_seconds=3600,
                priority=rng.choice([0, 0, 0, 10]), created_at=now - timedelta(seconds=10_000 - i),
            )
            for i in range(10_000)
        ),
        batch_size=2000,
    )  # fmt: skip
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
    print(f"# admission passes (ms): {' '.join(f'{t:.0f}' for t in timings)}", flush=True)
    yield "admission_10k_queued_ms", round(statistics.median(timings), 1)
    yield "admission_10k_admitted_per_pass", statistics.median(admitted)


def overadmission() -> Iterator[tuple[str, float]]:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from identity.models import Membership
    from jobs.models import GpuNode, GpuType, Quota, State, Team, Workload
    from jobs.services.queue.admission import quota_admit
    from jobs.services.submission.intake import workload_submit

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
    # Nothing of this part may reach the engine the later parts start: no workloads, no queued tasks.
    from portal.celery import app

    Workload.objects.filter(team=team).delete()
    app.control.purge()
    yield "quota_overadmissions", max(0, held - 4)


# Every NOT NULL column of jobs_workload: a column added without a database default must be given here too
# (tests/unit/test_bench_modules.py inserts a few rows this way and reads them back through the ORM).
FINISHED_ROWS_SQL = """
INSERT INTO jobs_workload (uid, team_id, owner_id, name, kind, image, gpu_type_id, gpu_count, command, args,
    env, time_limit_seconds, priority, state, reason, message, namespace, k8s_name, node_name, pod_name,
    pod_uid, created_at, started_at, finished_at, state_changed_at, updated_at, shared_with_team, attempt,
    borrowed, restartable, wait_reason, mounts, secrets, retryable_exit_codes, checkpoint_workspace, retries,
    lost_gpu_seconds)
SELECT %s || lpad(g::text, 11, '0'), (%s::bigint[])[1 + g %% 10], (%s::bigint[])[1 + g %% 40], 'w',
    'batch', 'ubuntu', (%s::bigint[])[1 + g %% 3], 1 + g %% 4, '[]', '[]', '[]', 86400, 0, 'SUCCEEDED',
    '', '', '', '', '', '', '', s, s, s + ((60 + g %% 7200) * interval '1 second'), s, s, false, 0,
    false, false, '', '[]', '[]', '[]', 'home', 0, 0
FROM generate_series(1, %s::int) AS g,
     LATERAL (SELECT %s::timestamptz + (g * 2.592) * interval '1 second' AS s) AS start
"""


def insert_finished(n: int, *, tag: str, teams, members, types, month: datetime) -> None:
    """n finished one-to-four-GPU workloads in one statement, starting 2.592 s apart from `month` on, spread
    over 10 teams, 40 people and 3 GPU types (round robin); uids are `tag` + the row number."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            FINISHED_ROWS_SQL,
            [tag, [t.id for t in teams], [u.id for u in members], [t.id for t in types], n, month],
        )


def usage_report_1m() -> Iterator[tuple[str, float]]:
    """A month of 1,000,000 finished workloads (10 teams, 40 users, 3 GPU types): the report fully live,
    from the roll-up, and for the current month after long runs end: recorded as they end, and recorded days
    late (which resets the roll-up of most of its days)."""
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from jobs.models import GpuType, Team, Workload
    from jobs.models.usage import RolledUpDay
    from jobs.services.usage.accounting import counted_interval, note_interval_changed, rollup_pending, usage_report
    from portal.celery import app

    run = uuid.uuid4().hex[:4]
    types = [
        GpuType.objects.get_or_create(slug=s, defaults={"display_name": s, "node_label_value": s})[0]
        for s in ("u-a", "u-b", "u-c")
    ]
    users = get_user_model()
    teams = [Team.objects.create(slug=f"usage-{i}-{run}", name=f"Usage {i} {run}") for i in range(10)]
    members = [users.objects.create(username=f"u-{run}-{i}") for i in range(40)]
    month = datetime(2026, 9, 1, tzinfo=UTC)
    # Workload uids: 'z' (never produced by the product's hex uids) + a run tag + the row number, so a
    # million rows cannot collide with each other or with any other row (the old 10-hex md5 prefixes did).
    tag = next(
        t for t in (uuid.uuid4().hex[:4] for _ in range(100)) if not Workload.objects.filter(uid__startswith=f"z{t}")
    )
    insert_finished(1_000_000, tag=f"z{tag}", teams=teams, members=members, types=types, month=month)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_workload")
    start, end = month, datetime(2026, 10, 1, tzinfo=UTC)
    now = datetime(2026, 10, 15, tzinfo=UTC)
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
    total = sum(r.gpu_seconds for r in rows)
    if abs(total - sum(r.gpu_seconds for r in live_rows)) > 1e-3 * total:
        raise RuntimeError("the roll-up and the live report disagree")

    # The current month (September, seen on the 28th), every closed day rolled up while three workloads
    # that started on the 3rd, 10th and 17th were still running; then they end. Recorded as it happens
    # (an hour ago), an end changes no closed day; recorded late (the tracker learns on the 28th that they
    # ended on the 4th, 11th and 18th), it resets the roll-up of every day since, which reports then compute
    # live from the workloads table: the path budgets and the usage page take until the roll-up is redone.
    current = datetime(2026, 9, 28, 12, tzinfo=UTC)

    def current_month(ends: Callable[[Workload], datetime]) -> tuple[float, int]:
        late = []
        for day in (3, 10, 17):
            workload = Workload.objects.filter(
                uid__startswith=f"z{tag}", started_at__gte=month.replace(day=day)
            ).order_by("started_at")[0]
            Workload.objects.filter(id=workload.id).update(finished_at=None, state="RUNNING")
            workload.refresh_from_db()
            late.append(workload)
        RolledUpDay.objects.all().delete()
        rollup_pending(now=current, max_days=60)
        with transaction.atomic():
            for workload in late:
                before = counted_interval(workload)
                workload.finished_at, workload.state = ends(workload), "SUCCEEDED"
                Workload.objects.filter(id=workload.id).update(finished_at=workload.finished_at, state="SUCCEEDED")
                note_interval_changed(workload, before=before, now=current)
        app.control.purge()  # the roll-up tasks it asked for: the benchmark times the reset month as it is
        live_days = 27 - RolledUpDay.objects.filter(day__gte=month.date(), day__lt=current.date()).count()
        timings = []
        for _ in range(3):
            started = time.perf_counter()
            usage_report(start=month, end=current, team_ids=team_ids, now=current)
            timings.append((time.perf_counter() - started) * 1000)
        return statistics.median(timings), live_days

    on_time_ms, on_time_live_days = current_month(lambda w: current - timedelta(hours=1))
    late_ms, late_live_days = current_month(lambda w: w.started_at + timedelta(days=1))
    yield "usage_report_1m_live_ms", round(live_ms, 1)
    yield "usage_report_1m_ms", round(statistics.median(timings), 1)
    yield "usage_report_1m_speedup", round(live_ms / statistics.median(timings), 1)
    yield "usage_rollup_month_s", round(rollup_s, 1)
    yield "usage_report_1m_current_month_ms", round(on_time_ms, 1)
    yield "usage_report_1m_current_month_live_days", on_time_live_days
    yield "usage_report_1m_current_month_late_ends_ms", round(late_ms, 1)
    yield "usage_report_1m_current_month_late_ends_live_days", late_live_days


PART_RUNNERS: dict[str, Callable[..., Iterator[tuple[str, float]]]] = {
    "admission": admission_10k,
    "race": overadmission,
    "submit": submit_throughput,
    "lag": tracking_lag,
    "crash": crash,
    "drain": engine_drain.drain,
    "usage": usage_report_1m,
}


class PartsFailed(Exception):
    pass


def run(ctx: BenchContext) -> Iterator[tuple[str, float]]:
    """Each selected part in turn; a failing part is reported and the others still run (the run fails)."""
    parts = selected_parts()
    ctx.django()
    failures: list[str] = []
    engine: Engine | None = None
    engine_error: BaseException | None = None
    try:
        for part in parts:
            try:
                if part in ENGINE_PARTS:
                    if engine_error is not None:
                        raise RuntimeError(f"the engine did not start: {engine_error}")
                    if engine is None:
                        try:
                            engine = Engine(ctx)
                        except Exception as exc:
                            engine_error = exc
                            raise
                    yield from PART_RUNNERS[part](engine)
                else:
                    if engine is not None:  # the engine parts are done: stop its processes first
                        engine.close()
                        engine = None
                    yield from PART_RUNNERS[part]()
            except Exception as exc:
                failures.append(f"{part}: {type(exc).__name__}: {exc}")
                print(f"# engine part {part} failed:", file=sys.stderr)
                traceback.print_exc()
    finally:
        if engine is not None:
            engine.close()
    if failures:
        raise PartsFailed("; ".join(f.splitlines()[0] for f in failures))
