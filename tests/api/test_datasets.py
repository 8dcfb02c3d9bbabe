"""The datasets a team may use, listed (`GET /api/v1/datasets/`, `gpuportal datasets`): before, only the
error for a name that is not one of them listed them. Another team's datasets are never shown."""

from __future__ import annotations

import pytest

from jobs.models import Dataset

pytestmark = pytest.mark.django_db


@pytest.fixture
def datasets(world):
    imagenet = Dataset.objects.create(name="imagenet", description="ILSVRC 2012", claim_name="imagenet")
    coco = Dataset.objects.create(name="coco", nfs_server="nfs.lab", nfs_path="/export/coco")
    theirs = Dataset.objects.create(name="their-corpus", claim_name="corpus")
    retired = Dataset.objects.create(name="retired", claim_name="retired", enabled=False)
    for dataset in (imagenet, coco, retired):
        dataset.teams.add(world.team)
    theirs.teams.add(world.other_team)
    return world


def test_a_member_lists_the_datasets_the_team_may_use_and_no_other(datasets):
    response = datasets.client("owner").get("/api/v1/datasets/")
    assert response.status_code == 200, response.content
    assert response.json() == [
        {"name": "coco", "description": "", "mount_path": "/datasets/coco"},
        {"name": "imagenet", "description": "ILSVRC 2012", "mount_path": "/datasets/imagenet"},
    ]
    # The other team sees its own only; naming a team one is not in is refused as everywhere (400, `team`).
    assert [d["name"] for d in datasets.client("outsider").get("/api/v1/datasets/").json()] == ["their-corpus"]
    slug = datasets.other_team.slug
    refused = datasets.client("owner").get(f"/api/v1/datasets/?team={slug}")
    assert refused.status_code == 400
    assert "team" in refused.json()["error"]["fields"]
    assert "their-corpus" not in refused.content.decode()


def test_one_dataset_is_404_unless_the_team_may_use_it(datasets):
    owner = datasets.client("owner")
    assert owner.get("/api/v1/datasets/imagenet/").json() == {
        "name": "imagenet", "description": "ILSVRC 2012", "mount_path": "/datasets/imagenet"
    }  # fmt: skip
    for name in ("their-corpus", "retired", "nothing-here"):
        missing = owner.get(f"/api/v1/datasets/{name}/")
        assert missing.status_code == 404, name
        assert missing.json()["error"]["code"] == "not_found"
    assert datasets.client("outsider").get("/api/v1/datasets/imagenet/").status_code == 404
    assert owner.get("/api/v1/datasets/nul%00byte/").status_code == 400  # refused as every path with a NUL


def test_the_list_needs_credentials_and_is_in_the_schema(datasets, client):
    assert client.get("/api/v1/datasets/").status_code in (401, 403)
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert {"/api/v1/datasets/", "/api/v1/datasets/{name}/"} <= set(schema["paths"])
