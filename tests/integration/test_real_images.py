"""The local cluster's real nodes reach no registry: only the images imported into their containerd run there.
Their real kubelets list those images in the Node's `.status.images`, localcluster labels the nodes
gpuportal.io/pulls-images=false, the portal's inventory reads both, and a submission of an image the nodes
lack (`python:3.12` from Docker Hub, the newcomer's first try) is refused at once with a 400 naming the
field `image` and the images that would run, instead of sitting in ImagePullBackOff. The nodes come from
tests/realnode_fixtures.py (one pair for the module, with the sandbox and python images only)."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from jobs.models import GpuNode, State, Workload
from jobs.services.cluster.inventory import inventory_sync
from localcluster import images
from localcluster.images import IMAGES
from localcluster.realnode import PULLS_IMAGES_LABEL
from tests.realnode_fixtures import api_as, submit_real

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]

REAL_NODE_IMAGES = ("sandbox", "python")


def test_the_real_kubelet_lists_its_images_and_the_inventory_keeps_them(real_engine, kube_api):
    node = k8s.CoreV1Api(kube_api).read_node("real-p100-1")
    assert node.metadata.labels[PULLS_IMAGES_LABEL] == "false"
    listed = {name for image in node.status.images or [] for name in image.names or []}
    assert {IMAGES["python"], IMAGES["sandbox"]} <= listed, listed
    stored = GpuNode.objects.get(name="real-p100-1")
    assert stored.pulls_images is False
    assert {IMAGES["python"], IMAGES["sandbox"]} <= set(stored.images)


def test_an_image_the_real_nodes_lack_is_refused_naming_the_local_ones(real_engine):
    api = api_as(real_engine.owner)
    before = Workload.objects.count()
    response = api.post(
        "/api/v1/workloads/",
        {"gpu_type": "real-p100", "gpu_count": 1, "image": "python:3.12", "command": ["python", "-c", "print(1)"]},
        format="json",
    )
    assert response.status_code == 400, response.content
    (message,) = response.json()["error"]["fields"]["image"]
    assert "The P100 (real node) nodes pull no images (they reach no registry)" in message
    assert "none of them has python:3.12" in message
    assert f"Python 3 (local) ({IMAGES['python']})" in message
    assert Workload.objects.count() == before


def test_the_local_image_is_taken_and_runs(real_engine):
    workload = submit_real(api_as(real_engine.owner), command=["python", "-c", "print('ran')"])
    real_engine.wait_for(workload, State.SUCCEEDED, State.FAILED, timeout=240)
    assert workload.state == State.SUCCEEDED, (workload.reason, workload.message)


def test_an_image_imported_later_is_taken_once_the_kubelet_lists_it(real_engine):
    api = api_as(real_engine.owner)
    body = {
        "gpu_type": "real-p100",
        "gpu_count": 1,
        "image": IMAGES["tensorboard"],
        "command": ["python", "-c", "pass"],
    }
    assert api.post("/api/v1/workloads/", body, format="json").status_code == 400  # not on the nodes yet
    path = images.ensure(["tensorboard"])["tensorboard"]
    for spec in real_engine.real_nodes.specs:
        real_engine.real_nodes.import_image(spec, path)
    real_engine.real_nodes.wait_until_listed()  # the kubelet refreshes its list every 30 s
    inventory_sync()  # as beat's inventory task does every minute
    workload = submit_real(
        api, image=IMAGES["tensorboard"], command=["python", "-c", "pass"]
    )  # the entry's default args follow
    real_engine.wait_for(workload, State.SUCCEEDED, State.FAILED, timeout=240)
    assert workload.state == State.SUCCEEDED, (workload.reason, workload.message)
