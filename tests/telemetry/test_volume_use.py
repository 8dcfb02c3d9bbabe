"""Workspace use from agent reports: a reported volume maps to its workspace through the claim's bound
volume, only for the node where a workload mounts it; bad volume fields are a 400 naming the field."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from agent.report import MAX_VOLUMES, VolumeReading
from jobs.models import Workload, Workspace
from tests.telemetry.conftest import running_workload
from tests.telemetry.helpers import make_report, post

pytestmark = pytest.mark.django_db
GIB = 1024**3
NAMESPACE = "gp-lab"


def _mounts(username: str) -> list[dict]:
    return [
        {"kind": "home", "mount_path": f"/home/{username}", "claim": f"home-{username}", "read_only": False,
         "size_gib": 10, "storage_class": "fast"},
        {"kind": "team", "mount_path": "/team", "claim": "team", "read_only": False, "size_gib": 50,
         "storage_class": "fast"},
    ]  # fmt: skip


@pytest.fixture
def workspaces(people):
    home = Workspace.objects.create(
        team=people.team, owner=people.owner, namespace=NAMESPACE, claim_name="home-owner",
        mount_path="/home/owner", size_gib=10, storage_class="fast", volume_name="pvc-home-1",
    )  # fmt: skip
    team = Workspace.objects.create(
        team=people.team, namespace=NAMESPACE, claim_name="team", mount_path="/team", size_gib=50,
        storage_class="fast", volume_name="pvc-team-1",
    )  # fmt: skip
    return home, team


def _with_volumes(report, *volumes: VolumeReading):
    return dataclasses.replace(report, volumes=tuple(volumes))


def test_a_reported_volume_is_stored_on_the_workspace_it_is_bound_to(client, people, agent_token, workspaces):
    home, team = workspaces
    running_workload(people, namespace=NAMESPACE, mounts=_mounts("owner"))
    at = datetime.now(UTC)
    report = _with_volumes(
        make_report(at=at),
        VolumeReading("pvc-home-1", used_bytes=3 * GIB),
        VolumeReading("pvc-team-1", used_bytes=GIB, capacity_bytes=50 * GIB),
        VolumeReading("pvc-someone-elses", used_bytes=7),  # not a workspace: ignored
    )

    response = post(client, report, agent_token)

    assert response.status_code == 202, response.content
    assert response.json()["workspaces"] == 2
    home.refresh_from_db()
    team.refresh_from_db()
    assert (home.used_bytes, home.capacity_bytes, home.used_measured_on) == (3 * GIB, None, "gpu-p100-1")
    assert home.used_measured_at == at
    assert home.used_fraction == pytest.approx(0.3)
    assert (team.used_bytes, team.capacity_bytes) == (GIB, 50 * GIB)

    # An older reading (another node that mounts the shared space, late) does not overwrite a newer one.
    older = _with_volumes(make_report(at=at - timedelta(seconds=30)), VolumeReading("pvc-team-1", used_bytes=5))
    assert post(client, older, agent_token).json()["stored"] is False  # older than the node's last report
    team.refresh_from_db()
    assert team.used_bytes == GIB


def test_a_node_speaks_only_for_volumes_its_workloads_mount(client, people, agent_token, workspaces):
    home, _team = workspaces
    # The owner's workload runs on another node: this node's report may not set its home's use.
    elsewhere = running_workload(people, namespace=NAMESPACE, mounts=_mounts("owner"))
    Workload.objects.filter(id=elsewhere.id).update(node_name="gpu-p100-2")
    report = _with_volumes(make_report(), VolumeReading("pvc-home-1", used_bytes=9 * GIB))

    response = post(client, report, agent_token)

    assert response.status_code == 202, response.content
    assert response.json()["workspaces"] == 0
    home.refresh_from_db()
    assert home.used_bytes is None
    assert home.used_measured_at is None


def test_a_report_without_volumes_is_still_accepted_and_changes_no_workspace(client, people, agent_token, workspaces):
    running_workload(people, namespace=NAMESPACE, mounts=_mounts("owner"))
    body = make_report().to_dict()
    assert "volumes" not in body  # what older agents send

    response = post(client, body, agent_token)

    assert response.status_code == 202, response.content
    assert not Workspace.objects.filter(used_bytes__isnull=False).exists()


def _volume(**fields) -> dict:
    return {"name": "pvc-home-1", "used_bytes": 1, "capacity_bytes": None, **fields}


@pytest.mark.parametrize(
    ("volumes", "field"),
    [
        ("lots", "volumes"),
        ([_volume()] * 2, "volumes"),
        ([{"name": f"pvc-{i}", "used_bytes": 1} for i in range(MAX_VOLUMES + 1)], "volumes"),
        (["pvc-home-1"], "volumes[0]"),
        ([_volume(name="../../etc")], "volumes[0].name"),
        ([_volume(name="")], "volumes[0].name"),
        ([_volume(name="a" * 300)], "volumes[0].name"),
        ([_volume(name=None)], "volumes[0].name"),
        ([_volume(used_bytes=-1)], "volumes[0].used_bytes"),
        ([_volume(used_bytes=2**63)], "volumes[0].used_bytes"),
        ([_volume(used_bytes=True)], "volumes[0].used_bytes"),
        ([_volume(used_bytes=1.5)], "volumes[0].used_bytes"),
        ([_volume(used_bytes=None)], "volumes[0].used_bytes"),
        ([_volume(used_bytes=10, capacity_bytes=5)], "volumes[0].used_bytes"),
        ([_volume(capacity_bytes="big")], "volumes[0].capacity_bytes"),
    ],
)
def test_bad_volume_fields_are_refused_naming_the_field(client, people, agent_token, workspaces, volumes, field):
    body = {**make_report().to_dict(), "volumes": volumes}

    response = post(client, body, agent_token)

    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert list(error["fields"]) == [field], error
    assert not Workspace.objects.filter(used_bytes__isnull=False).exists()


def test_another_nodes_report_with_volumes_is_still_refused(client, people, agent_token, workspaces):
    assert post(client, make_report(), agent_token).status_code == 202  # the token is gpu-p100-1's
    elsewhere = running_workload(people, namespace=NAMESPACE, mounts=_mounts("owner"))
    Workload.objects.filter(id=elsewhere.id).update(node_name="gpu-p100-2")
    report = _with_volumes(make_report("gpu-p100-2"), VolumeReading("pvc-home-1", used_bytes=GIB))

    response = post(client, report, agent_token)

    assert response.status_code == 403
    assert not Workspace.objects.filter(used_bytes__isnull=False).exists()


def test_admin_lists_use_fullest_first_and_warns_at_ninety_percent(admin_client, people, workspaces):
    home, team = workspaces
    now = datetime.now(UTC)
    Workspace.objects.filter(id=home.id).update(used_bytes=int(9.5 * GIB), used_measured_at=now, used_measured_on="n1")
    Workspace.objects.filter(id=team.id).update(used_bytes=5 * GIB, used_measured_at=now)
    Workspace.objects.create(
        team=people.team, owner=people.teammate, namespace=NAMESPACE, claim_name="home-mate",
        mount_path="/home/mate", size_gib=10, storage_class="fast",
    )  # fmt: skip

    page = admin_client.get("/admin/jobs/workspace/", {"o": "-5"})

    assert page.status_code == 200
    text = page.content.decode()
    assert "1 workspace is at 90 % of its size or more" in text
    assert "\u26a0 9.5 GiB / 10.0 GiB (95 %)" in text
    assert "5.0 GiB / 50.0 GiB (10 %)" in text
    assert "not measured yet" in text
    assert "ago on n1" in text
    links = [f">{name}</a>" for name in ("home-owner", "team", "home-mate")]
    assert all(link in text for link in links)
    assert sorted(links, key=text.index) == links  # fullest first, not measured last

    full = admin_client.get("/admin/jobs/workspace/", {"use": "90"}).content.decode()
    assert ">home-owner</a>" in full
    assert ">home-mate</a>" not in full
    unmeasured = admin_client.get("/admin/jobs/workspace/", {"use": "none"}).content.decode()
    assert ">home-mate</a>" in unmeasured
    assert ">home-owner</a>" not in unmeasured


def test_the_workload_page_and_api_show_each_workspaces_use(client, people, workspaces):
    home, _team = workspaces
    measured_at = datetime.now(UTC) - timedelta(minutes=3)
    Workspace.objects.filter(id=home.id).update(used_bytes=3 * GIB, used_measured_at=measured_at)
    workload = running_workload(people, namespace=NAMESPACE, mounts=_mounts("owner"))
    client.force_login(people.owner)

    one = client.get(f"/api/v1/workloads/{workload.uid}/").json()
    many = client.get("/api/v1/workloads/").json()
    page = client.get(f"/workloads/{workload.uid}/")

    assert [(m["claim"], m["used_bytes"]) for m in one["mounts"]] == [("home-owner", 3 * GIB), ("team", None)]
    assert datetime.fromisoformat(one["mounts"][0]["used_measured_at"]) == measured_at
    assert one["mounts"][1]["used_measured_at"] is None
    assert [m["used_bytes"] for m in many["results"][0]["mounts"]] == [3 * GIB, None]
    assert page.status_code == 200
    text = page.content.decode()
    assert "3.0 GiB of 10 GiB used, measured" in text
    assert "50 GiB, use not measured yet" in text
