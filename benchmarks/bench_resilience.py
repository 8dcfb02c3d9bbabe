"""Work that survives (issue 37): a day replayed with preemptions and injected node and GPU faults.

goodput_ratio                      GPU-hours of progress kept ÷ GPU-hours used, with 10-minute checkpoints
goodput_ratio_without_checkpoints  the same day, the same faults, jobs that never checkpoint (the baseline)
lost_gpu_hours_per_preemption      work lost per preemption, checkpoint-aware victims ÷ newest-first victims
unhealthy_node_new_placements      pods placed on a node while its GPU was marked unhealthy (goal 0)

The day is replayed event by event through the portal's own decision code: the admission plan
(`sharing_plan.plan`, victims chosen by `victim_order` from what each stop would lose, `stop_cost`), the
retry decision and backoff (`jobs.services.retry`), what a stop loses (`checkpoints.cost`), the GPU fault
judgement of agent reports (`cluster.gpu_faults.judge`), and node avoidance as the pods' affinity asks
(no placement on a node with an open mark). Simulated: time, the nodes (8 of 4 GPUs), and the jobs: two
teams in a cohort (the lender, quota 16; the borrower, quota 16 + 16 borrowing), restartable batch jobs of
1-4 GPUs running 30 min to 6 h of work; once a day a few GPUs fall off the bus (Xid 79) and a node is lost.
A job that checkpoints saves its progress every 10 minutes of running and resumes from it on its next
attempt; one that does not starts over. BENCH_RESILIENCE_SEED picks the trace.
"""

from __future__ import annotations

import heapq
import math
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

FIGURES = (
    "goodput_ratio",
    "goodput_ratio_without_checkpoints",
    "lost_gpu_hours_per_preemption",
    "lost_gpu_hours_per_preemption_aware",
    "lost_gpu_hours_per_preemption_newest_first",
    "resilience_preemptions",
    "resilience_fault_retries",
    "unhealthy_node_new_placements",
)
DAY = 24 * 3600.0
EPOCH = datetime(2026, 3, 2, tzinfo=UTC)
NODES, GPUS_PER_NODE = 8, 4
LENDER, BORROWER = 1, 2
CHECKPOINT_EVERY = 600.0
HEALTHY_REPORTS_TO_CLEAR, REPORT_EVERY = 10, 60.0
SEED = int(os.environ.get("BENCH_RESILIENCE_SEED", "37"))


@dataclass(frozen=True)
class Job:
    id: int
    team: int
    gpus: int
    arrival: float
    work: float  # seconds of running it needs in all


@dataclass
class Run:
    job: Job
    node: int
    started: float
    borrowed: bool
    progress_at_start: float  # seconds of work done before this attempt (its checkpoint)
    last_checkpoint: float | None = None


@dataclass
class State:
    progress: dict[int, float] = field(default_factory=dict)  # saved progress per job
    retries: dict[int, int] = field(default_factory=dict)
    used: float = 0.0  # GPU-seconds
    lost: float = 0.0
    preemption_losses: list[float] = field(default_factory=list)
    fault_retries: int = 0
    bad_placements: int = 0


def trace(seed: int) -> tuple[list[Job], list[tuple[float, str, int]]]:
    """Arrivals (the borrower busy all day, the lender in two bursts) and faults (time, kind, node)."""
    rng = random.Random(seed)
    jobs: list[Job] = []
    t = 0.0
    while t < DAY:
        t += rng.expovariate(6 / 3600)
        jobs.append(Job(len(jobs) + 1, BORROWER, rng.choice((1, 2, 2, 4)), t, rng.uniform(1800, 6 * 3600)))
    for burst in (9 * 3600, 15 * 3600):
        for _ in range(10):
            at = burst + rng.uniform(0, 3600)
            jobs.append(Job(len(jobs) + 1, LENDER, rng.choice((2, 4)), at, rng.uniform(1800, 3 * 3600)))
    jobs.sort(key=lambda j: j.arrival)
    faults = [(rng.uniform(2 * 3600, DAY - 3600), "xid79", rng.randrange(NODES)) for _ in range(3)]
    faults.append((rng.uniform(4 * 3600, 20 * 3600), "node_lost", rng.randrange(NODES)))
    return jobs, sorted(faults)


def replay(jobs: list[Job], faults: list[tuple[float, str, int]], *, checkpoints: bool, aware: bool) -> State:
    # The portal's own decisions (imported here: jobs.services.retry needs Django set up first).
    from jobs.services.checkpoints.cost import lost_gpu_seconds
    from jobs.services.cluster.gpu_faults import GpuSeen, Watch, judge
    from jobs.services.queue.sharing_plan import Held, QueueEntry, TeamQuota, order_queue, plan
    from jobs.services.retry import backoff_seconds, decide

    teams = {LENDER: TeamQuota(LENDER, quota=16), BORROWER: TeamQuota(BORROWER, quota=16, borrowing_limit=16)}
    st = State()
    by_id = {j.id: j for j in jobs}
    running: dict[int, Run] = {}
    queued: dict[int, float | None] = {}  # id -> requeued at
    not_before: dict[int, float] = {}
    marked: dict[int, int] = {}  # node -> healthy reports since its mark
    down: set[int] = set()  # nodes lost
    events: list[tuple[float, int, str, int]] = []  # (time, seq, what, id)
    seq = 0

    def push(at: float, what: str, ident: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, what, ident))

    for j in jobs:
        push(j.arrival, "arrive", j.id)
    for at, kind, node in faults:
        push(at, kind, node)
    push(REPORT_EVERY, "report", 0)

    def free_on(node: int) -> int:
        return GPUS_PER_NODE - sum(r.job.gpus for r in running.values() if r.node == node)

    def saved(r: Run, now: float) -> tuple[float, float | None]:
        """Progress saved by `now` and when it was saved (checkpoints every 10 min of running)."""
        if not checkpoints:
            return st.progress.get(r.job.id, 0.0), None
        n = math.floor((now - r.started) / CHECKPOINT_EVERY)
        if n <= 0:
            return r.progress_at_start, None
        return r.progress_at_start + n * CHECKPOINT_EVERY, r.started + n * CHECKPOINT_EVERY

    def stop(job_id: int, now: float, reason: str) -> float:
        """End the run of `job_id` at `now`; returns the GPU-seconds lost. The job is requeued or fails."""
        r = running.pop(job_id)
        progress, checkpoint_at = saved(r, now)
        when = EPOCH + timedelta(seconds=now)
        lost = lost_gpu_seconds(
            gpus=r.job.gpus, started_at=EPOCH + timedelta(seconds=r.started),
            last_checkpoint_at=EPOCH + timedelta(seconds=checkpoint_at) if checkpoint_at is not None else None, at=when,
        )  # fmt: skip
        st.used += r.job.gpus * (now - r.started)
        st.lost += lost
        st.progress[job_id] = progress
        if reason == "Preempted":
            queued[job_id] = now
            return lost
        retries = st.retries.get(job_id, 0)
        decision = decide(kind="batch", restartable=True, reason=reason, exit_code=None, retryable_exit_codes=[],
                          retries=retries, limit=3)  # fmt: skip
        if decision.retry:
            st.fault_retries += 1
            st.retries[job_id] = retries + 1
            queued[job_id] = now
            not_before[job_id] = now + backoff_seconds(retries, base=30, cap=900)
            push(not_before[job_id], "admit", 0)
        return lost

    def place(job: Job) -> int | None:
        for node in range(NODES):
            if node not in down and node not in marked and free_on(node) >= job.gpus:
                return node
        return None

    def admit(now: float) -> None:
        held = []
        for r in running.values():
            _, checkpoint_at = saved(r, now)
            since = checkpoint_at if checkpoint_at is not None else r.started
            lost = r.job.gpus * (now - since) if aware else 0.0
            held.append(Held(r.job.id, r.job.team, r.job.gpus, 0, 0, r.borrowed, r.started, True, lost=lost))
        waiting = [
            QueueEntry(i, by_id[i].team, 0, by_id[i].gpus, 0, by_id[i].arrival, requeued)
            for i, requeued in queued.items()
            if not_before.get(i, 0.0) <= now
        ]
        result = plan(teams, held, order_queue(waiting, {}))
        for victim in result.preempt:
            st.preemption_losses.append(stop(victim, now, "Preempted"))
        for i in result.admit:
            job = by_id[i]
            node = place(job)
            if node is None:
                continue  # fragmented: it waits for the next event
            if node in marked or node in down:
                st.bad_placements += 1
            queued.pop(i)
            progress = st.progress.get(i, 0.0)
            running[i] = Run(job, node, now, i in result.borrowed, progress)
            push(now + job.work - progress, "finish", i)

    watches: dict[int, Watch] = {}
    while events:
        now, _, what, ident = heapq.heappop(events)
        if now > DAY:
            break
        if what == "arrive":
            queued[ident] = None
        elif what == "finish":
            r = running.get(ident)
            if r is None or abs(r.started + r.job.work - r.progress_at_start - now) > 1e-6:
                continue  # a stale end of an attempt that was stopped
            running.pop(ident)
            st.used += r.job.gpus * (now - r.started)
        elif what == "xid79":
            # The agent's report of the node: GPU 0 had Xid 79; the portal marks it, and its restartable work retries.
            verdict = judge(GpuSeen(0, f"gpu-{ident}-0", xid_errors=1, last_xid=79), watches.get(ident, Watch()),
                            at=EPOCH + timedelta(seconds=now), hot_celsius=92, hot_seconds=300)  # fmt: skip
            watches[ident] = Watch()  # the agent restarts with the node after repair: its count begins again
            if not verdict.healthy and ident not in marked:
                marked[ident] = 0
                for job_id in [i for i, r in running.items() if r.node == ident]:
                    stop(job_id, now, "GpuFault")
        elif what == "node_lost":
            down.add(ident)
            for job_id in [i for i, r in running.items() if r.node == ident]:
                stop(job_id, now, "NodeLost")
            push(now + 2 * 3600, "node_back", ident)
        elif what == "node_back":
            down.discard(ident)
        elif what == "report":
            # Healthy reports after a repair (two hours after the mark) count toward clearing it.
            for node in list(marked):
                marked[node] += 1
                if marked[node] >= HEALTHY_REPORTS_TO_CLEAR + 120:
                    del marked[node]
            push(now + REPORT_EVERY, "report", 0)
            if not (queued or running):
                continue
        admit(now)
    for r in running.values():
        st.used += r.job.gpus * (min(DAY, now) - r.started)
    return st


def figures(seed: int = SEED) -> Iterator[tuple[str, float]]:
    jobs, faults = trace(seed)
    with_ck = replay(jobs, faults, checkpoints=True, aware=True)
    without = replay(jobs, faults, checkpoints=False, aware=False)
    newest = replay(jobs, faults, checkpoints=True, aware=False)

    def goodput(s: State) -> float:
        return (s.used - s.lost) / s.used if s.used else float("nan")

    def per_preemption(s: State) -> float:
        return sum(s.preemption_losses) / len(s.preemption_losses) / 3600 if s.preemption_losses else 0.0

    aware_loss, newest_loss = per_preemption(with_ck), per_preemption(newest)
    yield "goodput_ratio", round(goodput(with_ck), 3)
    yield "goodput_ratio_without_checkpoints", round(goodput(without), 3)
    yield "lost_gpu_hours_per_preemption", round(aware_loss / newest_loss, 3) if newest_loss else float("nan")
    yield "lost_gpu_hours_per_preemption_aware", round(aware_loss, 3)
    yield "lost_gpu_hours_per_preemption_newest_first", round(newest_loss, 3)
    yield "resilience_preemptions", len(with_ck.preemption_losses)
    yield "resilience_fault_retries", with_ck.fault_retries
    yield "unhealthy_node_new_placements", with_ck.bad_placements + without.bad_placements + newest.bad_placements


def run(ctx) -> Iterator[tuple[str, float]]:
    ctx.django()
    yield from figures()


if __name__ == "__main__":
    # The figures per seed: python -m benchmarks.bench_resilience 37 38 (a configured Django, no cluster)
    import sys

    import django

    django.setup()

    for arg in sys.argv[1:] or [str(SEED)]:
        for metric, value in figures(int(arg)):
            print(f"{metric}: {value}", flush=True)
