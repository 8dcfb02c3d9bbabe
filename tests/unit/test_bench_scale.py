"""The scale curve's bulk rows (benchmarks/scale_curve.py) are what the product reads: live workloads,
queued and running, and the tracker's view built from the running ones has nothing to change (so the
curve's resync measures the steady state, not a burst of writes)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


def test_the_scale_benchmarks_bulk_rows_read_back_as_live_workloads_the_tracker_agrees_with():
    from benchmarks.scale_curve import _view_of, insert_live
    from jobs.models import State, Workload
    from jobs.services.cluster import watch_loop
    from tests.engine.factories import GpuTypeFactory, TeamFactory

    teams = [TeamFactory(slug=f"scale-{i}") for i in range(10)]
    owners = [get_user_model().objects.create(username=f"s-{i}") for i in range(4)]
    types = [GpuTypeFactory(slug=f"s-{c}") for c in "abc"]
    now = datetime.now(UTC)
    insert_live(1, 20, running=False, tag="zq", teams=teams, owners=owners, types=types, now=now)
    insert_live(1, 6, running=True, tag="zr", teams=teams, owners=owners, types=types, now=now)
    queued = list(Workload.objects.filter(uid__startswith="zq"))
    running = list(Workload.objects.filter(uid__startswith="zr").select_related("team"))
    assert len(queued) == 20
    assert {w.state for w in queued} == {State.QUEUED}
    assert {w.gpu_count for w in queued} <= {1, 2, 4, 8}
    assert len(running) == 6
    assert {w.state for w in running} == {State.RUNNING}
    assert all(w.namespace == w.team.namespace and w.started_at for w in running)
    view = _view_of(
        Workload.objects.filter(uid__startswith="zr").values_list(
            "uid", "namespace", "k8s_name", "node_name", "pod_uid", "started_at"
        )
    )
    assert all(view.objects_for(w)[1] for w in running)  # each has its running pod in the view
    assert watch_loop.sync_workloads(view, None, full=True) == 0
