"""`make run` with the local cluster's real nodes (GPUPORTAL_LOCAL_IMAGES=1): devtools.run hands seed_demo the
catalog of the images built on this machine (localhost/gpuportal/...) and localhost becomes an allowed
registry; without it, the demo catalog is unchanged. The product command itself imports nothing of the
local cluster (tests/unit/test_product_boundaries.py)."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from devtools import run
from jobs.models import AllowedRegistry, CatalogImage, GpuType, Quota
from localcluster.images import IMAGES

pytestmark = pytest.mark.django_db


def test_seed_demo_with_local_images_lists_them_in_the_catalog(monkeypatch, tmp_path):
    monkeypatch.setattr(run, "VAR", tmp_path)
    call_command("seed_demo", *run.local_images_seed({"GPUPORTAL_LOCAL_IMAGES": "1"}), stdout=io.StringIO())

    local = {c.reference: c for c in CatalogImage.objects.filter(reference__startswith="localhost/")}
    assert set(local) == {IMAGES["python"], IMAGES["jupyterlab"], IMAGES["tensorboard"], IMAGES["devenv"]}
    jupyter = local[IMAGES["jupyterlab"]]
    assert (jupyter.suits, jupyter.default_port) == ("service", 8888)
    assert "--ServerApp.base_url={base_url}" in jupyter.base_url_args
    assert local[IMAGES["tensorboard"]].base_url_args == ["--path_prefix={base_path}"]
    assert AllowedRegistry.objects.filter(host="localhost").exists()
    # The real nodes' GPU types select them by their own label values, never a simulated pool's.
    real = {t.slug: t.node_label_value for t in GpuType.objects.filter(slug__startswith="real-")}
    assert real == {"real-p100": "real-p100", "real-k2": "real-k2"}
    assert GpuType.objects.get(slug="p100").node_label_value == "p100"
    quotas = Quota.objects.filter(team__slug="demo", gpu_type__slug__in=real)
    assert sorted(q.max_gpus for q in quotas) == [4, 4]


def test_seed_demo_without_it_keeps_the_catalog_off_localhost():
    assert run.local_images_seed({}) == []
    call_command("seed_demo", stdout=io.StringIO())

    assert not CatalogImage.objects.filter(reference__startswith="localhost/").exists()
    assert not AllowedRegistry.objects.filter(host="localhost").exists()
    assert not GpuType.objects.filter(slug__startswith="real-").exists()


def test_a_seed_document_that_cannot_be_read_is_named(tmp_path):
    broken = tmp_path / "seed.json"
    broken.write_text("{not json")
    with pytest.raises(CommandError, match=r"seed\.json"):
        call_command("seed_demo", "--seed", str(broken), stdout=io.StringIO())
