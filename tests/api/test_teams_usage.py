"""Teams, quotas, queue, GPU types, the catalog and usage, per person."""

from __future__ import annotations

import csv
import io
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import CatalogImage, State, Workload


@pytest.mark.parametrize(
    ("who", "teams"),
    [
        ("owner", [("vision", "member")]),
        ("teammate", [("vision", "member")]),
        ("manager", [("vision", "manager")]),
        ("outsider", [("language", "member")]),
        ("admin", [("language", "admin"), ("vision", "admin")]),
    ],
)
def test_teams(world, who, teams):
    response = world.client(who).get("/api/v1/teams/")
    assert response.status_code == 200
    assert [(t["slug"], t["role"]) for t in response.json()] == teams


@pytest.mark.parametrize(
    ("who", "status"), [("owner", 200), ("teammate", 200), ("manager", 200), ("outsider", 404), ("admin", 200)]
)
def test_team_quotas_and_queue(world, submit, who, status):
    held = submit(gpu_count=2)["uid"]
    Workload.objects.filter(uid=held).update(state=State.RUNNING)
    first = submit(gpu_count=1)["uid"]
    second = submit("teammate", gpu_count=2)["uid"]
    client = world.client(who)
    for url in ("/api/v1/teams/vision/", "/api/v1/teams/vision/quotas/", "/api/v1/teams/vision/queue/"):
        assert client.get(url).status_code == status, url
    if status != 200:
        return
    quotas = {q["gpu_type"]: q for q in client.get("/api/v1/teams/vision/quotas/").json()}
    assert quotas["p100"] == {"gpu_type": "p100", "limit": 4, "used": 2, "queued": 3, "free": 2}
    assert quotas["k80"] == {"gpu_type": "k80", "limit": 2, "used": 0, "queued": 0, "free": 2}
    queue = client.get("/api/v1/teams/vision/queue/").json()
    assert [(w["uid"], w["queue_position"]) for w in queue["queued"]] == [(first, 1), (second, 2)]


def test_unknown_team_is_404(world):
    assert world.client("owner").get("/api/v1/teams/nope/quotas/").status_code == 404


@pytest.mark.parametrize("who", ["owner", "teammate", "manager", "outsider", "admin"])
def test_gpu_types(world, submit, who):
    submit(gpu_count=1)
    client = world.client(who)
    response = client.get("/api/v1/gpu-types/" + ("?team=vision" if who == "admin" else ""))
    assert response.status_code == 200, response.content
    types = {t["slug"]: t for t in response.json()}
    assert types["p100"]["cluster"] == {"total": 8, "free": 7, "largest_node": 4, "nodes": 2}
    assert types["k80"]["billing_weight"] == 0.5
    assert (types["p100"]["kind"], types["p100"]["gpu_share"], types["p100"]["max_per_container"]) == (
        "whole",
        1.0,
        None,
    )
    if who == "outsider":
        assert types["p100"]["quota"] == {"gpu_type": "p100", "limit": 2, "used": 0, "queued": 0, "free": 2}
        assert types["k80"]["quota"] is None
        bad = client.get("/api/v1/gpu-types/?team=vision")
        assert bad.status_code == 400
        assert "team" in bad.json()["error"]["fields"]
    else:
        assert types["p100"]["quota"]["queued"] == 1
    if who == "admin":
        assert client.get("/api/v1/gpu-types/").status_code == 400  # in no team: say which


@pytest.mark.parametrize("who", ["owner", "outsider", "admin"])
def test_image_catalog(world, who):
    CatalogImage.objects.create(reference="docker.io/old:1", title="Old", enabled=False)
    response = world.client(who).get("/api/v1/images/")
    assert response.status_code == 200
    assert [i["title"] for i in response.json()] == ["PyTorch"]


def test_image_catalog_says_which_images_need_root_and_whether_allowed(world):
    CatalogImage.objects.create(reference="docker.io/lab/apt:1", title="Apt", needs_root=True)
    CatalogImage.objects.create(reference="docker.io/lab/ok:1", title="Blessed", needs_root=True, root_allowed=True)
    images = {i["title"]: i for i in world.client("owner").get("/api/v1/images/").json()}
    assert {t: (i["needs_root"], i["root_allowed"]) for t, i in images.items()} == {
        "Apt": (True, False),
        "Blessed": (True, True),
        "PyTorch": (False, False),
    }


def _ran(world, owner, gpu_type, gpus: int, hours: float, day_offset: int = 1, lost_hours: float = 0.0) -> None:
    start = timezone.now().replace(hour=8, minute=0, second=0, microsecond=0) - timedelta(days=day_offset)
    Workload.objects.create(
        team=world.team, owner=owner, name="ran", kind="batch", image="docker.io/x:1", gpu_type=gpu_type,
        gpu_count=gpus, time_limit_seconds=86400, state=State.SUCCEEDED, created_at=start, started_at=start,
        finished_at=start + timedelta(hours=hours), lost_gpu_seconds=lost_hours * 3600,
    )  # fmt: skip


@pytest.mark.parametrize("who", ["owner", "teammate", "manager", "outsider", "admin"])
def test_usage(world, who):
    _ran(world, world.owner, world.p100, 2, 3)  # 6 GPU-hours, weight 1
    _ran(world, world.teammate, world.k80, 4, 1, day_offset=2)  # 4 GPU-hours, weight 0.5
    start = (timezone.localdate() - timedelta(days=5)).isoformat()
    client = world.client(who)
    team = "" if who != "admin" else "&team=vision"
    response = client.get(f"/api/v1/usage/?start={start}&group_by=gpu_type{team}")
    assert response.status_code == 200
    body = response.json()
    if who == "outsider":
        assert body["team"] == "language"
        assert body["rows"] == []
        return
    # jobs.policy: a manager (and a superuser) sees every member's GPU-hours; a member only their own.
    expected = {
        "owner": {"p100": (6.0, 6.0)},
        "teammate": {"k80": (4.0, 2.0)},
    }.get(who, {"p100": (6.0, 6.0), "k80": (4.0, 2.0)})
    assert {r["key"]: (r["gpu_hours"], r["weighted_gpu_hours"]) for r in body["rows"]} == expected
    assert body["total_weighted_gpu_hours"] == sum(weighted for _, weighted in expected.values())
    by_user = client.get(f"/api/v1/usage/?start={start}&group_by=user{team}").json()
    everyone = {"olivia": 6.0, "tom": 4.0}
    expected_users = {"owner": {"olivia": 6.0}, "teammate": {"tom": 4.0}}.get(who, everyone)
    assert {r["key"]: r["gpu_hours"] for r in by_user["rows"]} == expected_users
    by_day = client.get(f"/api/v1/usage/?start={start}{team}").json()
    assert len(by_day["rows"]) == len(expected)
    only_tom = client.get(f"/api/v1/usage/?start={start}&user=tom{team}")
    if who == "owner":
        assert only_tom.status_code == 403  # another member's figures are the manager's to see
    else:
        assert only_tom.json()["total_gpu_hours"] == 4.0


def test_usage_as_csv(world):
    _ran(world, world.owner, world.p100, 2, 3, lost_hours=1.5)  # of its 6 GPU-hours, 1.5 thrown away by stops
    start = (timezone.localdate() - timedelta(days=5)).isoformat()
    client = world.client("manager")
    for response in (
        client.get(f"/api/v1/usage/?start={start}&group_by=gpu_type&format=csv"),
        client.get(f"/api/v1/usage/?start={start}&group_by=gpu_type", HTTP_ACCEPT="text/csv"),
    ):
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/csv")
        assert "attachment" in response["Content-Disposition"]
        rows = list(csv.reader(io.StringIO(response.content.decode())))
        assert rows == [
            [
                "gpu_type",
                "gpu_hours",
                "weighted_gpu_hours",
                "borrowed_gpu_hours",
                "gpu_equivalent_hours",
                "lost_gpu_hours",
            ],
            ["p100", "6.000000", "6.000000", "0.000000", "6.000000", "1.500000"],
        ]
    bad = client.get("/api/v1/usage/?start=nope&format=csv")
    assert bad.status_code == 400
    assert bad["Content-Type"] == "application/json"


def test_usage_parameters(world):
    client = world.client("owner")
    assert client.get("/api/v1/usage/?start=2026-02-10&end=2026-02-01").status_code == 400
    assert client.get("/api/v1/usage/?start=2020-01-01&end=2026-01-01").status_code == 400
    assert client.get("/api/v1/usage/?group_by=team").status_code == 400
    for url, formats in [("/api/v1/usage/?format=xml", "json, csv"), ("/api/v1/workloads/?format=csv", "json")]:
        unknown_format = client.get(url)  # the address exists: a 400 naming `format`, not "Not found."
        assert unknown_format.status_code == 400, url
        assert unknown_format.json()["error"]["fields"] == {"format": [f"One of: {formats}."]}


def test_a_mig_slice_type_says_what_it_is_and_counts_its_share_of_a_gpu(world, client):
    from jobs.models import GpuType

    GpuType.objects.create(
        slug="a100-1g",
        display_name="A100 1g.10gb",
        node_label_value="a100-mig",
        resource_name="nvidia.com/mig-1g.10gb",
        kind="mig",
        share_parts=1,
        share_of=7,
        physical_gpu="A100",
        device_memory_mib=10240,
    )
    types = {t["slug"]: t for t in world.client("owner").get("/api/v1/gpu-types/").json()}
    mig = types["a100-1g"]
    assert mig["described"] == "1/7 of an A100, 10 GB"
    assert mig["gpu_share"] == pytest.approx(1 / 7)
    assert mig["max_per_container"] == 1


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
def test_usage_to_the_calendars_last_day_is_a_400_naming_end(world, client, zone, settings):
    # A report's range runs to the midnight after its last day: after 9999-12-31 there is none, and the
    # report was a 500 (OverflowError) in the API, the usage page and the admin report alike.
    settings.TIME_ZONE = zone
    query = "start=9999-12-31&end=9999-12-31"
    api = world.client("owner").get(f"/api/v1/usage/?{query}")
    assert api.status_code == 400, api.content
    assert api.json()["error"]["fields"] == {"end": ["A day before 9999-12-31."]}
    client.force_login(world.admin)
    report = client.get(f"/admin/jobs/workload/usage-report/?{query}")
    assert report.status_code == 200
    assert report.context["form"].errors == {"end": ["A day before 9999-12-31."]}
    client.force_login(world.owner)
    page = client.get(f"/usage/?{query}")
    assert page.status_code == 400  # the page's answer to a range it cannot show
    assert page.context["form"].errors == {"end": ["A day before 9999-12-31."]}


@pytest.mark.parametrize("who", ["manager", "owner"])
@pytest.mark.parametrize("typed", ["olivai", "oscar"])
def test_usage_of_a_user_who_is_nobody_in_the_team_is_a_400_naming_user(world, who, typed):
    # A typo (or someone of another team) answered 200 with no rows: "olivai used nothing" to a script.
    # Both say the same, so the answer tells nobody whether a username exists elsewhere.
    _ran(world, world.owner, world.p100, 2, 3)
    response = world.client(who).get(f"/api/v1/usage/?user={typed}")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["fields"] == {"user": [f"No one in vision has the username '{typed}'."]}


def test_usage_of_a_former_member_still_counts_their_hours(world):
    _ran(world, world.teammate, world.p100, 1, 2)
    world.teammate.memberships.filter(team=world.team).delete()
    start = (timezone.localdate() - timedelta(days=5)).isoformat()
    response = world.client("manager").get(f"/api/v1/usage/?start={start}&user=tom")
    assert response.status_code == 200, response.content
    assert response.json()["total_gpu_hours"] == 2.0
