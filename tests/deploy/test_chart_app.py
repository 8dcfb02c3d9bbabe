"""What the chart hands the portal, fed to the portal itself: its settings and its seed command."""

from __future__ import annotations

import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command

from jobs.models import AllowedRegistry, CatalogImage, GpuType, Quota, Team
from tests.deploy.helm import CHART_DIR, CI_VALUES, REPO_ROOT, find, load_values, render

VALUE_SETS = [pytest.param(None, id="default-values")] + [pytest.param(p, id=p.stem) for p in CI_VALUES]


@pytest.mark.parametrize("values_file", VALUE_SETS)
def test_settings_load_from_the_environment_the_chart_sets(values_file: Path | None, tmp_path: Path) -> None:
    manifests = render(load_values(values_file) if values_file else {})
    [config] = [m.obj for m in manifests if m.kind == "ConfigMap" and m.name.endswith("-config")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PORTAL_", "KUBE"))}
    env.update(config["data"])
    # What the Secrets would add; a database URL of the shape the chart builds.
    env["SECRET_KEY"] = "a-secret-key-of-the-length-the-chart-demands-0123456789"
    env["DATABASE_URL"] = "postgres://gpuportal:p%40ss@gp-gpuportal-postgresql:5432/gpuportal"
    env.setdefault("REDIS_URL", "redis://:pw@redis.example.internal:6379/1")
    env["PORTAL_VAR_DIR"] = str(tmp_path)
    script = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        "print(json.dumps([s.DEBUG, s.ALLOWED_HOSTS, s.KUBE_WORKLOADS_CLUSTERROLE, s.KUBE_SERVICE_ACCOUNT, "
        "s.SESSION_COOKIE_SECURE, s.DATABASES['default']['ENGINE']]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    debug, hosts, role, account, secure, engine = yaml.safe_load(result.stdout)
    assert debug is False
    assert hosts == config["data"]["ALLOWED_HOSTS"].split(",")
    assert role == config["data"]["KUBE_WORKLOADS_CLUSTERROLE"]
    assert account.count("/") == 1
    assert secure is True
    assert engine == "portal.postgresql"  # Django's, with a health check that asks the socket


@pytest.mark.django_db
def test_the_seed_file_the_chart_renders_is_loaded_by_manage_py_seed(tmp_path: Path) -> None:
    values = load_values(CHART_DIR / "ci" / "full.yaml")
    seed_yaml = find(render(values), "ConfigMap", "portal-seed")["data"]["seed.yaml"]
    seed_file = tmp_path / "seed.yaml"
    seed_file.write_text(seed_yaml)

    call_command("seed", "--file", str(seed_file))
    call_command("seed", "--file", str(seed_file))  # the hook runs on every upgrade: idempotent

    assert sorted(GpuType.objects.values_list("slug", flat=True)) == ["k2", "p100"]
    k2 = GpuType.objects.get(slug="k2")
    assert k2.cpu_per_gpu_millicores == 2500
    assert k2.billing_weight == Decimal("0.25")
    assert sorted(Team.objects.values_list("slug", flat=True)) == ["nlp", "vision"]
    assert Quota.objects.count() == 3
    assert Quota.objects.get(team__slug="vision", gpu_type__slug="k2").max_gpus == 8
    assert CatalogImage.objects.count() == 2
    assert sorted(AllowedRegistry.objects.values_list("host", flat=True)) == [
        "docker.io",
        "nvcr.io",
        "registry.example.org",
    ]
