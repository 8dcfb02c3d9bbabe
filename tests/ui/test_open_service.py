"""The Open button (detail page, list, dashboard), the "Shared with my team" checkbox and launching shared."""

from __future__ import annotations

import pytest

from jobs.models import Workload, WorkloadEvent
from tests.ui.conftest import make_workload


@pytest.fixture
def notebook(world) -> Workload:
    return make_workload(world, kind="service", port=8888, name="nb")


def _open_link(uid: str) -> str:
    return f'href="/w/{uid}/"'


def test_owner_sees_open_on_the_page_the_list_and_the_dashboard(world, login, notebook):
    client = login(world.owner)
    for url in (f"/workloads/{notebook.uid}/", "/workloads/", "/"):
        page = client.get(url).content.decode()
        assert _open_link(notebook.uid) in page, url
    detail = client.get(f"/workloads/{notebook.uid}/").content.decode()
    assert "Opens at" in detail
    assert "Last used through the portal" in detail
    assert 'name="shared_with_team"' in detail  # the owner's checkbox


def test_teammate_gets_open_only_once_shared(world, login, notebook):
    client = login(world.teammate)
    assert _open_link(notebook.uid) not in client.get(f"/workloads/{notebook.uid}/").content.decode()
    assert _open_link(notebook.uid) not in client.get("/workloads/?scope=team").content.decode()
    assert 'name="shared_with_team"' not in client.get(f"/workloads/{notebook.uid}/").content.decode()
    Workload.objects.filter(id=notebook.id).update(shared_with_team=True)
    assert _open_link(notebook.uid) in client.get(f"/workloads/{notebook.uid}/").content.decode()
    assert _open_link(notebook.uid) in client.get("/workloads/?scope=team").content.decode()


def test_no_open_for_batch_jobs_or_ended_services(world, login):
    batch = make_workload(world)
    ended = make_workload(world, kind="service", port=8888, state="SUCCEEDED")
    client = login(world.owner)
    listing = client.get("/workloads/?state=").content.decode()
    assert _open_link(batch.uid) not in listing
    assert _open_link(ended.uid) not in listing


def test_owner_shares_and_unshares_on_the_page(world, login, notebook):
    client = login(world.owner)
    response = client.post(f"/workloads/{notebook.uid}/share/", {"shared_with_team": "1"}, follow=True)
    assert "Your teammates can open it now." in response.content.decode()
    notebook.refresh_from_db()
    assert notebook.shared_with_team
    client.post(f"/workloads/{notebook.uid}/share/", {})
    notebook.refresh_from_db()
    assert not notebook.shared_with_team
    reasons = list(WorkloadEvent.objects.filter(workload=notebook).values_list("reason", flat=True))
    assert reasons[-2:] == ["SharedWithTeam", "NoLongerShared"]


def test_teammate_cannot_share_and_outsider_gets_404(world, login, notebook):
    response = login(world.teammate).post(f"/workloads/{notebook.uid}/share/", {"shared_with_team": "1"}, follow=True)
    assert "Only the owner" in response.content.decode()
    notebook.refresh_from_db()
    assert not notebook.shared_with_team
    assert login(world.outsider).post(f"/workloads/{notebook.uid}/share/", {"shared_with_team": "1"}).status_code == 404


def test_launch_a_service_shared_with_the_team(world, login):
    client = login(world.owner)
    form = client.get("/launch/").content.decode()
    assert 'name="shared_with_team"' in form
    response = client.post(
        "/launch/",
        {
            "kind": "service", "catalog_image": str(world.notebook.id), "gpu_type": "p100", "gpu_count": "1",
            "port": "8888", "time_limit": "1", "time_limit_unit": "hours", "name": "shared-nb",
            "shared_with_team": "on", "env-TOTAL_FORMS": "0",
        },
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Workload.objects.get(name="shared-nb").shared_with_team
