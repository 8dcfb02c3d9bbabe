"""PostgreSQL's CPU along the statement budget's path, per workload and per stage (issue 41). A profile, not a
test: its name keeps it out of every pytest run; give it by path.

    GPUPORTAL_PG_DURABLE=1 GPUPORTAL_PG_OPTIONS="-c shared_preload_libraries=pg_stat_statements \\
        -c pg_stat_statements.track_planning=on -c pg_stat_statements.track_utility=on" PROFILE_N=60 \\
        python -m devtools.testenv -- python -m pytest tests/engine/profile_statement_budget.py -q -s

Takes PROFILE_N workloads (after three to warm up) one at a time along the path of
tests/engine/test_statement_budget.py (the REST submission, the admission pass, the create, the tracker's
two transitions, the notification fan-out) in this process, on one database connection, and prints the CPU
that connection's PostgreSQL backend spent in each stage (from /proc/<pid>/schedstat, nanoseconds: the
backend only, not the WAL writer or the checkpointer), and, where the server loads pg_stat_statements with
track_planning, the planning and execution time per workload and the top statements by both. No cluster,
no worker, no web server: what the path costs PostgreSQL without a window's periodic passes and idle time,
so a change to a statement or a setting can be weighed alternating before/after in a minute.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

import pytest
from django.db import connection

from tests.engine.test_statement_budget import PATH, path  # noqa: F401 - the fixture


def _on_cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as stat:
        return int(stat.read().split()[0])


def _statements(n: int) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SHOW shared_preload_libraries")
        if "pg_stat_statements" not in cursor.fetchone()[0]:
            return ["  (pg_stat_statements is not loaded: no planning/execution split)"]
        cursor.execute(
            "SELECT calls, total_plan_time, total_exec_time, plans, regexp_replace(query, '\\s+', ' ', 'g') "
            "FROM pg_stat_statements WHERE query NOT LIKE '%%pg_stat_statements%%' "
            "ORDER BY total_plan_time + total_exec_time DESC"
        )
        rows = cursor.fetchall()
    calls, plan, run = (sum(row[i] for row in rows) for i in range(3))
    lines = [f"  statements {calls / n:.1f}, planning {plan / n:.3f} ms, execution {run / n:.3f} ms per workload"]
    for count, planning, execution, plans, query in rows[: int(os.environ.get("PROFILE_TOP", "15"))]:
        lines.append(
            f"   {count / n:5.2f}/w planned {plans / n:4.2f}/w  plan {planning / n:6.3f} exec {execution / n:6.3f}"
            f" ms/w  {query[:140]}"
        )
    return lines


def _hot_updates() -> list[str]:
    """Updates per table and how many were HOT (no index written: the new row version fits the page and no
    indexed column changed), for the tables the path writes."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
            "WHERE n_tup_upd > 0 ORDER BY n_tup_upd DESC LIMIT 6"
        )
        rows = cursor.fetchall()
    return [f"  {name}: {ins} inserted, {upd} updated, {hot} of them HOT" for name, ins, upd, hot in rows]


def _index_work(n: int) -> list[str]:
    """Per index of the tables the path writes: scans (what reads use it) and buffer hits (reads and the
    entries written at each insert and non-HOT update) per workload, busiest first."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute(
            "SELECT s.relname, s.indexrelname, s.idx_scan, io.idx_blks_hit + io.idx_blks_read "
            "FROM pg_stat_user_indexes s JOIN pg_statio_user_indexes io USING (indexrelid) "
            "WHERE io.idx_blks_hit + io.idx_blks_read > 0 ORDER BY 4 DESC LIMIT %s",
            [int(os.environ.get("PROFILE_INDEXES", "20"))],
        )
        rows = cursor.fetchall()
    return [
        f"  {table}.{index}: {scans / n:.2f} scans, {hits / n:.1f} buffer hits per workload"
        for table, index, scans, hits in rows
    ]


@pytest.mark.django_db(transaction=True)
def test_profile(path):  # noqa: F811 - the fixture imported above
    one, stages = path
    n = int(os.environ.get("PROFILE_N", "60"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid(), current_setting('shared_preload_libraries')")
        backend, libraries = cursor.fetchone()
        if "pg_stat_statements" in libraries:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    for _ in range(3):
        one()
    if "pg_stat_statements" in libraries:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_statements_reset()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_reset()")
    spent: dict[str, int] = {}
    counted = stages.stage

    @contextmanager
    def timed(name: str):
        before = _on_cpu_ns(backend)
        with counted(name):
            yield
        spent[name] = spent.get(name, 0) + _on_cpu_ns(backend) - before

    stages.stage = timed
    stages.sent.clear()
    started, wall = _on_cpu_ns(backend), time.perf_counter()
    for _ in range(n):
        one()
    total, wall = _on_cpu_ns(backend) - started, time.perf_counter() - wall
    print(f"\n{n} workloads; PostgreSQL backend CPU per workload {total / n / 1e6:.3f} ms (the stages and the")
    print(f"profile's own reads between them), wall {wall / n * 1000:.1f} ms; load average {os.getloadavg()[0]:.1f}")
    for name in PATH:
        sent = len(stages.sent.get(name, [])) / n
        print(f"  {name:10s} {spent.get(name, 0) / n / 1e6:6.3f} ms  {sent:4.1f} statements")
    print("\n".join(_statements(n)))
    print("\n".join(_hot_updates()))
    print("\n".join(_index_work(n)))
