"""Gang jobs through the REST API, the launch page and Clone: `nodes` beside the GPU count (then GPUs per
node), the whole gang counted against the quota, bad values refused naming the field with nothing stored.

The API world: P100s on two nodes of 4 GPUs (one GPU of the second in use), the team's P100 quota 4."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from jobs.models import State, Workload
from jobs.services.queue.admission import quota_admit
from tests.api.conftest import batch_spec

URL = "/api/v1/workloads/"


def _errors(response) -> dict[str, list[str]]:
    assert response.status_code == 400, response.content
    return response.json()["error"]["fields"]


def test_a_gang_is_one_workload_holding_nodes_times_gpus(world, submit):
    body = submit(nodes=2, gpu_count=2)
    assert (body["nodes"], body["gpu_count"], body["gpus_total"]) == (2, 2, 4)
    stored = Workload.objects.get(uid=body["uid"])
    assert (stored.nodes, stored.gpus_per_node, stored.gpu_count) == (2, 2, 4)
    assert stored.events.first().message.endswith("2 nodes × 2 Tesla P100 = 4 GPUs.")
    # Admitted, the gang holds the team's whole quota of 4: the next job, even of 1 GPU, waits.
    single = submit(gpu_count=1)
    _admit(world)
    stored.refresh_from_db()
    assert stored.state in State.holding()
    assert Workload.objects.get(uid=single["uid"]).state == State.QUEUED


def test_a_gang_that_does_not_fit_the_quota_waits_whole_not_in_part(world, submit):
    first = submit(gpu_count=1)
    _admit(world)  # 1 of 4 held
    body = submit(nodes=2, gpu_count=2)  # needs 4 at once: never 3 now and 1 later
    _admit(world)
    assert Workload.objects.get(uid=first["uid"]).state in State.holding()
    assert Workload.objects.get(uid=body["uid"]).state == State.QUEUED


def _admit(world) -> None:
    quota_admit(team_id=world.team.id, gpu_type_id=world.gpu_types["p100"].id)


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"nodes": 3}, "nodes", "The cluster has 2 ready Tesla P100 node(s)."),
        ({"nodes": 2, "gpu_count": 3}, "nodes", "2 nodes × 3 Tesla P100 = 6 GPUs, above your team's quota of 4."),
        ({"nodes": 0}, "nodes", "at least 1"),
        ({"nodes": "two"}, "nodes", "integer"),
        ({"nodes": 2, "kind": "service", "port": 8888}, "nodes", "Only a batch job can span several nodes."),
        ({"nodes": 2, "command": []}, "command", "needs a command"),
        ({"nodes": 2, "topology": "sideways"}, "topology", ""),
        # A topology on one node was dropped silently: the submitter meant several nodes and forgot them.
        ({"topology": "required"}, "topology", "Only a job on several nodes can keep them together"),
        ({"nodes": 1, "topology": "preferred"}, "topology", "ask for 2 nodes or more"),
    ],
)
def test_bad_gang_values_name_the_field_and_store_nothing(world, overrides, field, words):
    response = world.client("owner").post(URL, batch_spec(**overrides), format="json")
    errors = _errors(response)
    assert field in errors, errors
    assert words.lower() in " ".join(errors[field]).lower(), errors
    assert not Workload.objects.exists()


def test_a_sweep_of_gangs(world):
    body = {"workloads": [batch_spec(name=f"g-{i}", nodes=2, gpu_count=1) for i in range(2)]}
    response = world.client("owner").post(f"{URL}batch/", body, format="json")
    assert response.status_code == 201, response.content
    assert [w["nodes"] for w in response.json()["workloads"]] == [2, 2]
    assert sorted(Workload.objects.values_list("gpu_count", flat=True)) == [2, 2]


def test_logs_and_events_take_a_rank_within_the_gang(world, submit):
    body = submit(nodes=2, gpu_count=1)
    for what in ("logs", "events"):
        errors = _errors(world.client("owner").get(f"{URL}{body['uid']}/{what}/", {"rank": 2}))
        assert errors == {"rank": ["A whole number from 0 to 1."]}
    # An outsider learns nothing about it, rank or not.
    assert world.client("outsider").get(f"{URL}{body['uid']}/logs/", {"rank": 0}).status_code == 404


def _page_client(world) -> Client:
    client = Client()
    client.force_login(world.owner)
    return client


def test_the_launch_outlook_shows_the_gang_and_clone_keeps_it(world, submit):
    client = _page_client(world)
    form = {"kind": "batch", "catalog_image": "", "image": "docker.io/library/python:3.12", "gpu_type": "p100",
            "gpu_count": "2", "nodes": "2", "command": "python train.py", "time_limit": "1",
            "time_limit_unit": "hours", "env_name": [], "env_value": []}  # fmt: skip
    outlook = client.post(reverse("launch_outlook"), form).content.decode()
    assert "2 nodes × 2 Tesla P100 = 4 GPUs:" in outlook
    assert "fits now" in outlook
    assert "within 5 min" in outlook
    held = submit(gpu_count=1)
    _admit(world)  # 3 of the quota's 4 left: the gang of 4 waits, whole
    outlook = client.post(reverse("launch_outlook"), form).content.decode()
    assert "4 GPUs: waits." in outlook
    Workload.objects.filter(uid=held["uid"]).delete()

    body = submit(nodes=2, gpu_count=2, topology="preferred")
    page = client.get(reverse("launch"), {"clone": body["uid"]}).content.decode()
    assert 'name="nodes" value="2"' in page
    assert 'name="gpu_count" value="2"' in page
    detail = client.get(reverse("workload_detail", args=[body["uid"]])).content.decode()
    assert "2 nodes × 2 Tesla P100 = 4 GPUs" in detail
    assert 'id="logs-rank"' in detail


def test_the_detail_page_lists_each_rank_with_its_node_exit_code_and_gpu_hours(world, submit):
    from datetime import timedelta

    from django.utils import timezone

    from jobs.models import GangRank

    body = submit(nodes=2, gpu_count=2)
    gang = Workload.objects.get(uid=body["uid"])
    start = timezone.now() - timedelta(hours=1)
    GangRank.objects.create(workload=gang, rank=0, phase=State.SUCCEEDED, node_name="gpu-p100-1", exit_code=0,
                            started_at=start, finished_at=start + timedelta(minutes=30))  # fmt: skip
    GangRank.objects.create(workload=gang, rank=1, phase=State.FAILED, reason="ExitCode", node_name="gpu-p100-2",
                            exit_code=1, started_at=start, finished_at=start + timedelta(minutes=15))  # fmt: skip
    page = _page_client(world).get(reverse("workload_detail", args=[gang.uid])).content.decode()
    table = page[page.index('id="ranks"') :]
    assert 'data-label="Node" class="mono">gpu-p100-2</td>' in table
    assert 'Failed <span class="muted">(ExitCode)</span>' in table
    assert '<td data-label="GPU-hours">1.000</td>' in table  # 2 GPUs x 30 min
    assert '<td data-label="GPU-hours">0.500</td>' in table  # 2 GPUs x 15 min
    assert "all ranks running within 5 min, or every rank is stopped" in page  # the start window, shown
