"""The SQL a stretch of a benchmark sent, from PostgreSQL's own pg_stat_statements: which statements, how
often, and how long they ran (execution time includes waiting for locks). Off unless the run's
PostgreSQL loads the extension, e.g.

    GPUPORTAL_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements" BENCH_PG_STATEMENTS=1 \\
        GPUPORTAL_PG_DURABLE=1 python -m devtools.testenv -- python -m benchmarks engine

The engine's submit rounds use it only as a diagnosis (BENCH_PG_STATEMENTS=1); bench_budgets counts
statements per workload from it (`window`), and `make bench` starts PostgreSQL with the extension loaded.
"""

from __future__ import annotations

import functools
import os

from django.db import connection

TOP = int(os.environ.get("BENCH_PG_TOP", "25"))  # `#` lines of statements per window


def enabled() -> bool:
    return os.environ.get("BENCH_PG_STATEMENTS") == "1"


@functools.cache
def loaded() -> bool:
    """Whether the run's PostgreSQL has the extension loaded (shared_preload_libraries; asked once, so that
    the question is not itself counted in a window)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW shared_preload_libraries")
        return "pg_stat_statements" in cursor.fetchone()[0]


def reset(*, force: bool = False) -> None:
    """Start a window: forget what was counted so far (creates the extension's views the first time)."""
    if not (force or enabled()) or (force and not loaded()):
        return
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        cursor.execute("SELECT pg_stat_statements_reset()")


def report(label: str, per: int) -> list[str]:
    """The window's top statements by total execution time, as `#` lines, with calls and ms per `per`."""
    if not enabled():
        return []
    return window(label, per)[1]


def window(label: str, per: int) -> tuple[int | None, list[str]]:
    """Statements PostgreSQL ran since `reset` (None without the extension), and `#` lines of the top ones by
    total execution time with their calls and ms per `per` object."""
    if not loaded():
        return None, []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT calls, total_exec_time, rows, regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements "
            "WHERE query NOT LIKE '%%pg_stat_statements%%' ORDER BY total_exec_time DESC"
        )
        rows = cursor.fetchall()
    calls = sum(r[0] for r in rows)
    total = sum(r[1] for r in rows)
    lines = [f"# {label} SQL: {calls / per:.2f} statements and {total / per:.2f} ms of execution per object"]
    for count, ms, returned, query in rows[:TOP]:
        shares = f"{count / per:6.2f}/obj {ms / per:7.3f} ms/obj {ms / count:7.3f} ms/call {returned / count:6.1f} rows"
        lines.append(f"#   {shares}  {query[:160]}")
    return calls, lines


def round_trips_line(label: str, per: int, transactions: int) -> str:
    """A `#` line: the window's statements per object by kind. The foreign-key checks run inside the INSERT or
    UPDATE that fires them (no round trip of their own); the rest are each a round trip from a client.
    `transactions`: commits and rollbacks the window's clients made (pg_stat_database), autocommitted
    statements included, each with its own WAL flush when it wrote."""
    if not loaded():
        return f"# {label} round trips: (no pg_stat_statements)"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(calls) FILTER (WHERE query LIKE 'SELECT 1 FROM ONLY %%'), 0),"
            " coalesce(sum(calls) FILTER (WHERE query ILIKE 'BEGIN%%'), 0),"
            " coalesce(sum(calls) FILTER (WHERE query ILIKE 'COMMIT%%' OR query ILIKE 'ROLLBACK%%'), 0),"
            " coalesce(sum(calls) FILTER (WHERE query ~ '^SELECT 1$|^SELECT \\$1$'), 0),"
            " coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query NOT LIKE '%%pg_stat_statements%%'"
        )
        checks, begins, ends, health, calls = cursor.fetchone()
    trips = calls - checks
    return (
        f"# {label} round trips per object: {trips / per:.2f} (BEGIN {begins / per:.2f}, COMMIT/ROLLBACK "
        f"{ends / per:.2f}, SELECT 1 {health / per:.2f}, the rest {(trips - begins - ends - health) / per:.2f}); "
        f"foreign-key checks inside them {checks / per:.2f}; transactions {transactions / per:.2f}"
    )
