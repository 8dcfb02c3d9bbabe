"""What people see of work that survives: the last checkpoint, the work lost, the retries and when a borrowed
job may be preempted on the workload page; the GPU health marks on the nodes page, cleared by an admin."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from jobs.models import GpuHealthMark
from jobs.services.cluster import node_health
from jobs.services.cluster.gpu_faults import GpuSeen
from tests.ui.conftest import make_workload


def test_the_workload_page_shows_the_last_checkpoint_its_age_and_the_work_lost(world, login):
    now = timezone.now()
    workload = make_workload(
        world, restartable=True, last_checkpoint_at=now - timedelta(minutes=7), last_checkpoint_step=4200,
        lost_gpu_seconds=2 * 3600, retries=1, borrowed=True,
    )  # fmt: skip
    world.p100.min_runtime_seconds = 3600
    world.p100.save()
    html = login(world.owner).get(f"/workloads/{workload.uid}/").content.decode()
    assert "step 4200" in html
    assert "7\xa0minutes ago" in html or "7 minutes ago" in html
    assert 'id="lost-gpu-hours"' in html
    assert "1 of 3" in html  # retries so far of the team's default limit
    assert 'id="preemptible-from"' in html  # borrowed, 30 min into a 60-min minimum runtime


def test_nodes_page_lists_marks_and_an_admin_clears_one(world, login):
    (mark,) = node_health.apply_report("gpu-p100-1", [GpuSeen(0, "GPU-x", xid_errors=1, last_xid=79)])
    assert node_health.nodes_to_avoid() == ("gpu-p100-1",)
    html = login(world.owner).get("/nodes/").content.decode()
    assert "GPU health marks" in html
    assert "Xid 79" in html
    assert "new work avoids it" in html
    assert "Clear</button>" not in html  # a member cannot clear
    assert login(world.owner).post(f"/nodes/health/{mark.id}/clear/").status_code == 302  # to the admin sign-in
    mark.refresh_from_db()
    assert mark.is_open
    admin = world.admin
    admin.is_staff = True
    admin.save()
    login(admin).post(f"/nodes/health/{mark.id}/clear/")
    mark.refresh_from_db()
    assert mark.cleared_how == GpuHealthMark.Cleared.ADMIN
    assert node_health.nodes_to_avoid() == ()
