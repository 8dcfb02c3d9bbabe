"""`make run` with the local cluster's real nodes (GPUPORTAL_LOCAL_IMAGES=1): the demo catalog gains entries
for the images built on this machine (localhost/gpuportal/...), and localhost becomes an allowed registry;
without it, the demo catalog is unchanged."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from jobs.models import AllowedRegistry, CatalogImage, GpuType, Quota
from localcluster.images import IMAGES

pytestmark = pytest.mark.django_db


def test_seed_demo_with_local_images_lists_them_in_the_catalog(monkeypatch):
    monkeypatch.setenv("GPUPORTAL_LOCAL_IMAGES", "1")
    call_command("seed_demo", stdout=io.StringIO())

    local = {c.reference: c for c in CatalogImage.objects.filter(reference__startswith="localhost/")}
    assert set(local) == {IMAGES["python"], IMAGES["jupyterlab"], IMAGES["tensorboard"]}
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


def test_seed_demo_without_it_keeps_the_catalog_off_localhost(monkeypatch):
    monkeypatch.delenv("GPUPORTAL_LOCAL_IMAGES", raising=False)
    call_command("seed_demo", stdout=io.StringIO())

    assert not CatalogImage.objects.filter(reference__startswith="localhost/").exists()
    assert not AllowedRegistry.objects.filter(host="localhost").exists()
    assert not GpuType.objects.filter(slug__startswith="real-").exists()
