"""A service is told the path the portal serves it under: GPUPORTAL_BASE_URL, and its catalog template."""

from __future__ import annotations

import pytest

from jobs.models import CatalogImage, Kind, State, Workload
from jobs.services.cluster.object_creation import spec_for
from tests.engine.factories import GpuTypeFactory, MembershipFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def make(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    membership = MembershipFactory()
    gpu_type = GpuTypeFactory()

    def _make(kind: str = Kind.SERVICE, catalog: CatalogImage | None = None, env=()) -> Workload:
        return Workload.objects.create(
            team=membership.team, owner=membership.user, name="nb", kind=kind, image="docker.io/x:1",
            catalog_image=catalog, gpu_type=gpu_type, gpu_count=1, port=8888 if kind == Kind.SERVICE else None,
            args=["--verbose"], env=list(env), time_limit_seconds=3600, state=State.QUEUED,
        )  # fmt: skip

    return _make


def test_custom_image_service_gets_gpuportal_base_url(make):
    workload = make()
    spec = spec_for(workload)
    assert ("GPUPORTAL_BASE_URL", f"/w/{workload.uid}/") in spec.env
    assert spec.args == ("--verbose",)


def test_catalog_templates_fill_in_the_prefix(make):
    jupyter = CatalogImage.objects.create(
        reference="jupyter/x:1", title="Jupyter",
        base_url_args=["--ServerApp.base_url={base_url}", "--IdentityProvider.token=", "--path_prefix={base_path}"],
        base_url_env={"DIGITS_URL_PREFIX": "{base_path}", "LITERAL": '{"json": {base_url}}'},
    )  # fmt: skip
    workload = make(catalog=jupyter)
    spec = spec_for(workload)
    prefix = f"/w/{workload.uid}"
    assert spec.args == (
        "--verbose",
        f"--ServerApp.base_url={prefix}/",
        "--IdentityProvider.token=",
        f"--path_prefix={prefix}",
    )
    assert ("DIGITS_URL_PREFIX", prefix) in spec.env
    assert ("LITERAL", f'{{"json": {prefix}/}}') in spec.env


def test_the_researchers_own_variable_wins(make):
    workload = make(env=[{"name": "GPUPORTAL_BASE_URL", "value": "/mine/"}])
    names = [name for name, _ in spec_for(workload).env]
    assert names.count("GPUPORTAL_BASE_URL") == 1
    assert ("GPUPORTAL_BASE_URL", "/mine/") in spec_for(workload).env


def test_batch_jobs_get_nothing(make):
    spec = spec_for(make(kind=Kind.BATCH))
    assert not any(name == "GPUPORTAL_BASE_URL" for name, _ in spec.env)


def _home_mounts(workload: Workload) -> list[dict]:
    username = workload.owner.get_username()
    return [
        {"kind": "home", "mount_path": f"/home/{username}", "claim": "home-x", "read_only": False},
        {"kind": "team", "mount_path": "/team", "claim": "team", "read_only": False},
    ]


@pytest.mark.parametrize("image", ["jupyterlab", "devenv"])
def test_local_jupyterlab_opens_in_the_owners_home_workspace_where_their_files_last(make, image):
    """Open lands where the person's files are kept (the home workspace), not in /home, whose other folders
    are the image's own and go with the container: a notebook made where Open lands must outlive the pod."""
    from jobs.kube.objects import make_container
    from jobs.services.seeding import apply_seed
    from localcluster.images import IMAGES, catalog_seed

    apply_seed(catalog_seed())
    entry = CatalogImage.objects.get(reference=IMAGES[image])
    workload = make(catalog=entry)
    workload.command, workload.args = list(entry.default_command), []  # as the launch form sends them
    workload.mounts = _home_mounts(workload)
    container = make_container(spec_for(workload))

    words = [*container.get("command", []), *container.get("args", [])]
    home = f"/home/{workload.owner.get_username()}"
    assert [w for w in words if "root_dir" in w] == [f"--ServerApp.root_dir={home}"]
    assert f"--ServerApp.base_url=/w/{workload.uid}/" in words

    # Without workspaces (no StorageClass) there is no home to land in: no root_dir at all, so JupyterLab
    # starts where the container does, rather than failing on a folder that is not there.
    workload.mounts = []
    words = [*make_container(spec_for(workload)).get("args", [])]
    assert not [w for w in words if "root_dir" in w or "{home}" in w]


def test_a_home_template_is_filled_with_the_owners_home_workspace(make):
    entry = CatalogImage.objects.create(
        reference="jupyter/y:1", title="Jupyter",
        base_url_args=["--ServerApp.base_url={base_url}", "--notebook-dir={home}"],
        base_url_env={"WORKDIR": "{home}/work"},
    )  # fmt: skip
    workload = make(catalog=entry)
    workload.mounts = _home_mounts(workload)
    home = f"/home/{workload.owner.get_username()}"
    spec = spec_for(workload)
    assert spec.args == ("--verbose", f"--ServerApp.base_url=/w/{workload.uid}/", f"--notebook-dir={home}")
    assert ("WORKDIR", f"{home}/work") in spec.env
    workload.mounts = []
    spec = spec_for(workload)
    assert spec.args == ("--verbose", f"--ServerApp.base_url=/w/{workload.uid}/")
    assert not [name for name, _ in spec.env if name == "WORKDIR"]
