"""`make bench` does not break where the suite cannot see it: what the benchmark modules import inside
their functions exists, and the data they build with their own SQL or worlds is what the product reads.
(Each of these broke a clean `make bench` once: an import from where a helper no longer lived, a bulk
insert missing columns added since, an audit world missing what the pages' data reads.)"""

from __future__ import annotations

import ast
import importlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

import benchmarks

BENCH_DIR = Path(benchmarks.__file__).parent


def _imports_inside_functions() -> list[tuple[str, str, str]]:
    """(the first file that does it, module, name) for every distinct name imported inside a function."""
    found: dict[tuple[str, str], str] = {}
    for path in sorted(BENCH_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    for alias in node.names:
                        found.setdefault((node.module, alias.name), path.name)
    return [(where, module, name) for (module, name), where in sorted(found.items())]


@pytest.mark.parametrize(("where", "module", "name"), _imports_inside_functions())
def test_every_name_a_benchmark_imports_inside_a_function_exists(where, module, name):
    imported = importlib.import_module(module)
    if not hasattr(imported, name):
        importlib.import_module(f"{module}.{name}")  # a submodule, or the test fails here


@pytest.mark.django_db
def test_the_usage_benchmarks_bulk_rows_read_back_as_finished_workloads():
    from benchmarks.bench_engine import insert_finished
    from jobs.models import State, Workload
    from tests.engine.factories import GpuTypeFactory, TeamFactory

    users = get_user_model()
    teams = [TeamFactory(slug=f"usage-{i}") for i in range(10)]
    members = [users.objects.create(username=f"u-{i}") for i in range(40)]
    types = [GpuTypeFactory(slug=f"u-{c}") for c in "abc"]
    insert_finished(25, tag="zt", teams=teams, members=members, types=types, month=datetime(2026, 9, 1, tzinfo=UTC))
    rows = list(Workload.objects.filter(uid__startswith="zt").order_by("uid"))
    assert len(rows) == 25
    assert {w.state for w in rows} == {State.SUCCEEDED}
    assert all(w.finished_at > w.started_at and w.gpu_seconds() > 0 for w in rows)


@pytest.mark.django_db
def test_the_audit_builds_the_pages_data_for_a_manager():
    from benchmarks.bench_audit import seed

    workloads, manager = seed()
    assert {"batch-queued", "batch-running", "service-running"} <= set(workloads)
    assert all(w.team.memberships.filter(user=manager, role="manager").exists() for w in workloads.values())
