"""Real nodes in the session's cluster, for tests of real work through the portal (issue 35, item 4).

- `real_nodes` (module): two real nodes (kubelet + containerd + runc + CNI, GPUs from our device plugin;
  localcluster/realnode.py) joined to the session's local cluster for one module (about 25 s), with the
  python, jupyterlab and tensorboard images imported. They carry gputype=real-p100 / real-k2, which no simulated pool
  uses, so the rest of the suite's workloads never land on them. Skipped (with the reason) where the machine
  cannot run them or the cluster is an external one; stopped and their Node objects deleted when the module
  ends, so tests after it (node counts, inventory, telemetry) see only the simulated nodes.
- `real_engine` (function): the `engine` fixture plus the real nodes' GPU types (images.catalog_seed), a
  quota of 4 on each for the test's team, and the inventory read again.
- `api_as(user)` and `submit_real(api, **spec)`: the REST API as a person, and a batch job submitted through
  it on one real-p100 GPU in the local python image (201, or the test fails with the answer).
- `real_borrower` (function): `real_engine`'s team and a second team in one cohort, 2 real-p100 GPUs each,
  the second free to borrow the first's 2; returns that second team's member, who borrows.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest


def api_as(user: Any) -> Any:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user)
    return client


def submit_real(api: Any, **spec: Any) -> Any:
    from jobs.models import Workload
    from localcluster.images import IMAGES

    body = {"gpu_type": "real-p100", "gpu_count": 1, "image": IMAGES["python"], **spec}
    response = api.post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 201, response.content
    return Workload.objects.get(uid=response.json()["uid"])


REAL_IMAGES = ("sandbox", "python", "jupyterlab", "tensorboard")


@pytest.fixture(scope="module")
def real_nodes(
    kube_cluster: Any, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """`REAL_NODE_COUNT` in the test module asks for more nodes: a third is a second real-p100 (a gang job
    needs two nodes of one type). `REAL_NODE_IMAGES` names fewer images (sandbox and python suffice for
    batch jobs) where the module needs no service image: fewer to build after a change, fewer to import."""
    from localcluster import images

    if getattr(kube_cluster, "real", None) is not None:  # GPUPORTAL_REAL_NODES: the session cluster has them
        for spec in kube_cluster.real.specs:
            for name in REAL_IMAGES[2:]:
                kube_cluster.real.import_image(spec, images.ensure([name])[name])
        kube_cluster.real.wait_until_listed()  # the portal refuses images its nodes do not list
        yield kube_cluster.real
        return
    count = getattr(request.module, "REAL_NODE_COUNT", 2)
    names = tuple(getattr(request.module, "REAL_NODE_IMAGES", REAL_IMAGES))
    yield from _module_real_nodes(kube_cluster, tmp_path_factory, names, specs=None, count=count)


@pytest.fixture(scope="module")
def sliced_nodes(kube_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two real nodes whose one GPU each is shared (issue 40): real-a100-1 offers seven MIG 1g.10gb slices,
    real-t4-1 a T4 time-sliced four ways (localcluster/sliced_nodes.py); for one module, as `real_nodes`."""
    from localcluster.sliced_nodes import SLICED_NODES

    yield from _module_real_nodes(kube_cluster, tmp_path_factory, REAL_IMAGES[:2], specs=list(SLICED_NODES))


def _module_real_nodes(
    kube_cluster: Any,
    tmp_path_factory: pytest.TempPathFactory,
    image_names: tuple[str, ...],
    specs: Any,
    count: int = 2,
) -> Iterator[Any]:
    from localcluster import images
    from localcluster.procs import ClusterError
    from localcluster.realnode import RealNodes, check_host

    if not hasattr(kube_cluster, "pki"):
        pytest.skip("LOCALCLUSTER_KUBECONFIG names an external cluster; real nodes join only our own")
    try:
        check_host()
    except ClusterError as exc:
        pytest.skip(f"this machine cannot run real nodes: {exc}")

    def log(line: str) -> None:
        print(f"[real nodes] {line}", file=sys.stderr, flush=True)

    try:
        paths = images.ensure(list(image_names), progress=log)
    except images.ImageBuildError as exc:
        pytest.fail(f"the real nodes' images could not be built: {exc}", pytrace=False)
    nodes = RealNodes(
        tmp_path_factory.mktemp("real"),
        pki=kube_cluster.pki,
        server=kube_cluster.server,
        token=kube_cluster.admin_token,
        count=count,
        specs=specs,
        sandbox_image=images.IMAGES["sandbox"],
        images=[paths[n] for n in image_names],
        log=log,
    )
    try:
        nodes.prepare()
        nodes.start(time.monotonic() + 300)
    except ClusterError as exc:
        nodes.stop()
        pytest.fail(f"the real nodes did not start:\n{exc}", pytrace=False)
    try:
        yield nodes
    finally:
        nodes.stop()
        for name in nodes.names:  # no NotReady ghosts in the session's cluster
            with contextlib.suppress(Exception):
                nodes._api("DELETE", f"/api/v1/nodes/{name}", None)


@pytest.fixture
def real_engine(engine: Any, real_nodes: Any) -> Any:
    from jobs.models import GpuType, Quota
    from jobs.services.cluster.inventory import inventory_sync
    from jobs.services.seeding import apply_seed
    from localcluster.images import catalog_seed

    apply_seed(catalog_seed(quota_team=engine.team.slug))
    inventory_sync()
    engine.gpu_types = {t.slug: t for t in GpuType.objects.all()}
    assert Quota.objects.filter(team=engine.team, gpu_type__slug="real-p100").exists()
    engine.real_nodes = real_nodes
    return engine


@pytest.fixture
def real_borrower(real_engine: Any) -> Any:
    from jobs.models import Cohort, GpuType, Quota, Team
    from tests.engine.factories import MembershipFactory, TeamFactory, UserFactory

    lender = real_engine.team
    cohort = Cohort.objects.create(name=f"cohort-{lender.slug}")
    Team.objects.filter(id=lender.id).update(cohort=cohort)
    p100 = GpuType.objects.get(slug="real-p100")
    Quota.objects.filter(team=lender, gpu_type=p100).update(max_gpus=2)
    borrower = TeamFactory(slug=f"b-{lender.slug}", cohort=cohort)
    Quota.objects.create(team=borrower, gpu_type=p100, max_gpus=2, borrowing_limit=2)
    return MembershipFactory(team=borrower, user=UserFactory(username=f"bob-{lender.slug}")).user


@pytest.fixture
def sliced_engine(engine: Any, sliced_nodes: Any) -> Any:
    """The `engine` fixture plus the sliced nodes' GPU types, a quota of 7 devices on each for the test's
    team, the local python image in the catalog, and the inventory read again."""
    from jobs.models import GpuType
    from jobs.services.cluster.inventory import inventory_sync
    from jobs.services.seeding import apply_seed
    from localcluster.images import catalog_seed
    from localcluster.sliced_nodes import sliced_seed

    apply_seed(catalog_seed())
    apply_seed(sliced_seed(quota_team=engine.team.slug))
    inventory_sync()
    engine.gpu_types = {t.slug: t for t in GpuType.objects.all()}
    engine.real_nodes = sliced_nodes
    return engine


@pytest.fixture
def pods_reach_portal(real_engine: Any, live_server: Any, settings: Any) -> Iterator[str]:
    """The portal's API where the real nodes' pods reach it, as `make run` gives it (devtools/run.py): this
    process's live server (the test's database) relayed from the nodes' bridge gateway (localcluster/hostrelay.py),
    the gateway an allowed Host, and the engine's processes started again with PORTAL_POD_API_URL naming it,
    so every batch pod gets GPUPORTAL_API_URL; afterwards they start again without it."""
    from urllib.parse import urlsplit

    from localcluster.hostrelay import HostRelays

    gateway = real_engine.real_nodes.network.gateway
    target = urlsplit(live_server.url)
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, gateway]
    with HostRelays(gateway) as relays:
        url = f"http://{gateway}:{relays.tcp((str(target.hostname), int(target.port or 80)))}"
        _restart_engine(real_engine.processes, {"PORTAL_POD_API_URL": url})
        try:
            yield url
        finally:
            _restart_engine(real_engine.processes, {"PORTAL_POD_API_URL": None})


def _restart_engine(processes: Any, env: dict[str, str | None]) -> None:
    """Stop the engine's processes that read the setting, change their environment, start them again."""
    for name, value in env.items():
        if value is None:
            processes.env.pop(name, None)
        else:
            processes.env[name] = value
    for name in ("tracker", "beat", "worker"):
        processes.stop(name)
    for name in ("worker", "beat", "tracker"):
        processes.start(name)
