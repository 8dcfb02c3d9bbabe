"""On a GPU type whose nodes pull no images (gpuportal.io/pulls-images=false: the local cluster's real nodes,
an air-gapped site), a submission of an image none of them has is refused at once, naming the field `image`
and the images that would run there, instead of waiting in ImagePullBackOff until its time limit. Nodes that
pull (every ordinary site) are never judged. Pure: no database, except where the inventory and the intake's
facts are read."""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.models import GpuNode
from jobs.services.cluster.inventory import PULLS_IMAGES, _gpu_node_fields
from jobs.services.submission import intake_facts
from jobs.services.validation import (
    CatalogFacts,
    GpuTypeFacts,
    SubmissionInvalid,
    canonical_image,
    validate_submission,
)
from tests.engine.factories import GpuTypeFactory
from tests.engine.test_validation import facts

PYTHON = "localhost/gpuportal/python:0123456789abcdef"
JUPYTER = "localhost/gpuportal/jupyterlab:fedcba9876543210"
PAUSE = "localhost/gpuportal/pause:00000000aaaaaaaa"
DIGEST = "sha256:" + "ab" * 32
ON_NODES = frozenset(
    {PYTHON, JUPYTER, PAUSE, f"localhost/gpuportal/python@{DIGEST}", "docker.io/library/busybox:latest"}
)
LOCAL_CATALOG = {
    11: CatalogFacts(11, PYTHON, "batch", True, None, ("python",), title="Python 3 (local)"),
    12: CatalogFacts(12, JUPYTER, "service", True, None, (), (), 8888, title="JupyterLab (local)"),
    13: CatalogFacts(13, "nvcr.io/nvidia/pytorch:24.01-py3", "any", True, None, title="PyTorch"),
}


def real_facts(**gpu_overrides):
    real = GpuTypeFacts(
        "real-p100", "P100 (real node)", True, quota=4, largest_node=4, max_cuda=None, local_images=ON_NODES
    )
    real = GpuTypeFacts(**{**real.__dict__, **gpu_overrides})
    base = facts()
    return facts(
        gpu_types={**base.gpu_types, "real-p100": real},
        catalog={**base.catalog, **LOCAL_CATALOG},
        allowed_registries=frozenset({"docker.io", "nvcr.io", "localhost"}),
    )


def image_errors(spec, the_facts=None):
    try:
        validate_submission({"gpu_type": "real-p100", "gpu_count": 1, **spec}, the_facts or real_facts())
    except SubmissionInvalid as refusal:
        return refusal.errors
    return {}


@pytest.mark.parametrize(
    ("reference", "canonical"),
    [
        ("python:3.12", "docker.io/library/python:3.12"),
        ("python", "docker.io/library/python:latest"),
        ("team/model:1", "docker.io/team/model:1"),
        ("docker.io/library/python:3.12", "docker.io/library/python:3.12"),
        (PYTHON, PYTHON),
        (f"localhost/gpuportal/python:x@{DIGEST}", f"localhost/gpuportal/python@{DIGEST}"),
        ("NOT A REFERENCE", None),
    ],
)
def test_references_are_compared_as_the_kubelet_lists_them(reference, canonical):
    assert canonical_image(reference) == canonical


def test_an_image_the_nodes_lack_is_refused_naming_the_images_that_run_there():
    errors = image_errors({"image": "python:3.12", "command": ["python", "-c", "print(1)"]})
    assert list(errors) == ["image"]
    (message,) = errors["image"]
    assert message.startswith(
        "The P100 (real node) nodes pull no images (they reach no registry), and none of them has python:3.12."
    )
    # The catalog's entries for a batch job that are on the nodes; not the service's, the sandbox or PyTorch.
    assert message.endswith(f"Images that run there: Python 3 (local) ({PYTHON}).")


def test_a_service_is_told_the_service_images():
    errors = image_errors({"kind": "service", "image": "jupyter/base-notebook:1", "port": 8888})
    assert errors["image"][0].endswith(f"Images that run there: JupyterLab (local) ({JUPYTER}).")


def test_a_catalog_entry_the_nodes_lack_is_refused_too():
    assert "none of them has nvcr.io/nvidia/pytorch:24.01-py3" in image_errors({"catalog_image": 13})["image"][0]


@pytest.mark.parametrize(
    "spec",
    [
        {"catalog_image": 11},
        {"image": PYTHON},
        {"image": f"localhost/gpuportal/python:any@{DIGEST}"},  # by digest: the tag does not matter
        {"catalog_image": 12, "kind": "service"},
    ],
)
def test_an_image_on_the_nodes_is_accepted(spec):
    assert image_errors(spec) == {}


def test_latest_is_refused_even_when_present_since_the_kubelet_pulls_it_anyway():
    message = image_errors({"image": "busybox"})["image"][0]
    assert "busybox would be pulled: the kubelet always pulls an untagged or :latest image" in message


def test_without_catalog_entries_the_nodes_tagged_images_are_named():
    the_facts = real_facts()
    no_catalog = facts(gpu_types=the_facts.gpu_types, catalog={}, allowed_registries=the_facts.allowed_registries)
    message = image_errors({"image": "python:3.12"}, no_catalog)["image"][0]
    assert message.endswith(f"Images that run there: docker.io/library/busybox:latest, {JUPYTER}, {PAUSE}, {PYTHON}.")


@pytest.mark.parametrize(
    "spec",
    [
        {"image": "python:3.12", "gpu_type": "p100"},  # nodes that pull: never judged
    ],
)
def test_nodes_that_pull_are_never_judged(spec):
    validate_submission({"gpu_count": 1, **spec}, real_facts())


@pytest.mark.parametrize(
    "gpu_overrides",
    [
        {"local_images": None},  # a node of the type pulls, or nothing is known
        {"enabled": False},  # the type is refused for that already
        {"quota": None},
    ],
)
def test_no_image_refusal_where_nothing_is_known_or_the_type_is_wrong(gpu_overrides):
    assert "image" not in image_errors({"image": "python:3.12"}, real_facts(**gpu_overrides))


def _node(labels, images):
    return {
        "metadata": {"name": "real-p100-1", "labels": {"gputype": "real-p100", **labels}},
        "status": {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "4"}, "images": images},
        "spec": {},
    }


KUBELET_IMAGES = [
    {"names": [f"localhost/gpuportal/python@{DIGEST}", PYTHON], "sizeBytes": 70_000_000},
    {"names": [PAUSE], "sizeBytes": 800_000},
]


def test_the_inventory_keeps_the_images_of_a_node_that_pulls_none():
    fields = _gpu_node_fields(_node({PULLS_IMAGES: "false"}, KUBELET_IMAGES), {"nvidia.com/gpu"}, [])
    assert fields["pulls_images"] is False
    assert fields["images"] == sorted([f"localhost/gpuportal/python@{DIGEST}", PYTHON, PAUSE])


def test_the_inventory_keeps_no_images_of_a_node_that_pulls():
    fields = _gpu_node_fields(_node({}, KUBELET_IMAGES), {"nvidia.com/gpu"}, [])
    assert (fields["pulls_images"], fields["images"]) == (True, [])


@pytest.mark.django_db
def test_a_type_is_judged_only_when_none_of_its_nodes_pulls():
    real, mixed, plain = (GpuTypeFactory(slug=s, display_name=s) for s in ("real-p100", "mixed", "p100"))
    now = timezone.now()

    def node(name, gpu_type, *, pulls, images=()):
        GpuNode.objects.create(
            name=name, gpu_type=gpu_type, gpus_capacity=4, gpus_allocatable=4, ready=True, last_seen_at=now,
            pulls_images=pulls, images=list(images),
        )  # fmt: skip

    node("real-p100-1", real, pulls=False, images=[PYTHON, PAUSE])
    node("real-p100-2", real, pulls=False, images=[JUPYTER])
    node("mixed-1", mixed, pulls=False, images=[PYTHON])
    node("mixed-2", mixed, pulls=True)
    node("p100-1", plain, pulls=True)
    site = intake_facts.read_site_facts()
    assert site.gpu_types["real-p100"].local_images == frozenset({PYTHON, PAUSE, JUPYTER})  # any node's
    assert site.gpu_types["mixed"].local_images is None  # a pod may land where it can pull
    assert site.gpu_types["p100"].local_images is None
