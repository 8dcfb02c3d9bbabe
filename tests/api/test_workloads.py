"""Workload endpoints with the owner, a teammate, a manager, an outsider and an admin."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.test import override_settings
from django.utils import timezone

from jobs.kube import client as kube
from jobs.models import CatalogImage, State, Workload

ALL = ["owner", "teammate", "manager", "outsider", "admin"]


def test_submit_as_each_person(world, submit):
    for who in ("owner", "teammate", "manager"):
        body = submit(who, name=f"job-{who}")
        assert body["team"] == "vision"
        assert body["owner"] == getattr(world, who).username
        assert body["state"] == "QUEUED"
        assert body["gpu_type"] == "p100"
    # The outsider's only team is theirs: the workload lands there.
    assert submit("outsider")["team"] == "language"
    # Naming a team one does not belong to is refused, naming the field.
    response = world.client("outsider").post(
        "/api/v1/workloads/", {"team": "vision", "image": "docker.io/x:1", "gpu_type": "p100"}, format="json"
    )
    assert response.status_code == 400
    assert "team" in response.json()["error"]["fields"]
    # The admin belongs to no team: the team must be named, and submitting needs membership.
    response = world.client("admin").post(
        "/api/v1/workloads/", {"image": "docker.io/x:1", "gpu_type": "p100"}, format="json"
    )
    assert response.status_code == 400
    assert "team" in response.json()["error"]["fields"]
    assert Workload.objects.count() == 4


def test_submit_location_header_and_queue_position(world, submit):
    first = submit()
    response = world.client("owner").post(
        "/api/v1/workloads/", {"image": "docker.io/x:1", "gpu_type": "p100"}, format="json"
    )
    assert response.status_code == 201
    assert response["Location"] == f"/api/v1/workloads/{response.json()['uid']}/"
    assert first["queue_position"] == 1
    assert response.json()["queue_position"] == 2


def test_several_teams_need_the_team_named(world):
    from identity.models import Membership

    Membership.objects.create(user=world.owner, team=world.other_team)
    client = world.client("owner")
    response = client.post("/api/v1/workloads/", {"image": "docker.io/x:1", "gpu_type": "p100"}, format="json")
    assert response.status_code == 400
    assert "several teams" in response.json()["error"]["fields"]["team"][0]
    response = client.post(
        "/api/v1/workloads/", {"team": "language", "image": "docker.io/x:1", "gpu_type": "p100"}, format="json"
    )
    assert response.status_code == 201
    assert response.json()["team"] == "language"


def test_submission_rules_come_back_as_field_errors(world):
    response = world.client("owner").post(
        "/api/v1/workloads/",
        {"image": "quay.io/evil/miner:1", "gpu_type": "p100", "gpu_count": 9, "name": "Bad Name"},
        format="json",
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["status"] == 400
    assert error["code"] == "invalid"
    assert set(error["fields"]) >= {"image", "gpu_count", "name"}
    assert Workload.objects.count() == 0


def test_an_image_that_needs_root_without_an_admins_approval_is_refused_on_image(world):
    image = CatalogImage.objects.create(reference="docker.io/lab/apt:1", title="Apt", needs_root=True)
    client = world.client("owner")
    for body in ({"catalog_image": image.id}, {"image": "docker.io/lab/apt:1"}):
        response = client.post("/api/v1/workloads/", {**body, "gpu_type": "p100"}, format="json")
        assert response.status_code == 400
        assert list(response.json()["error"]["fields"]) == ["image"]
        assert "needs to run as root" in response.json()["error"]["fields"]["image"][0]
    assert Workload.objects.count() == 0
    image.root_allowed = True
    image.save()
    response = client.post("/api/v1/workloads/", {"catalog_image": image.id, "gpu_type": "p100"}, format="json")
    assert response.status_code == 201


@pytest.mark.parametrize(
    ("who", "status"), [("owner", 200), ("teammate", 200), ("manager", 200), ("outsider", 404), ("admin", 200)]
)
def test_retrieve(world, submit, who, status):
    uid = submit()["uid"]
    response = world.client(who).get(f"/api/v1/workloads/{uid}/")
    assert response.status_code == status
    if status == 404:
        assert response.json()["error"]["code"] == "not_found"
    else:
        assert response.json()["uid"] == uid


def test_retrieve_unknown_and_anonymous(world, submit):
    uid = submit()["uid"]
    assert world.client("owner").get("/api/v1/workloads/zzzzzzzz/").status_code == 404
    response = world.client(None).get(f"/api/v1/workloads/{uid}/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_list_shows_only_own_teams(world, submit):
    mine = submit()["uid"]
    theirs = submit("outsider")["uid"]
    seen = {who: [w["uid"] for w in world.client(who).get("/api/v1/workloads/").json()["results"]] for who in ALL}
    assert seen["owner"] == seen["teammate"] == seen["manager"] == [mine]
    assert seen["outsider"] == [theirs]
    assert set(seen["admin"]) == {mine, theirs}


def test_list_filters(world, submit):
    a = submit(name="a")["uid"]
    b = submit("teammate", name="b", gpu_type="k80", kind="batch")["uid"]
    Workload.objects.filter(uid=b).update(state=State.RUNNING, created_at=timezone.now() - timedelta(days=2))
    client = world.client("manager")

    def uids(query: str) -> set[str]:
        response = client.get(f"/api/v1/workloads/?{query}")
        assert response.status_code == 200, response.content
        return {w["uid"] for w in response.json()["results"]}

    assert uids("state=QUEUED") == {a}
    assert uids("state=QUEUED&state=RUNNING") == {a, b}
    assert uids("gpu_type=k80") == {b}
    assert uids("owner=tom") == {b}
    assert uids("kind=service") == set()
    day_ago = (timezone.now() - timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert uids(f"created_after={day_ago}") == {a}
    assert uids(f"created_before={day_ago}") == {b}
    assert uids("team=vision") == {a, b}
    bad = client.get("/api/v1/workloads/?state=DANCING&created_after=yesterday")
    assert bad.status_code == 400
    assert set(bad.json()["error"]["fields"]) == {"state", "created_after"}


def test_a_list_filtered_by_a_team_or_gpu_type_that_is_not_there_says_so(world, submit):
    """`gpuportal list --team visoin` (a typo) or another team's slug is a 400 naming the filter, as on
    /usage/ and /secrets/, not an empty list that reads as "nothing is running"."""
    submit(name="a")
    client = world.client("manager")
    for query, field in [("team=visoin", "team"), ("team=language", "team"), ("gpu_type=h9000", "gpu_type")]:
        refused = client.get(f"/api/v1/workloads/?{query}")
        assert refused.status_code == 400, (query, refused.content)
        assert list(refused.json()["error"]["fields"]) == [field]
    assert len(client.get("/api/v1/workloads/?team=vision&gpu_type=p100").json()["results"]) == 1


def test_cursor_pagination_walks_every_workload_once(world, submit):
    made = [submit(name=f"w{i}")["uid"] for i in range(7)]
    client = world.client("owner")
    url, seen = "/api/v1/workloads/?page_size=3", []
    while url:
        page = client.get(url).json()
        seen += [w["uid"] for w in page["results"]]
        url = page["next"]
    assert seen == list(reversed(made))


def test_garbled_and_expired_cursors_are_400(world, submit):
    for i in range(3):
        submit(name=f"w{i}")
    client = world.client("owner")
    garbled = client.get("/api/v1/workloads/?cursor=cD0yMDI2LTAx")
    assert garbled.status_code == 400
    assert "cursor" in garbled.json()["error"]["fields"]
    next_url = client.get("/api/v1/workloads/?page_size=1").json()["next"]
    assert client.get(next_url).status_code == 200
    with time_machine.travel(timezone.now() + timedelta(days=2)):
        expired = client.get(next_url)
    assert expired.status_code == 400
    assert "expired" in expired.json()["error"]["fields"]["cursor"][0]
    assert client.get("/api/v1/workloads/?page_size=0").status_code == 400
    assert client.get("/api/v1/workloads/?page_size=abc").status_code == 400


@pytest.mark.parametrize(
    ("who", "status"), [("owner", 200), ("teammate", 403), ("manager", 200), ("outsider", 404), ("admin", 200)]
)
def test_cancel(world, submit, who, status):
    uid = submit()["uid"]
    response = world.client(who).post(f"/api/v1/workloads/{uid}/cancel/")
    assert response.status_code == status, response.content
    state = Workload.objects.get(uid=uid).state
    assert state == (State.CANCELLED if status == 200 else State.QUEUED)
    if status == 200:
        assert response.json()["state"] == "CANCELLED"
        again = world.client(who).post(f"/api/v1/workloads/{uid}/cancel/")
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "conflict"


@pytest.mark.parametrize("who", ALL)
def test_logs_of_a_queued_workload_are_a_clean_409(world, submit, who):
    uid = submit()["uid"]
    response = world.client(who).get(f"/api/v1/workloads/{uid}/logs/?tail=10")
    if who == "outsider":
        assert response.status_code == 404
        return
    assert response.status_code == 409
    assert response["Content-Type"] == "application/json"
    assert "not started" in response.json()["error"]["message"]


def test_logs_when_the_cluster_is_unreachable_are_503(world, submit, tmp_path):
    uid = submit()["uid"]
    Workload.objects.filter(uid=uid).update(
        state=State.RUNNING, k8s_name=f"wl-{uid}", pod_name=f"wl-{uid}-abcde", namespace="gpuportal-vision"
    )
    kube.reset()
    try:
        with override_settings(KUBECONFIG=str(tmp_path / "missing-kubeconfig")):
            response = world.client("owner").get(f"/api/v1/workloads/{uid}/logs/")
            events = world.client("owner").get(f"/api/v1/workloads/{uid}/events/")
    finally:
        kube.reset()
    assert response.status_code == 503
    assert "Kubernetes" in response.json()["error"]["message"]
    assert events.status_code == 503


def test_logs_parameters_are_checked(world, submit):
    uid = submit()["uid"]
    client = world.client("owner")
    for query in ("tail=0", "tail=abc", "since=-5", "follow=maybe"):
        response = client.get(f"/api/v1/workloads/{uid}/logs/?{query}")
        assert response.status_code == 400, query


@pytest.mark.parametrize(
    ("who", "status"), [("owner", 200), ("teammate", 200), ("manager", 200), ("outsider", 404), ("admin", 200)]
)
def test_events(world, submit, who, status):
    uid = submit()["uid"]
    response = world.client(who).get(f"/api/v1/workloads/{uid}/events/")
    assert response.status_code == status
    if status == 200:
        body = response.json()
        assert [e["reason"] for e in body["timeline"]] == ["Submitted"]
        assert body["kubernetes"] == []


def test_list_queue_positions_agree_with_the_engine(world, submit):
    from jobs.selectors import with_queue_position

    uids = [submit(name=f"q{i}", gpu_type="p100" if i % 2 else "k80")["uid"] for i in range(6)]
    Workload.objects.filter(uid=uids[3]).update(priority=50)
    Workload.objects.filter(uid=uids[0]).update(state=State.RUNNING)
    listed = {w["uid"]: w["queue_position"] for w in world.client("owner").get("/api/v1/workloads/").json()["results"]}
    expected = {
        w.uid: (w.queue_position if w.state == State.QUEUED else None)
        for w in with_queue_position(Workload.objects.filter(uid__in=uids))
    }
    assert listed == expected
    assert listed[uids[3]] == 1
    assert listed[uids[0]] is None


def test_fast_representation_matches_the_declared_fields(world, submit):
    from rest_framework import serializers as drf

    from api.serializers import WorkloadSerializer

    uid = submit(env=[{"name": "A", "value": "1"}])["uid"]
    Workload.objects.filter(uid=uid).update(
        state=State.RUNNING, started_at=timezone.now() - timedelta(hours=1), node_name="gpu-p100-1", exit_code=None
    )
    workload = Workload.objects.select_related("team", "owner", "gpu_type").get(uid=uid)
    serializer = WorkloadSerializer(context={"now": timezone.now()})
    assert serializer.to_representation(workload) == drf.ModelSerializer.to_representation(serializer, workload)


def test_list_queue_positions_with_ties_and_several_queues(world, submit):
    # Same priority and the same created_at: the lower id goes first; other teams' queues are their own.
    from jobs.selectors import with_queue_position

    uids = [submit(name=f"t{i}")["uid"] for i in range(4)] + [submit("outsider", name="o1")["uid"]]
    tied_at = timezone.now() - timedelta(minutes=5)
    Workload.objects.filter(uid__in=uids[1:3]).update(created_at=tied_at)
    Workload.objects.filter(uid=uids[0]).update(priority=-5)
    listed = {w["uid"]: w["queue_position"] for w in world.client("admin").get("/api/v1/workloads/").json()["results"]}
    expected = {w.uid: w.queue_position for w in with_queue_position(Workload.objects.filter(uid__in=uids))}
    assert {uid: listed[uid] for uid in uids} == expected
    first, second = sorted(Workload.objects.filter(uid__in=uids[1:3]), key=lambda w: w.id)
    assert (listed[first.uid], listed[second.uid]) == (1, 2)
    assert listed[uids[0]] == 4
    assert listed[uids[4]] == 1


def test_list_rows_are_the_workloads_own_and_queries_do_not_grow(world, submit):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from identity.models import Membership

    Membership.objects.create(user=world.teammate, team=world.other_team)
    for i in range(3):
        submit("owner", name=f"a{i}")
        submit("teammate", team="vision", name=f"b{i}", gpu_type="k80")
    submit("outsider", name="c0")
    client = world.client("teammate")
    with CaptureQueriesContext(connection) as small:
        page = client.get("/api/v1/workloads/?page_size=2").json()
    with CaptureQueriesContext(connection) as large:
        listed = client.get("/api/v1/workloads/?page_size=50").json()["results"]
    assert len(small.captured_queries) == len(large.captured_queries)
    assert page["next"]
    assert len(listed) == 7
    for row in listed:  # each row as the workload's own page gives it (team, owner, GPU type, position...)
        assert row == client.get(f"/api/v1/workloads/{row['uid']}/").json() | {"gpu_hours": row["gpu_hours"]}
