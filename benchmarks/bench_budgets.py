"""CPU budgets of what does not scale out (issue 41): PostgreSQL (one primary) and the tracker (one watcher),
per workload, from the processes' own counters, beside the API server's CPU per raw create in the same run.

Each round has three sides, a fresh team namespace each, the order turning per round:
raw     the raw client creates N Jobs (the portal's manifests and credentials, the worker's own create call):
        the API server's CPU per create, the cost the portal cannot avoid (`apiserver_cpu_per_raw_create_ms`)
rest    N workloads, one `POST /api/v1/workloads/` each (gunicorn, as the chart runs it), taken to their end:
        intake, admission, creation, the tracker's transitions (Running, Succeeded) and accounting
sweep   the same N as sweeps of 50 (`POST /api/v1/workloads/batch/`)
A side's window opens before the first request and closes once every workload is SUCCEEDED and the run's
processes are at rest (the tracker and the worker have recorded everything). PostgreSQL's CPU is its
processes' (backends, WAL writer, checkpointer, autovacuum); statements come from pg_stat_statements (the
run's PostgreSQL loads it: `make bench` sets GPUPORTAL_PG_OPTIONS), less those this benchmark sent itself.
The periodic tasks (admission sweep, limits, resync) run at their deployed intervals inside each window.
Sizes: BENCH_BUDGET_N (default 150), BENCH_BUDGET_ROUNDS (default 3). benchmarks/README.md says more.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterator

from benchmarks import cpu, pgstat
from benchmarks.context import BenchContext

GOALS = {
    "pg_cpu_per_rest_submission_ms": 1.0,
    "pg_cpu_per_sweep_workload_ms": 0.3,
    "tracker_cpu_per_workload_ms": 0.3,
}
FIGURES = (
    "budget_rounds",
    "budget_workloads_per_side",
    "apiserver_cpu_per_raw_create_ms",
    "pg_cpu_per_rest_submission_ms",
    "pg_statements_per_rest_submission",
    "tracker_cpu_per_workload_ms",
    "tracker_main_thread_cpu_per_workload_ms",
    "tracker_watch_threads_cpu_per_workload_ms",
    "web_cpu_per_rest_submission_ms",
    "worker_cpu_per_workload_ms",
    "pg_cpu_per_sweep_workload_ms",
    "pg_statements_per_sweep_workload",
    "tracker_cpu_per_sweep_workload_ms",
    "pg_cpu_per_rest_submission_vs_apiserver",
    "tracker_cpu_per_workload_vs_apiserver",
)


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


class OwnStatements:
    """Counts the statements this process sends on its connection, so the window's count is the engine's."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def _all_succeeded(team, n: int) -> bool:
    from jobs.models import State, Workload

    return Workload.objects.filter(team=team, state=State.SUCCEEDED).count() >= n


def _raw_side(engine, n: int) -> dict[str, float]:
    from benchmarks.engine_flow import _raw_round

    before = cpu.snapshot()
    _raw_round(engine, n)  # waits until our watch has seen every Job, then removes the namespace
    return cpu.spent(before, cpu.snapshot())


def _tracker_pid(engine) -> int | None:
    process = engine.processes.processes.get("tracker")
    return None if process is None or process.poll() is not None else process.pid


def _portal_side(
    engine, api, n: int, *, sweeps: bool
) -> tuple[dict[str, float], float, list[str], float, dict[str, tuple[float, float]]]:
    """CPU seconds per part and statements sent by the engine while n workloads went from the POST to the end,
    the window's length in seconds, and the tracker's (user, system) CPU seconds by thread (`cpu.threads`)."""
    from django.db import connection

    from benchmarks.engine import quiet, wait_until
    from benchmarks.engine_flow import _fresh_namespace, _rest_submit, _rest_submit_arrays, _token

    team, user, namespace = _fresh_namespace(engine)
    token = _token(user)
    own = OwnStatements()
    quiet()
    pgstat.reset(force=True)
    tables, transactions = _table_writes(), _transactions()
    tracker = _tracker_pid(engine)
    threads = cpu.threads(tracker) if tracker else {}
    before, roles, began = cpu.snapshot(), cpu.postgres_snapshot(), time.monotonic()
    with connection.execute_wrapper(own):
        (_rest_submit_arrays if sweeps else _rest_submit)(api, token, team.slug, n, {"SIM_RUN_SECONDS": "1"})
        wait_until(lambda: _all_succeeded(team, n), 600, f"{n} workloads did not all succeed", interval=0.5)
        quiet()
    spent, length = cpu.spent(before, cpu.snapshot()), time.monotonic() - began
    threads = cpu.threads_spent(threads, cpu.threads(tracker) if tracker else {})
    roles = cpu.spent(roles, cpu.postgres_snapshot())
    calls, top = pgstat.window(f"budget {'sweep' if sweeps else 'rest'} side", n)
    transactions = _transactions() - transactions
    trips = pgstat.round_trips_line(f"budget {'sweep' if sweeps else 'rest'} side", n, transactions)
    top = [_roles_line(roles, n), _threads_line(threads, n), *_writes_lines(tables, _table_writes(), n), trips, *top]
    engine.delete_namespace(namespace)
    engine.settle(namespace, team=team)
    statements = (calls - own.count) / n if calls is not None else float("nan")
    return spent, statements, top, length, threads


def _threads_line(threads: dict[str, tuple[float, float]], n: int) -> str:
    if not threads:
        return "#   tracker ms per workload by thread: not read (the tracker was restarted in the window)"
    return f"#   tracker ms per workload by thread: {cpu.per_thread(threads, n)}"


def _watch_threads(threads: dict[str, tuple[float, float]]) -> float:
    """CPU seconds of the tracker's watch threads (named `watch-<kind>`), nan when they were not read."""
    if not threads:
        return float("nan")
    return sum(user + system for name, (user, system) in threads.items() if name.startswith("watch-"))


def _transactions() -> int:
    """Commits and rollbacks in the run's database so far (pg_stat_database; the window's own reads add a few)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


def _table_writes() -> dict[str, tuple[int, int, int]]:
    """Rows inserted, updated and updated HOT (no index written) so far per table (pg_stat_user_tables)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables")
        return {name: (ins, upd, hot) for name, ins, upd, hot in cursor.fetchall()}


def _writes_lines(before: dict, after: dict, n: int) -> list[str]:
    """`#` lines: the window's busiest tables by rows written, per workload, and how many updates were HOT."""
    spent = {
        name: tuple(a - b for a, b in zip(row, before.get(name, (0, 0, 0)), strict=True)) for name, row in after.items()
    }
    busiest = sorted((row for row in spent.items() if row[1][0] + row[1][1]), key=lambda row: -(row[1][0] + row[1][1]))
    return [
        f"#   rows per workload: {name} {ins / n:.2f} inserted, {upd / n:.2f} updated ({hot / n:.2f} HOT)"
        for name, (ins, upd, hot) in busiest[:5]
    ]


def _roles_line(spent: dict[str, float], n: int) -> str:
    parts = ", ".join(f"{role} {1000 * s / n:.2f}" for role, s in sorted(spent.items(), key=lambda kv: -kv[1]))
    return f"#   postgres ms per workload by process: {parts}"


def _idle_window(seconds: float) -> dict[str, float]:
    """CPU seconds per part over `seconds` with nothing submitted: what a window of that length costs the
    processes whatever it carries (the tracker's resync passes and idle watches, the periodic tasks)."""
    from benchmarks.engine import quiet

    quiet()
    before = cpu.snapshot()
    time.sleep(seconds)
    return cpu.spent(before, cpu.snapshot())


def _print_idle(spent: dict[str, float], length: float, n: int) -> None:
    """The first REST window's fixed costs: the same parts over an idle window of the same length, and what
    the workloads added beyond it (the marginal cost), on `#` lines: the figures themselves are unchanged."""
    idle = _idle_window(length)
    for part in ("tracker", "postgres"):
        busy, still = spent.get(part, 0.0), idle.get(part, 0.0)
        print(
            f"# budget round 1 rest side {part}: {1000 * busy:.0f} ms in the {length:.0f} s window, "
            f"{1000 * still:.0f} ms in an idle window as long; marginal {1000 * (busy - still) / n:.2f} ms per workload",
            flush=True,
        )


def run(ctx: BenchContext) -> Iterator[tuple[str, float]]:
    from benchmarks import web
    from benchmarks.engine import Engine
    from benchmarks.engine_flow import CLIENTS, _web_ready

    ctx.django()
    rounds, n = _env_int("BENCH_BUDGET_ROUNDS", 3), _env_int("BENCH_BUDGET_N", 150)
    if not pgstat.loaded():
        print("# pg_stat_statements is not loaded: statements per workload are not counted", flush=True)
    engine = Engine(ctx)
    figures: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    try:
        with web.gunicorn(engine.ctx, env=engine.identity.env_as("web")) as base_url:
            api = web.Api(base_url, CLIENTS)
            _web_ready(engine, api)
            order = ["raw", "rest", "sweep"]
            for i in range(rounds):
                for side in order[i % 3 :] + order[: i % 3]:
                    if side == "raw":
                        spent = _raw_side(engine, n)
                        add("apiserver_cpu_per_raw_create_ms", 1000 * spent.get("kube-apiserver", 0.0) / n)
                        print(f"# budget round {i + 1} raw side cpu {cpu.per_object(spent, n)}", flush=True)
                        continue
                    spent, statements, top, length, threads = _portal_side(engine, api, n, sweeps=side == "sweep")
                    per = {part: 1000 * seconds / n for part, seconds in spent.items()}
                    print(f"# budget round {i + 1} {side} side cpu {cpu.per_object(spent, n, 'workload')}", flush=True)
                    for line in top:
                        print(line, flush=True)
                    if i == 0 and side == "rest" and os.environ.get("BENCH_BUDGET_IDLE", "1") != "0":
                        _print_idle(spent, length, n)
                    if side == "rest":
                        add("pg_cpu_per_rest_submission_ms", per.get("postgres", 0.0))
                        add("pg_statements_per_rest_submission", statements)
                        add("tracker_cpu_per_workload_ms", per.get("tracker", 0.0))
                        main = sum(threads["main"]) if "main" in threads else float("nan")
                        add("tracker_main_thread_cpu_per_workload_ms", 1000 * main / n)
                        add("tracker_watch_threads_cpu_per_workload_ms", 1000 * _watch_threads(threads) / n)
                        add("web_cpu_per_rest_submission_ms", per.get("web", 0.0))
                        add("worker_cpu_per_workload_ms", per.get("worker", 0.0))
                    else:
                        add("pg_cpu_per_sweep_workload_ms", per.get("postgres", 0.0))
                        add("pg_statements_per_sweep_workload", statements)
                        add("tracker_cpu_per_sweep_workload_ms", per.get("tracker", 0.0))
    finally:
        engine.close()
    medians = {name: statistics.median(values) for name, values in figures.items()}
    apiserver = medians["apiserver_cpu_per_raw_create_ms"]
    yield "budget_rounds", rounds
    yield "budget_workloads_per_side", n
    for name in FIGURES[2:-2]:
        yield name, round(medians[name], 3)
    yield "pg_cpu_per_rest_submission_vs_apiserver", round(medians["pg_cpu_per_rest_submission_ms"] / apiserver, 3)
    yield "tracker_cpu_per_workload_vs_apiserver", round(medians["tracker_cpu_per_workload_ms"] / apiserver, 3)
    for name, goal in GOALS.items():
        verdict = "met" if medians[name] <= goal else "not met"
        print(f"# goal {name} <= {goal}: {verdict} (median {medians[name]:.3f}, rounds {figures[name]})", flush=True)
