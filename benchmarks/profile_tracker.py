"""What the tracker spends to record a burst of state changes, per workload, in this process.

    python -m devtools.testenv -- python -m benchmarks.profile_tracker [N] [--cprofile]
    (GPUPORTAL_PG_DURABLE=1 as `make bench`)

N workloads (default 100) wait PENDING in one team; the tracker's own `sync_workloads` is handed a view
in which all of their pods run, then one in which all of them succeeded, as a burst of watch events
would leave it. Printed per workload, for each of the two bursts and over 3 rounds: this thread's CPU,
wall time, the CPU of the PostgreSQL backend serving it, and the statements sent. No API server and no
worker: only the tracker's own writes (the timeline, accounting, notifications, the requests it
enqueues), so a change to that path can be weighed before the tracking-lag benchmark takes it whole.
With --cprofile, the last round's bursts run under cProfile, timed by this thread's CPU clock, and its top functions (own CPU, and CPU
with what they call) are printed after the figures (the profiler's overhead is in that round's figures).
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time
from datetime import UTC, datetime, timedelta

from benchmarks.context import BenchContext


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _objects(workload, *, succeeded: bool, started: datetime) -> tuple[dict, dict]:
    """The workload's Job and its pod as the watches deliver them (the fields the tracker reads)."""
    from django.conf import settings

    from jobs.kube import names

    labels = {
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_INSTANCE: names.label_value(settings.PORTAL_INSTANCE),
        names.LABEL_WORKLOAD: workload.uid,
        "job-name": workload.k8s_name,
    }
    meta = {"namespace": workload.namespace, "labels": labels}
    ended = _stamp(started + timedelta(seconds=2))
    conditions = [{"type": "Complete", "status": "True", "lastTransitionTime": ended}] if succeeded else []
    job = {"metadata": {**meta, "name": workload.k8s_name}, "status": {"conditions": conditions}}
    state = {"running": {"startedAt": _stamp(started)}}
    if succeeded:
        state = {
            "terminated": {"exitCode": 0, "reason": "Completed", "startedAt": _stamp(started), "finishedAt": ended}
        }
    pod = {
        "metadata": {**meta, "name": f"{workload.k8s_name}-abcde", "uid": f"pod-{workload.uid}",
                     "creationTimestamp": _stamp(started)},
        "spec": {"nodeName": "gpu-k2-1"},
        "status": {"phase": "Succeeded" if succeeded else "Running", "conditions": [],
                   "containerStatuses": [{"name": "main", "state": state}]},
    }  # fmt: skip
    return job, pod


def main(argv: list[str]) -> int:
    profiling = "--cprofile" in argv
    argv = [arg for arg in argv if arg != "--cprofile"]
    n = int(argv[0]) if argv else 100
    profiles: dict[str, cProfile.Profile] = {}
    ctx = BenchContext()
    try:
        ctx.django()
        from django.contrib.auth import get_user_model
        from django.db import connection
        from django.utils import timezone

        from identity.models import Membership, Role
        from jobs.kube import names
        from jobs.models import GpuType, Kind, State, Team, Workload
        from jobs.services.cluster import watch_loop
        from jobs.services.seeding import DEMO, apply_seed

        apply_seed({"gpu_types": DEMO["gpu_types"], "allowed_registries": ["docker.io"]})
        team = Team.objects.create(name="Tracker profile", slug="tracker-profile")
        owner = get_user_model().objects.create_user("tracker-profile")
        Membership.objects.create(team=team, user=owner, role=Role.MEMBER)
        gpu_type = GpuType.objects.get(slug="k2")
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = cursor.fetchone()[0]

        def backend_cpu() -> float:
            stat = open(f"/proc/{backend}/stat").read()  # noqa: SIM115 - read at once
            fields = stat[stat.rindex(")") + 2 :].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        statements = [0]

        def count(execute, sql, params, many, context):
            statements[0] += 1
            return execute(sql, params, many, context)

        print(f"# {n} workloads a burst; per workload: thread CPU, wall, PostgreSQL backend CPU, statements")
        for round_number in range(3):
            started = timezone.now() - timedelta(seconds=5)
            burst = []
            for i in range(n):
                workload = Workload.objects.create(
                    team=team, owner=owner, name=f"burst-{i}", kind=Kind.BATCH, image="docker.io/x:1",
                    gpu_type=gpu_type, gpu_count=1, time_limit_seconds=3600, state=State.PENDING,
                    namespace=team.namespace, submitted_at=started,
                )  # fmt: skip
                workload.k8s_name = names.attempt_name(workload.name, workload.uid, 0)
                workload.save(update_fields=["k8s_name"])
                burst.append(workload)
            for phase, succeeded in (("running", False), ("succeeded", True)):
                view = watch_loop.ClusterView()
                for workload in burst:
                    job, pod = _objects(workload, succeeded=succeeded, started=started)
                    view.put("Job", job)
                    view.put("Pod", pod)
                statements[0] = 0
                cpu, wall, pg = time.thread_time(), time.perf_counter(), backend_cpu()
                profile = cProfile.Profile(time.thread_time) if profiling and round_number == 2 else None
                with connection.execute_wrapper(count):
                    if profile is not None:
                        profile.enable()
                    changed = watch_loop.sync_workloads(view, {w.uid for w in burst}, full=False)
                    if profile is not None:
                        profile.disable()
                        profiles[phase] = profile
                cpu, wall, pg = time.thread_time() - cpu, time.perf_counter() - wall, backend_cpu() - pg
                print(
                    f"round {round_number + 1} {phase}: {changed} changed; cpu {cpu / n * 1000:.2f} ms, "
                    f"wall {wall / n * 1000:.2f} ms, postgres {pg / n * 1000:.2f} ms, "
                    f"{statements[0] / n:.1f} statements",
                    flush=True,
                )
        for phase, profile in profiles.items():
            _print_profile(phase, profile)
    finally:
        ctx.close()
    return 0


def _print_profile(phase: str, profile: cProfile.Profile, top: int = 25) -> None:
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(order).print_stats(top)
        print(f"# profile of the {phase} burst, by {order}:")
        for line in out.getvalue().splitlines():
            if line.strip():
                print(f"#   {line}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
