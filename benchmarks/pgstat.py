"""The SQL a stretch of a benchmark sent, from PostgreSQL's own pg_stat_statements: which statements, how
often, and how long they ran (execution time includes waiting for locks). Off unless the run's
PostgreSQL loads the extension, e.g.

    GPUPORTAL_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements" BENCH_PG_STATEMENTS=1 \\
        GPUPORTAL_PG_DURABLE=1 python -m devtools.testenv -- python -m benchmarks engine

Only a diagnosis: no figure comes from here.
"""

from __future__ import annotations

import os

from django.db import connection

TOP = 25


def enabled() -> bool:
    return os.environ.get("BENCH_PG_STATEMENTS") == "1"


def reset() -> None:
    """Start a window: forget what was counted so far (creates the extension's views the first time)."""
    if not enabled():
        return
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        cursor.execute("SELECT pg_stat_statements_reset()")


def report(label: str, per: int) -> list[str]:
    """The window's top statements by total execution time, as `#` lines, with calls and ms per `per`."""
    if not enabled():
        return []
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
    return lines
