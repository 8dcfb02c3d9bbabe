"""What the intake's site fingerprint costs PostgreSQL per submission as the site grows (issue 41). A profile,
not a test: its name keeps it out of every pytest run; give it by path.

    PROFILE_NODES="1 100 1000" python -m devtools.testenv -- python -m pytest tests/engine/profile_site_facts.py -q -s

For each size, the site gets that many GPU nodes (and a tenth as many catalog images), then the statement a
REST submission sends for its team and facts (`intake_facts.submission_teams`) runs PROFILE_CALLS times on
one connection; printed: the backend's CPU per call (from /proc/<pid>/schedstat) and the wall time per call,
then the same for the site's fingerprint alone, the team's alone (each as the statement reads it: the version
rows inline, migrations 0034 and 0035) and a `SELECT 1` (a round trip's floor).
"""

from __future__ import annotations

import os
import time

import pytest
from django.db import connection
from django.utils import timezone

from jobs.models import CatalogImage, GpuNode
from jobs.services.submission import intake_facts
from tests.engine.factories import GpuTypeFactory, MembershipFactory, TeamFactory, UserFactory


def _on_cpu_ns(pid: int) -> int:
    with open(f"/proc/{pid}/schedstat") as f:
        return int(f.read().split()[0])


@pytest.mark.django_db
def test_profile():
    team = TeamFactory(slug="vision")
    user = MembershipFactory(team=team, user=UserFactory(username="olivia")).user
    p100 = GpuTypeFactory(slug="p100")
    calls = int(os.environ.get("PROFILE_CALLS", "300"))
    made = 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    for size in [int(n) for n in os.environ.get("PROFILE_NODES", "1 100 1000").split()]:
        now = timezone.now()
        GpuNode.objects.bulk_create(
            GpuNode(name=f"gpu-{i}", gpu_type=p100, gpus_capacity=8, gpus_allocatable=8, ready=True, last_seen_at=now)
            for i in range(made, size)
        )
        CatalogImage.objects.bulk_create(
            CatalogImage(reference=f"docker.io/lab/img{i}:1", title=f"Image {i}") for i in range(made // 10, size // 10)
        )
        made = size
        intake_facts.submission_teams(user=user, slug="vision")  # the facts read once: a warm process
        cpu, wall = _on_cpu_ns(pid), time.perf_counter()
        for _ in range(calls):
            intake_facts.submission_teams(user=user, slug="vision")
        cpu, wall = _on_cpu_ns(pid) - cpu, time.perf_counter() - wall
        print(
            f"\n{size} nodes, {size // 10} images: team and facts statement {cpu / calls / 1e6:.3f} ms backend CPU, "
            f"{wall / calls * 1e3:.3f} ms wall per call"
        )
        for part in (intake_facts._site_print_sql(), intake_facts._team_print_sql(str(team.id)), "1"):
            with connection.cursor() as cursor:
                cpu = _on_cpu_ns(pid)
                for _ in range(calls):
                    cursor.execute(f"SELECT {part}")
                    cursor.fetchone()
                cpu = _on_cpu_ns(pid) - cpu
            print(f"  SELECT {part}: {cpu / calls / 1e6:.3f} ms backend CPU per call")
