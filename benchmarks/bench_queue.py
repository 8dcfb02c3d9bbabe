"""Bounded waits and aging (issue 38): synthetic days of mixed sizes through the portal's own admission pass
and estimates, on PostgreSQL, side by side with best-effort admission. Two days, printed side by side:

The calibrated day (the goal's figure). Each team's day is drawn until it offers BENCH_QUEUE_LOAD (default
0.85) of its quota in GPU-seconds (sizes, limits and runs as below, arrivals uniform over the day): busy,
but a queue that can drain, so what is measured is who waits, not how long a backlog is.
large_job_wait_p95_ratio             p95 wait (submit -> admitted) of jobs of 4 GPUs or more with
                                     reservations and aging (`reserve_after_seconds` = 0, `queue_aging`) ÷
                                     best-effort (the worst seed); goal ≤ 0.5
large_job_wait_p95_s_with / _without the two sides' p95 (the worst seed's)
large_job_wait_p95_ratio_reservations_only   the same with reservations and no aging (what aging adds)
utilisation_with_aging_ratio         GPU-seconds used during the day, reservations and aging ÷ best-effort
                                     (the worst seed); ≥ 0.95

The overloaded day (the first day this bench ran, kept to compare). About 1.5 arrivals an hour per team
(Poisson): on the default seeds the first team offers 6.9 to 8.3 GPUs of work on an 8-GPU quota, so its
queue never drains and the p95 measures the backlog more than starvation.
large_job_wait_p95_ratio_overloaded  p95 large-job wait with reservations (no aging) ÷ best-effort (the worst
                                     seed); large_job_wait_p95_s_with_overloaded / _without_overloaded
utilisation_with_reservation_ratio   GPU-seconds used during the day with ÷ without (the worst seed); ≥ 0.95
eta_error_p50_pct_stored             median |first estimate - start| ÷ wait, from the estimates the portal
                                     stored as it made them (EstimateRevision), with reservations (median of
                                     seeds); bench_sharing's eta_error_p50_pct is a replay of the forecaster

bound_violations                     promises broken on both days, every side that reserves: a reserved
                                     workload admitted after its "starts no later than"; goal 0

How it runs. Two teams alone, each with an 8-GPU quota of one GPU type; jobs of 1, 2, 4 or 8 GPUs, time
limits of 30 min to 4 h, each run lasting 30-100 % of its limit; after the day, up to 12 hours for the
queue to drain. The clock is moved by hand (time-machine) from event to event: at every arrival and every
end the tracker's part is played (admitted work starts at once, a run ends when its length is up) and one
admission pass runs (`admit_all`, the function the engine's sweep calls); on the overloaded day the
estimates are refreshed every 5 minutes too (`estimate_all`, as the beat does), which stores them.
Seeds: BENCH_QUEUE_SEEDS (overloaded day, default 3802,3803,3804) and BENCH_QUEUE_LOAD_SEEDS (calibrated
day, default 3811,3812,3813: never run while aging or the calibrated day were set up; 38 and 3801 were).
Each line starting `# queue` says each team's offered load and the large jobs' wait distribution.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import random
import statistics
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from benchmarks.context import BenchContext

FIGURES = [
    "large_job_wait_p95_ratio",
    "large_job_wait_p95_s_with",
    "large_job_wait_p95_s_without",
    "large_job_wait_p95_ratio_reservations_only",
    "utilisation_with_aging_ratio",
    "large_job_wait_p95_ratio_overloaded",
    "large_job_wait_p95_s_with_overloaded",
    "large_job_wait_p95_s_without_overloaded",
    "utilisation_with_reservation_ratio",
    "eta_error_p50_pct_stored",
    "bound_violations",
]
SEEDS = [int(s) for s in os.environ.get("BENCH_QUEUE_SEEDS", "3802,3803,3804").split(",") if s]
LOAD_SEEDS = [int(s) for s in os.environ.get("BENCH_QUEUE_LOAD_SEEDS", "3811,3812,3813").split(",") if s]
LOAD = float(os.environ.get("BENCH_QUEUE_LOAD", "0.85"))
TEAMS = 2
QUOTA = 8
RATE_PER_HOUR = 1.5
SIZES = ((1, 0.45), (2, 0.25), (4, 0.2), (8, 0.1))
LIMITS = (1800, 3600, 7200, 14400)
DAY = 24 * 3600
DRAIN = 12 * 3600
ESTIMATE_EVERY = 300
LARGE = 4


@dataclass(frozen=True)
class Job:
    team: int
    at: float
    gpus: int
    limit: int
    run: float


def day_trace(seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for team in range(TEAMS):
        t = rng.expovariate(RATE_PER_HOUR / 3600)
        while t < DAY:
            gpus = rng.choices([s for s, _ in SIZES], weights=[w for _, w in SIZES])[0]
            limit = rng.choice(LIMITS)
            jobs.append(Job(team, t, gpus, limit, limit * rng.uniform(0.3, 1.0)))
            t += rng.expovariate(RATE_PER_HOUR / 3600)
    return sorted(jobs, key=lambda j: j.at)


def loaded_day(seed: int, load: float) -> list[Job]:
    """The calibrated day: each team's jobs drawn (as `day_trace` draws them) until their runs add up to
    `load` of its quota over the day (a draw that would pass it is put back; the day stops when less than
    the smallest run is left), arriving at uniformly random times of the day."""
    rng = random.Random(seed)
    smallest = min(LIMITS) * 0.3
    jobs = []
    for team in range(TEAMS):
        left = load * QUOTA * DAY
        while left >= smallest:
            gpus = rng.choices([s for s, _ in SIZES], weights=[w for _, w in SIZES])[0]
            limit = rng.choice(LIMITS)
            run = limit * rng.uniform(0.3, 1.0)
            if gpus * run <= left:
                jobs.append(Job(team, rng.uniform(0, DAY), gpus, limit, run))
                left -= gpus * run
    return sorted(jobs, key=lambda j: j.at)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)] if ordered else 0.0


def offered_load(jobs: list[Job]) -> str:
    """Each team's offered load over the day (GPU-seconds its runs need ÷ the day) against its quota: near
    the quota, a queue builds up that no order drains faster, and large jobs wait behind large jobs."""
    parts = []
    for team in range(TEAMS):
        mine = [j for j in jobs if j.team == team]
        load = sum(j.gpus * j.run for j in mine) / DAY
        large = sum(j.gpus * j.run for j in mine if j.gpus >= LARGE) / DAY
        parts.append(f"team {team} offers {load:.2f} of {QUOTA} GPUs ({large:.2f} in jobs of {LARGE}+)")
    return "; ".join(parts)


def wait_distribution(sized: list[tuple[float, int]]) -> str:
    """The waits of large jobs in hours: quantiles (the p95 is the figure) and the longest with their sizes."""
    waits = sorted(w for w, _ in sized)
    if not waits:
        return "none"

    def q(f: float) -> float:
        return waits[min(len(waits) - 1, math.ceil(f * len(waits)) - 1)] / 3600

    longest = ", ".join(f"{w / 3600:.1f} h ({g} GPUs)" for w, g in sorted(sized, reverse=True)[:4])
    return f"p50 {q(0.5):.1f} h, p90 {q(0.9):.1f} h, p95 {q(0.95):.1f} h of {len(waits)}; longest {longest}"


def replay(
    jobs: list[Job], *, reserve: bool, start: datetime, aging: bool = False, estimates: bool = True
) -> dict[str, float]:
    """One side: the day through admission (and estimates, where `estimates`); what it measured."""
    import time_machine
    from django.contrib.auth import get_user_model

    from jobs.models import GpuType, QueueReservation, Quota, State, Team, Workload
    from jobs.services.queue import estimate_history, reservations, start_estimates
    from jobs.services.queue.admission import admit_all

    tag = uuid.uuid4().hex[:8]
    gpu = GpuType.objects.create(
        slug=f"q-{tag}", display_name=f"Queue bench {tag}", node_label_value=f"q-{tag}",
        reserve_after_seconds=0 if reserve else None, queue_aging=aging,
    )  # fmt: skip
    owner = get_user_model().objects.create_user(f"q-{tag}")
    teams = [Team.objects.create(slug=f"q-{tag}-{i}", name=f"Q {tag} {i}") for i in range(TEAMS)]
    for team in teams:
        Quota.objects.create(team=team, gpu_type=gpu, max_gpus=QUOTA)
    ends: list[tuple[float, int]] = []  # (time, workload id)
    run_of: dict[int, float] = {}
    events = [j.at for j in jobs] + (list(range(0, DAY + DRAIN, ESTIMATE_EVERY)) if estimates else [0.0])
    heapq.heapify(events)
    arrived = 0
    now = 0.0
    while events:
        now = heapq.heappop(events)
        if now > DAY + DRAIN:
            break
        with time_machine.travel(start + timedelta(seconds=now), tick=False):
            while ends and ends[0][0] <= now:
                _, workload_id = heapq.heappop(ends)
                Workload.objects.filter(id=workload_id).update(
                    state=State.SUCCEEDED, finished_at=start + timedelta(seconds=now)
                )
            while arrived < len(jobs) and jobs[arrived].at <= now:
                j = jobs[arrived]
                w = Workload.objects.create(
                    team=teams[j.team], owner=owner, name=f"j{arrived}", kind="batch", image="ubuntu", gpu_type=gpu,
                    gpu_count=j.gpus, time_limit_seconds=j.limit, created_at=start + timedelta(seconds=now),
                )  # fmt: skip
                run_of[w.id] = j.run
                arrived += 1
            admit_all()
            for w_id in Workload.objects.filter(gpu_type=gpu, state=State.SUBMITTING).values_list("id", flat=True):
                Workload.objects.filter(id=w_id).update(state=State.RUNNING, started_at=start + timedelta(seconds=now))
                heapq.heappush(ends, (now + run_of[w_id], w_id))
                heapq.heappush(events, now + run_of[w_id])
            if estimates and now % ESTIMATE_EVERY == 0:
                for team in teams:
                    start_estimates.estimate(team_id=team.id, gpu_type_id=gpu.id)
        if arrived == len(jobs) and not ends and not Workload.objects.filter(gpu_type=gpu, state=State.QUEUED).exists():
            break
    end = start + timedelta(seconds=DAY + DRAIN)
    day_end = start + timedelta(seconds=DAY)
    waits = []
    sized: list[tuple[float, int]] = []
    used = 0.0
    for gpus, created, admitted, began, finished in Workload.objects.filter(gpu_type=gpu).values_list(
        "gpu_count", "created_at", "admitted_at", "started_at", "finished_at"
    ):
        if gpus >= LARGE:
            waits.append(((admitted or end) - created).total_seconds())  # still waiting: censored at the end
            sized.append((waits[-1], gpus))
        if began is not None:
            stop = min(finished or day_end, day_end)
            used += gpus * max(0.0, (stop - began).total_seconds())
    with time_machine.travel(end, tick=False):
        accuracy = estimate_history.accuracy_by_gpu_type(gpu_type_ids=[gpu.id], days=3)[0].accuracy
        violations = reservations.bound_violations(gpu_type_ids=[gpu.id]) if reserve else 0
        made = QueueReservation.objects.filter(gpu_type=gpu).count()
        for r in QueueReservation.objects.filter(gpu_type=gpu).select_related("workload"):
            if r.workload.admitted_at is None or r.workload.admitted_at > r.starts_by:
                w = r.workload
                print(
                    f"# broken promise: {w.name} ({w.gpu_count} GPUs, limit {w.time_limit_seconds} s) submitted "
                    f"{(w.created_at - start).total_seconds():.0f} s, reserved at {(r.made_at - start).total_seconds():.0f}"
                    f" s for {(r.starts_by - start).total_seconds():.0f} s, admitted "
                    f"{(w.admitted_at - start).total_seconds() if w.admitted_at else None} s",
                    flush=True,
                )
    Workload.objects.filter(gpu_type=gpu, state=State.QUEUED).update(state=State.CANCELLED)
    return {
        "large_p95": p95(waits),
        "used": used,
        "eta_pct": accuracy.p50_error_pct or 0.0,
        "violations": violations,
        "reservations": made,
        "large_n": len(waits),
        "large_waits": sized,
    }


def run(ctx: BenchContext) -> Iterator[tuple[str, float]]:
    ctx.django()
    from django.utils import timezone

    logging.getLogger("jobs.services.queue.admission").setLevel(logging.WARNING)  # a line per pass otherwise
    violations = 0
    # The calibrated day: best-effort, reservations only, reservations and aging.
    calibrated = []
    for seed in LOAD_SEEDS:
        jobs = loaded_day(seed, LOAD)
        print(f"# queue calibrated day ({LOAD:g} of quota), seed {seed}: {offered_load(jobs)}", flush=True)
        start = timezone.make_aware(datetime(2026, 6, 1, 0, 0)) + timedelta(days=5 * (seed % 100))
        sides = {
            "best-effort": replay(jobs, reserve=False, start=start, estimates=False),
            "reservations": replay(jobs, reserve=True, start=start + timedelta(days=1, hours=12), estimates=False),
            "reservations+aging": replay(
                jobs, reserve=True, aging=True, start=start + timedelta(days=3), estimates=False
            ),
        }
        calibrated.append(sides)
        violations += sides["reservations"]["violations"] + sides["reservations+aging"]["violations"]
        print(
            f"# queue calibrated seed {seed}: {len(jobs)} jobs ({sides['best-effort']['large_n']} of {LARGE}+ GPUs); "
            + "; ".join(
                f"{name}: large p95 {r['large_p95']:.0f} s, GPU-h used {r['used'] / 3600:.1f}, "
                f"{r['reservations']} reservations, {r['violations']} broken"
                for name, r in sides.items()
            ),
            flush=True,
        )
        for name, r in sides.items():
            print(
                f"# queue calibrated seed {seed} large waits {name}: {wait_distribution(r['large_waits'])}", flush=True
            )
    if calibrated:
        ratios = [c["reservations+aging"]["large_p95"] / max(1.0, c["best-effort"]["large_p95"]) for c in calibrated]
        worst = max(range(len(calibrated)), key=lambda i: ratios[i])
        yield "large_job_wait_p95_ratio", ratios[worst]
        yield "large_job_wait_p95_s_with", calibrated[worst]["reservations+aging"]["large_p95"]
        yield "large_job_wait_p95_s_without", calibrated[worst]["best-effort"]["large_p95"]
        yield (
            "large_job_wait_p95_ratio_reservations_only",
            max(c["reservations"]["large_p95"] / max(1.0, c["best-effort"]["large_p95"]) for c in calibrated),
        )
        yield (
            "utilisation_with_aging_ratio",
            min(c["reservations+aging"]["used"] / max(1.0, c["best-effort"]["used"]) for c in calibrated),
        )

    # The overloaded day: reservations (no aging) against best-effort, with the stored estimates.
    per_seed = []
    for seed in SEEDS:
        jobs = day_trace(seed)
        print(f"# queue overloaded day, seed {seed}: {offered_load(jobs)}", flush=True)
        start = timezone.make_aware(datetime(2026, 3, 2, 0, 0)) + timedelta(days=3 * (seed % 100))
        without = replay(jobs, reserve=False, start=start)
        with_ = replay(jobs, reserve=True, start=start + timedelta(days=1, hours=12))
        per_seed.append((with_, without))
        violations += with_["violations"]
        print(
            f"# queue overloaded seed {seed}: {len(jobs)} jobs ({with_['large_n']} of {LARGE}+ GPUs); large p95 wait "
            f"{with_['large_p95']:.0f} s with, {without['large_p95']:.0f} s without; GPU-h used "
            f"{with_['used'] / 3600:.1f} with, {without['used'] / 3600:.1f} without; {with_['reservations']} "
            f"reservations, {with_['violations']} broken; stored-estimate p50 error {with_['eta_pct']:.1f} % "
            f"with, {without['eta_pct']:.1f} % without",
            flush=True,
        )
        for side, result in (("with", with_), ("without", without)):
            print(
                f"# queue overloaded seed {seed} large waits {side}: {wait_distribution(result['large_waits'])}",
                flush=True,
            )
    if per_seed:
        ratios = [w["large_p95"] / max(1.0, wo["large_p95"]) for w, wo in per_seed]
        worst = max(range(len(per_seed)), key=lambda i: ratios[i])
        yield "large_job_wait_p95_ratio_overloaded", ratios[worst]
        yield "large_job_wait_p95_s_with_overloaded", per_seed[worst][0]["large_p95"]
        yield "large_job_wait_p95_s_without_overloaded", per_seed[worst][1]["large_p95"]
        yield "utilisation_with_reservation_ratio", min(w["used"] / max(1.0, wo["used"]) for w, wo in per_seed)
        yield "eta_error_p50_pct_stored", statistics.median(w["eta_pct"] for w, _ in per_seed)
    yield "bound_violations", violations
