"""The workload list and detail pages: visibility, filters, live parts, logs, events and cancelling."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from jobs.kube import client as kube
from jobs.models import State, Workload
from tests.ui.conftest import make_workload

pytestmark = pytest.mark.django_db


def test_owner_and_teammate_see_a_workload_an_outsider_gets_404(login, world):
    workload = make_workload(world)
    for who in (world.owner, world.teammate, world.manager):
        assert login(who).get(reverse("workload_detail", args=[workload.uid])).status_code == 200
    client = login(world.outsider)
    for name in ("workload_detail", "workload_live", "workload_logs", "workload_events", "workload_cancel_confirm"):
        response = client.get(reverse(name, args=[workload.uid]))
        assert response.status_code == 404, name
        assert workload.name not in response.content.decode()
    assert client.post(reverse("workload_cancel", args=[workload.uid])).status_code == 404
    assert client.get(reverse("launch") + f"?clone={workload.uid}").status_code == 404
    Workload.objects.get(id=workload.id, state=State.RUNNING)


def test_detail_shows_state_node_gpu_hours_and_timeline(login, world):
    workload = make_workload(world, state=State.RUNNING, gpu_count=2)
    page = login(world.owner).get(reverse("workload_detail", args=[workload.uid])).content.decode()
    assert 'data-state="RUNNING"' in page
    assert "gpu-p100-1" in page
    assert 'id="gpu-hours">1.0' in page  # 2 GPUs for 30 minutes
    assert "<dt>GPU-hours so far</dt>" in page
    assert "Submitted" in page
    assert 'hx-trigger="every 2s"' in page  # live until final
    assert reverse("launch") + f"?clone={workload.uid}" in page


def test_a_finished_workload_stops_polling(login, world):
    workload = make_workload(world, state=State.SUCCEEDED, exit_code=0)
    page = login(world.owner).get(reverse("workload_live", args=[workload.uid])).content.decode()
    assert 'data-state="SUCCEEDED"' in page
    assert "every 2s" not in page
    assert "Cancel" not in page
    assert "<dt>GPU-hours</dt>" in page  # what it used, not "so far"
    assert "so far" not in page


def test_a_queued_workload_says_why_it_waits(login, world):
    make_workload(world, state=State.RUNNING, gpu_count=2)
    now = timezone.now()
    make_workload(world, state=State.QUEUED, gpu_count=1, created_at=now - timedelta(minutes=2))
    second = make_workload(world, state=State.QUEUED, gpu_count=1, created_at=now - timedelta(minutes=1))
    page = login(world.owner).get(reverse("workload_live", args=[second.uid])).content.decode()
    assert "Waiting for your team's Tesla P100 quota: #2 in the queue" in page
    assert "The team uses 2 of 2 GPUs" in page


def test_a_pending_workload_shows_the_schedulers_message(login, world):
    workload = make_workload(
        world, state=State.PENDING, reason="Unschedulable", message="0/4 nodes: insufficient nvidia.com/gpu"
    )
    page = login(world.owner).get(reverse("workload_live", args=[workload.uid])).content.decode()
    assert "Unschedulable" in page
    assert "0/4 nodes: insufficient nvidia.com/gpu" in page


def test_a_service_shows_its_in_cluster_address(login, world):
    workload = make_workload(world, kind="service", port=8888, k8s_name="wl-notebook-abc", namespace="gpuportal-lab")
    page = login(world.teammate).get(reverse("workload_detail", args=[workload.uid])).content.decode()
    assert "wl-notebook-abc.gpuportal-lab.svc:8888" in page


@pytest.fixture
def unreachable_cluster(settings, tmp_path):
    """A kubeconfig naming an API server that is not there (a closed local port)."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: gone\n"
        "clusters: [{name: gone, cluster: {server: 'https://127.0.0.1:9', insecure-skip-tls-verify: true}}]\n"
        "users: [{name: gone, user: {token: nothing}}]\n"
        "contexts: [{name: gone, context: {cluster: gone, user: gone}}]\n"
    )
    settings.KUBECONFIG = str(path)
    kube.reset()
    yield
    kube.reset()


def test_logs_and_events_explain_an_unreachable_cluster(login, world, unreachable_cluster):
    workload = make_workload(world, pod_name="wl-job-pod")
    client = login(world.owner)
    for name in ("workload_logs", "workload_events"):
        response = client.get(reverse(name, args=[workload.uid]))
        assert response.status_code == 200
        assert "can&#x27;t be reached" in response.content.decode()
    stream = client.get(reverse("workload_logs_stream", args=[workload.uid]))
    body = b"".join(stream.streaming_content).decode()
    assert "event: unavailable" in body
    assert "can't be reached" in body


def test_logs_of_a_workload_not_started_yet(login, world):
    workload = make_workload(world, state=State.QUEUED, namespace="", k8s_name="")
    response = login(world.owner).get(reverse("workload_logs", args=[workload.uid]))
    assert "has not been started yet" in response.content.decode()
    events = login(world.owner).get(reverse("workload_events", args=[workload.uid]))
    assert "Kubernetes has not seen this workload yet" in events.content.decode()


def test_owner_cancels_after_confirming(login, world):
    workload = make_workload(world, state=State.QUEUED)
    client = login(world.owner)
    confirm = client.get(reverse("workload_cancel_confirm", args=[workload.uid]))
    assert "Yes, cancel it" in confirm.content.decode()
    response = client.post(reverse("workload_cancel", args=[workload.uid]), follow=True)
    assert "was cancelled" in response.content.decode()
    workload.refresh_from_db()
    assert workload.state == State.CANCELLED


def test_cancel_needs_post(login, world):
    workload = make_workload(world, state=State.QUEUED)
    assert login(world.owner).get(reverse("workload_cancel", args=[workload.uid])).status_code == 405


def test_a_teammate_cannot_cancel_but_a_manager_can(login, world):
    workload = make_workload(world, state=State.QUEUED)
    assert "Cancel…" not in login(world.teammate).get(reverse("workload_detail", args=[workload.uid])).content.decode()
    response = login(world.teammate).post(reverse("workload_cancel", args=[workload.uid]), follow=True)
    assert "Only its owner or a team manager" in response.content.decode()
    workload.refresh_from_db()
    assert workload.state == State.QUEUED
    login(world.manager).post(reverse("workload_cancel", args=[workload.uid]))
    workload.refresh_from_db()
    assert workload.state == State.CANCELLED


def test_cancelling_a_finished_workload_explains(login, world):
    workload = make_workload(world, state=State.SUCCEEDED)
    response = login(world.owner).post(reverse("workload_cancel", args=[workload.uid]), follow=True)
    assert "already finished" in response.content.decode()


# --- the list ------------------------------------------------------------------------------------
def test_list_mine_and_my_teams(login, world):
    mine = make_workload(world)
    theirs = make_workload(world, owner=world.teammate)
    foreign = make_workload(world, owner=world.outsider, team=world.other_team)
    client = login(world.owner)
    page = client.get(reverse("workload_list")).content.decode()
    assert mine.name in page
    assert theirs.name not in page
    assert foreign.name not in page
    page = client.get(reverse("workload_list"), {"scope": "team"}).content.decode()
    assert mine.name in page
    assert theirs.name in page
    assert foreign.name not in page


def test_list_filters(login, world):
    running = make_workload(world, state=State.RUNNING)
    done = make_workload(world, state=State.SUCCEEDED)
    service = make_workload(world, state=State.RUNNING, kind="service", port=80)
    k2 = make_workload(world, state=State.QUEUED, gpu_type=world.k2)
    client = login(world.owner)

    def names(**query):
        page = client.get(reverse("workload_list"), query).content.decode()
        return {w.name for w in (running, done, service, k2) if f">{w.name}<" in page}

    assert names(state="RUNNING") == {running.name, service.name}
    assert names(state="finished") == {done.name}
    assert names(state="active") == {running.name, service.name, k2.name}
    assert names(kind="service") == {service.name}
    assert names(gpu_type="k2") == {k2.name}
    assert names(state="nonsense") == {running.name, done.name, service.name, k2.name}


def test_list_is_paginated_newest_first(login, world):
    workloads = [make_workload(world) for _ in range(30)]
    newest_first = sorted(workloads, key=lambda w: (w.created_at, w.id), reverse=True)
    client = login(world.owner)
    first = client.get(reverse("workload_list")).content.decode()
    assert "Page 1 of 2" in first
    assert first.index(f">{newest_first[0].name}<") < first.index(f">{newest_first[1].name}<")
    second = client.get(reverse("workload_list"), {"page": 2}).content.decode()
    assert f">{newest_first[-1].name}<" in second
    assert f">{newest_first[0].name}<" not in second


def test_a_page_number_past_any_count_shows_the_last_page(login, world):
    """?page=99999999999999999999 (a hand-edited address) made the count's LIMIT overflow: a 500."""
    workloads = [make_workload(world) for _ in range(30)]
    oldest = min(workloads, key=lambda w: (w.created_at, w.id))
    client = login(world.owner)
    for page in ("99999999999999999999", str(2**62), "999"):
        shown = client.get(reverse("workload_list"), {"page": page})
        assert shown.status_code == 200, page
        assert "Page 2 of 2" in shown.content.decode()
        assert f">{oldest.name}<" in shown.content.decode()


def test_long_lists_are_not_counted_to_the_end(login, world, monkeypatch):
    """A team with 100,000 workloads made every view of the list count them all; now the count stops
    `cap` rows past the page, and the pager says "more than N" where it stopped."""
    from jobs.views import workloads as views_workloads

    monkeypatch.setattr(views_workloads, "LIST_COUNT_CAP", 10)
    for _ in range(40):
        make_workload(world)
    client = login(world.owner)
    with CaptureQueriesContext(connection) as queries:
        first = client.get(reverse("workload_list")).content.decode()
    counts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("SELECT COUNT(")]
    assert counts
    assert all("LIMIT 36" in sql for sql in counts), counts
    assert "Page 1 of 2+ · more than 35 workloads" in first
    assert 'rel="next"' in first
    last = client.get(reverse("workload_list"), {"page": 2}).content.decode()
    assert "Page 2 of 2 · 40 workloads" in last
    assert 'rel="next"' not in last


def test_list_empty_states(login, world):
    client = login(world.owner)
    assert "You have not launched anything yet" in client.get(reverse("workload_list")).content.decode()
    assert "No workloads match" in client.get(reverse("workload_list"), {"state": "FAILED"}).content.decode()


def _queries(client, url, query=None) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url, query or {}).status_code == 200
    return len(captured)


@pytest.mark.parametrize(
    ("url_name", "query"),
    [
        ("workload_list", {}),
        ("workload_list", {"scope": "team", "state": "active"}),
        ("dashboard", {}),
    ],
)
def test_list_pages_take_a_constant_number_of_queries(login, world, django_assert_num_queries, url_name, query):
    client = login(world.owner)
    states = [State.QUEUED, State.RUNNING, State.SUCCEEDED]
    for i in range(3):
        make_workload(world, state=states[i % 3], owner=world.owner if i % 2 == 0 else world.teammate)
    url = reverse(url_name)
    few = _queries(client, url, query)
    for i in range(27):
        make_workload(world, state=states[i % 3], owner=world.owner if i % 2 == 0 else world.teammate)
    with django_assert_num_queries(few):
        assert client.get(url, query).status_code == 200


def test_events_stop_polling_once_final(login, world):
    client = login(world.owner)
    active = make_workload(world, state=State.QUEUED, namespace="", k8s_name="")
    done = make_workload(world, state=State.SUCCEEDED, namespace="", k8s_name="")
    assert "every 5s" in client.get(reverse("workload_events", args=[active.uid])).content.decode()
    assert "every 5s" not in client.get(reverse("workload_events", args=[done.uid])).content.decode()
