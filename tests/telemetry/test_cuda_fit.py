"""CUDA fit fed by the agents: the CUDA driver version a node's agent reports decides which catalog images
its GPU type may run. Tested through jobs.services.submission.intake.workload_submit, the service the launch form and
the REST API both call (their own tests of this refusal belong with them once they land on main)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from jobs.models import CatalogImage, GpuNode
from jobs.services.submission.intake import workload_submit
from jobs.services.validation import SubmissionInvalid
from telemetry.services.ingest import report_ingest
from tests.engine.factories import GpuTypeFactory, QuotaFactory
from tests.telemetry.helpers import make_report

pytestmark = pytest.mark.django_db


@pytest.fixture
def catalog(people):
    k2 = GpuTypeFactory(slug="k2", display_name="GRID K2")
    QuotaFactory(team=people.team, gpu_type=k2, max_gpus=8)
    GpuNode.objects.create(
        name="gpu-k2-1", gpu_type=k2, gpus_capacity=8, gpus_allocatable=8, ready=True, last_seen_at=timezone.now()
    )
    GpuNode.objects.filter(name="gpu-p100-1").update(cuda_driver_version="")
    image = CatalogImage.objects.create(
        reference="nvcr.io/nvidia/pytorch:24.01-py3", title="PyTorch 24.01", cuda_version="12.2"
    )
    return image


def submit(people, gpu_type: str, image: CatalogImage):
    return workload_submit(
        team=people.team, owner=people.owner, spec={"catalog_image": image.id, "gpu_type": gpu_type, "gpu_count": 1}
    )


def test_an_image_needing_a_newer_cuda_than_the_agents_report_is_refused_naming_both(people, catalog):
    report_ingest(report=make_report("gpu-k2-1", cuda="11.4", gpus=8, model="GRID K2"))
    report_ingest(report=make_report("gpu-p100-1", cuda="12.2"))

    with pytest.raises(SubmissionInvalid) as refused:
        submit(people, "k2", catalog)

    message = " ".join(refused.value.errors["image"])
    assert "needs CUDA 12.2" in message
    assert "GRID K2 drivers support up to CUDA 11.4" in message
    assert "It runs on: Tesla P100." in message
    # The same image on a type whose agents report a new enough driver is accepted.
    assert submit(people, "p100", catalog).gpu_type.slug == "p100"


def test_a_driver_upgrade_reported_by_the_agent_lifts_the_refusal(people, catalog):
    report_ingest(report=make_report("gpu-k2-1", cuda="11.4", gpus=8, model="GRID K2"))
    with pytest.raises(SubmissionInvalid):
        submit(people, "k2", catalog)
    later = make_report("gpu-k2-1", cuda="12.4", gpus=8, model="GRID K2")
    report_ingest(report=later)
    assert submit(people, "k2", catalog).state == "QUEUED"


def test_the_inventory_sync_does_not_erase_the_agents_cuda_version(people, catalog):
    report_ingest(report=make_report("gpu-k2-1", cuda="11.4", gpus=8, model="GRID K2"))
    # What jobs.services.cluster.inventory.inventory_sync does for a node without GFD labels.
    GpuNode.objects.update_or_create(name="gpu-k2-1", defaults={"cuda_driver_version": "", "ready": True})
    assert GpuNode.objects.get(name="gpu-k2-1").cuda_driver_version == "11.4"
    with pytest.raises(SubmissionInvalid):
        submit(people, "k2", catalog)
