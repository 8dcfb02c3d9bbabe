"""What the tracker spends to record a burst of state changes, per workload, in this process.

    python -m devtools.testenv -- python -m benchmarks.profile_tracker [N] [--cprofile] [--bursts-of K]
    (GPUPORTAL_PG_DURABLE=1 as `make bench`)

N workloads (default 100) wait PENDING in one team; the tracker's own `sync_workloads` is handed a view
in which all of their pods run, then one in which all of them succeeded, as a burst of watch events
would leave it; between the two, a full resync that finds nothing to change. Printed per workload, for each of the two bursts and over 3 rounds: this thread's CPU,
wall time, the CPU of the PostgreSQL backend serving it, and the statements sent. No API server and no
worker: only the tracker's own writes (the timeline, accounting, notifications, the requests it
enqueues), so a change to that path can be weighed before the tracking-lag benchmark takes it whole.
With --bursts-of K, each phase's N workloads are recorded K at a time, each K as the tracker records one
burst (`watch_loop.record_burst`): under a busy cluster a 50 ms batch window holds one or two workloads,
and what a burst costs whatever it holds (its load, transaction, connection check, sends) is then paid per
workload. The notifications' fan-out of a phase's bursts goes as one message at its end, as the tracker holds
it for a second. Last, the watch path per event (`_watch_path`: the lines read and put in the view, no
database), beside the same lines decoded whole as before. With --cprofile, the last round's bursts run under cProfile, timed by this thread's CPU clock, and its top functions (own CPU, and CPU
with what they call) are printed after the figures (the profiler's overhead is in that round's figures).
"""

from __future__ import annotations

import cProfile
import io
import json
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


def _fields(names: list[str]) -> dict:
    """A managedFields entry's field set (FieldsV1) naming these paths, as the API server writes them."""
    return {f"f:{name}": {".": {}, "f:name": {}, "f:value": {}} for name in names}


def as_sent(kind: str, obj: dict, event: str = "MODIFIED") -> bytes:
    """One watch stream line for `obj` as the API server sends it: with what the tracker does not read (owner
    references, finalizers, the pod's spec, status details, the managers' field sets) at a size like the local
    cluster's (6-7 kB a pod)."""
    meta = obj["metadata"]
    sent = json.loads(json.dumps(obj))
    sent.update(kind=kind, apiVersion="v1" if kind == "Pod" else "batch/v1")
    sent["metadata"].update(
        resourceVersion="123456",
        generateName=meta["name"][:-5],
        ownerReferences=[{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": "x" * 36,
                          "controller": True, "blockOwnerDeletion": True}],
        finalizers=["batch.kubernetes.io/job-tracking"],
        managedFields=[
            {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": _fields([f"label-{i}" for i in range(8)]),
                                                    "f:spec": _fields([f'k:{{"name":"VAR{i}"}}' for i in range(12)]),
                                                    "f:status": {'k:{"type":"Ready"}': {".": {}, "f:status": {}}}}}
            for manager in ("kube-controller-manager", "kube-scheduler", "node-simulator")
        ],
    )  # fmt: skip
    spec = sent.setdefault("spec", {})
    spec.update(restartPolicy="Never", terminationGracePeriodSeconds=30, dnsPolicy="ClusterFirst",
                tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}] * 3,
                volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}])  # fmt: skip
    spec["containers"] = [{"name": "main", "image": "docker.io/x:1", "command": ["python", "-c"], "args": ["pass"],
                           "env": [{"name": f"VAR{i}", "value": f"value-{i}"} for i in range(12)],
                           "resources": {"limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}}]  # fmt: skip
    if kind == "Job":
        spec["template"] = {"metadata": {"labels": meta["labels"]}, "spec": dict(spec)}
    status = sent.setdefault("status", {})
    status.update(hostIP="127.0.0.2", podIP="127.1.0.5", startTime="2026-01-01T00:00:00Z", qosClass="Guaranteed")
    return json.dumps({"type": event, "object": sent}, separators=(",", ":")).encode()


def _watch_path(n: int, *, profiling: bool = False) -> None:
    """The tracker's CPU per watch event before any database work: each line read (as the watch thread reads
    it: `watch_events.read_event`) and put in the view (as the loop puts it).
    For each workload six events: its pod running, then resent with nothing the tracker reads changed (a
    finalizer), its Job, then its Job's active count, its pod ended, its Job complete (four change the view).
    Beside it, in the same run, the same lines decoded whole and picked (`decode_event`, as before msgspec);
    with --cprofile, both paths' top functions."""
    from django.utils import timezone

    from jobs.models import Workload
    from jobs.services.cluster import watch_events, watch_loop

    started = timezone.now() - timedelta(seconds=5)
    lines = []
    for workload in Workload.objects.filter(team__slug="tracker-profile")[:n]:
        job, pod = _objects(workload, succeeded=False, started=started)
        ended_job, ended_pod = _objects(workload, succeeded=True, started=started)
        counted = {**job, "status": {**job["status"], "active": 1, "ready": 1}}
        lines += [("Pod", as_sent("Pod", pod)), ("Pod", as_sent("Pod", pod).replace(b'"123456"', b'"123457"')),
                  ("Job", as_sent("Job", job)), ("Job", as_sent("Job", counted)),
                  ("Pod", as_sent("Pod", ended_pod)), ("Job", as_sent("Job", ended_job))]  # fmt: skip

    def typed() -> int:  # as the watch thread reads a line and the loop puts it
        view, dirty = watch_loop.ClusterView(), 0
        for kind, line in lines:
            _, obj, _, kept = watch_events.read_event(kind, line)
            dirty += bool(view.put(kind, obj, if_changed=True, kept=kept))
        return dirty

    def whole() -> int:  # for comparison in the same run: the whole object decoded (orjson), then picked
        view = watch_loop.ClusterView()
        return sum(
            bool(view.put(kind, watch_events.decode_event(line)["object"], if_changed=True)) for kind, line in lines
        )

    size = sum(len(line) for _, line in lines) / len(lines)
    timed: dict[str, list[float]] = {"typed": [], "whole": []}
    for _ in range(3):  # alternating, so that a neighbour's burst of load falls on both
        for name, path in (("typed", typed), ("whole", whole)):
            cpu = time.thread_time()
            dirty = path()
            timed[name].append((time.thread_time() - cpu) / len(lines) * 1e6)
    print(
        f"watch path: {len(lines)} events ({size / 1000:.1f} kB each), {dirty} marked a workload; "
        f"cpu {min(timed['typed']):.1f} us per event (best of 3; "
        f"{', '.join(f'{t:.1f}' for t in timed['typed'])}); the whole decode and pick as before: "
        f"{min(timed['whole']):.1f} us ({', '.join(f'{t:.1f}' for t in timed['whole'])})",
        flush=True,
    )
    if profiling:
        for name, path in (("typed", typed), ("whole", whole)):
            profile = cProfile.Profile(time.thread_time)
            profile.runcall(path)
            _print_profile(f"watch path ({name})", profile, top=12)


def _bursts(workloads: list, size: int) -> list[list]:
    return [workloads[start : start + size] for start in range(0, len(workloads), size)]


def main(argv: list[str]) -> int:
    profiling = "--cprofile" in argv
    argv = [arg for arg in argv if arg != "--cprofile"]
    size = 0
    if "--bursts-of" in argv:
        at = argv.index("--bursts-of")
        size = int(argv[at + 1])
        del argv[at : at + 2]
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
        from jobs.services import dispatch
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

        burst_size = size or n
        print(
            f"# {n} workloads in bursts of {burst_size}, each recorded as the tracker records a burst; "
            "per workload: thread CPU, wall, PostgreSQL backend CPU, statements"
        )
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
            # The resync between the bursts: a full sync of every active workload (this burst's, running)
            # against a view that agrees with the database, as the periodic safety net finds it most of the time.
            for phase, succeeded, full in (
                ("running", False, False),
                ("resync", False, True),
                ("succeeded", True, False),
            ):
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
                    if full:
                        changed = watch_loop.sync_workloads(view, None, full=True)
                    else:
                        # As the tracker's loop: the notifications' fan-out of its bursts held and sent once
                        # a second (a phase here takes less), one message.
                        with dispatch.gathered_ids_held():
                            changed = sum(
                                watch_loop.record_burst(view, {w.uid for w in part})
                                for part in _bursts(burst, burst_size)
                            )
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
        _watch_path(n, profiling=profiling)
        for phase, profile in profiles.items():
            _print_profile(phase, profile)
    finally:
        ctx.close()
    return 0


def _print_profile(phase: str, profile: cProfile.Profile, top: int = 25) -> None:
    label = phase if phase.startswith("watch") else f"the {phase} burst"
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(order).print_stats(top)
        print(f"# profile of {label}, by {order}:")
        for line in out.getvalue().splitlines():
            if line.strip():
                print(f"#   {line}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
