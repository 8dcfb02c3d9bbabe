"""The portal works with exactly the rules in helm/files/rbac-rules.yaml, and whatever the validator
accepts, the real API server accepts too."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from devtools.engine import provision_now
from jobs.kube import client as kube
from jobs.kube import objects
from jobs.services.storage.workspaces import volume_specs
from jobs.services.validation import (
    FIELDS,
    CatalogFacts,
    Facts,
    GpuTypeFacts,
    SubmissionInvalid,
    validate_submission,
)

pytestmark = pytest.mark.cluster


def _job(namespace: str) -> objects.WorkloadSpec:
    return objects.WorkloadSpec(
        uid=uuid.uuid4().hex[:10], name="probe", kind="batch", team_slug="x", username="u", namespace=namespace,
        image="ubuntu", gpu_type=objects.GpuTypeSpec("p100", "gputype", "p100", "nvidia.com/gpu", 1000, 1024),
        gpu_count=1, time_limit_seconds=60,
    )  # fmt: skip


@pytest.mark.django_db
def test_the_portal_account_writes_only_in_team_namespaces(portal_account, kube_namespace, kube_api):
    from tests.engine.factories import TeamFactory

    team = TeamFactory(slug=f"rbac-{uuid.uuid4().hex[:6]}")
    namespace = provision_now(portal_account, team)
    # In its own team namespace it may create a Job (the RoleBinding the provisioner made grants that)...
    kube.batch().create_namespaced_job(namespace, objects.make_job(_job(namespace)))
    # ...but not in a namespace it did not set up, nor read secrets anywhere.
    with pytest.raises(ApiException) as denied:
        kube.batch().create_namespaced_job(kube_namespace, objects.make_job(_job(kube_namespace)))
    assert denied.value.status == 403
    with pytest.raises(ApiException) as secrets:
        kube.core().list_namespaced_secret(namespace)
    assert secrets.value.status == 403
    with pytest.raises(ApiException) as nodes:
        kube.core().delete_node("gpu-p100-0")
    assert nodes.value.status == 403
    # And the namespace carries the quota backstop mirroring the team's quota (none yet: 0 GPUs, and so no
    # CPU or memory either).
    quota = kube.core().read_namespaced_resource_quota(objects.QUOTA_NAME, namespace)
    assert quota.spec.hard == {
        "requests.nvidia.com/gpu": "0", "requests.cpu": "0", "requests.memory": "0", "limits.memory": "0",
    }  # fmt: skip
    # Deleting namespaces is not among its rights either; the admin cleans up.
    with pytest.raises(ApiException) as delete:
        kube.core().delete_namespace(namespace)
    assert delete.value.status == 403
    k8s.CoreV1Api(kube_api).delete_namespace(namespace)


FACTS = Facts(
    gpu_types={
        "p100": GpuTypeFacts(
            "p100",
            "Tesla P100",
            True,
            quota=4,
            largest_node=4,
            max_cuda="12.2",
            max_cpu_per_gpu=16000,
            max_memory_per_gpu=65536,
        ),
        "k2": GpuTypeFacts(
            "k2", "GRID K2", True, quota=8, largest_node=8, max_cuda="11.4", cpu_per_gpu=2000, memory_per_gpu=8192
        ),
    },
    catalog={1: CatalogFacts(1, "jupyter/notebook:1", "service", True, None, (), (), 8888)},
    allowed_registries=frozenset({"docker.io", "nvcr.io"}),
    secrets={"wandb": "secret-team-wandb", "hf-token": "secret-u1234abcd-hf-token"},
    datasets={"pets": True, "imagenet": True, "private": False},
)
# What submit stores for workspaces and datasets (jobs.services.storage.workspaces), for the rendering.
WORKSPACES = [
    {"kind": "home", "mount_path": "/home/hypothesis", "claim": "home-hypothesis-1234abcd", "read_only": False},
    {"kind": "team", "mount_path": "/team", "claim": "team-shared", "read_only": False},
]
DATASET_SOURCES = {
    "pets": {"claim": "", "nfs_server": "10.0.0.5", "nfs_path": "/export/pets"},
    "imagenet": {"claim": "imagenet", "nfs_server": "", "nfs_path": ""},
}
GPU_TYPES = {
    "p100": objects.GpuTypeSpec("p100", "gputype", "p100", "nvidia.com/gpu", 4000, 16384),
    "k2": objects.GpuTypeSpec("k2", "gputype", "k2", "nvidia.com/gpu", 2000, 8192),
}
env_names = st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True), st.text(max_size=10))
raw_specs = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.none(), st.from_regex(r"[a-z][-a-z0-9]{0,45}", fullmatch=True), st.text(max_size=50)),
        "kind": st.sampled_from(["batch", "service", "cron", None]),
        "image": st.one_of(
            st.sampled_from(
                ["ubuntu", "nvcr.io/nvidia/pytorch:24.01-py3", "pytorch/pytorch:2.3.1", "quay.io/x/y", "BAD IMAGE"]
            ),
            st.text(max_size=30),
        ),
        "catalog_image": st.sampled_from([None, 1, 2, "1", "x"]),
        "gpu_type": st.sampled_from(["p100", "k2", "v100", "", None]),
        "gpu_count": st.one_of(st.integers(-2, 10), st.text(max_size=3)),
        "command": st.one_of(st.lists(st.text(max_size=40), max_size=4), st.text(max_size=10)),
        "args": st.lists(st.text(max_size=40), max_size=4),
        "env": st.dictionaries(env_names, st.text(max_size=60), max_size=4),
        "port": st.one_of(st.none(), st.integers(-5, 70000)),
        "time_limit_seconds": st.one_of(st.none(), st.integers(0, 10**7)),
        "priority": st.sampled_from([0, None, 5]),
    },
)


valid_names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,15}", fullmatch=True).filter(
    lambda n: not n.startswith("GPUPORTAL_") and n not in {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"}
)
no_nul = st.text(max_size=200).filter(lambda t: "\x00" not in t)
# Mostly valid specs with arbitrary text where users type free text: these must all reach the server.
plausible_specs = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["batch", "service"]),
        "image": st.sampled_from(
            ["ubuntu", "nvcr.io/nvidia/pytorch:24.01-py3", "pytorch/pytorch:2.3.1", "a/b_c.d-e:1.0"]
        ),
        "gpu_type": st.sampled_from(["p100", "k2"]),
        "gpu_count": st.integers(1, 4),
        "port": st.integers(1, 65535),
    },
    optional={
        "name": st.from_regex(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?", fullmatch=True),
        "command": st.lists(no_nul, max_size=4),
        "args": st.lists(no_nul, max_size=6),
        "env": st.dictionaries(valid_names, no_nul, max_size=5),
        "time_limit_seconds": st.integers(60, 7 * 86400),
        "secrets": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["wandb", "hf-token", "nope"])}, optional={"env": valid_names}
            ),
            max_size=2,
        ),
        "datasets": st.lists(st.sampled_from(["pets", "imagenet", "private"]), max_size=2),
        "cpu_millicores": st.integers(1000, 70000),
        "memory_mib": st.integers(1000, 300000),
    },
).map(lambda spec: {**spec, "port": spec["port"] if spec["kind"] == "service" else None})


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(raw=st.one_of(plausible_specs, raw_specs), as_root=st.booleans(), read_only_root=st.booleans())
def test_accepted_specs_pass_the_api_servers_dry_run_and_refusals_name_a_field(
    raw, as_root, read_only_root, kube_api, kube_namespace
):
    # as_root / read_only_root: what an admin-allowed root image and a read-only-root image render as.
    try:
        clean = validate_submission(raw, FACTS)
        event("accepted")
    except SubmissionInvalid as exc:
        event("refused")
        assert exc.errors  # noqa: PT017 - hypothesis explores both outcomes
        for field_name, messages in exc.errors.items():
            assert field_name in FIELDS or field_name == "team" or field_name in raw
            assert all(isinstance(m, str) and m for m in messages)
        return
    spec = objects.WorkloadSpec(
        uid=uuid.uuid4().hex[:10], name=clean.name, kind=clean.kind, team_slug="prop", username="hypothesis",
        namespace=kube_namespace, image=clean.image, gpu_type=GPU_TYPES[clean.gpu_type], gpu_count=clean.gpu_count,
        time_limit_seconds=clean.time_limit_seconds, command=clean.command, args=clean.args, env=clean.env,
        port=clean.port, cpu_millicores=clean.cpu_millicores, memory_mib=clean.memory_mib,
        secrets=tuple(objects.SecretRef(name, k8s_name, env) for name, k8s_name, env in clean.secrets),
        volumes=volume_specs(WORKSPACES + [
            {"kind": "dataset", "name": d, "mount_path": f"/datasets/{d}", "read_only": True, **DATASET_SOURCES[d]}
            for d in clean.datasets
        ]),
        run_as_root=as_root, read_only_root=read_only_root,
    )  # fmt: skip
    batch, apps, core = k8s.BatchV1Api(kube_api), k8s.AppsV1Api(kube_api), k8s.CoreV1Api(kube_api)
    for obj in objects.make_objects(spec):
        create = {
            "Job": batch.create_namespaced_job,
            "Deployment": apps.create_namespaced_deployment,
            "Service": core.create_namespaced_service,
        }[obj["kind"]]
        try:
            create(kube_namespace, obj, dry_run="All")
        except ApiException as exc:
            pytest.fail(f"the API server refused a {obj['kind']} for an accepted spec {raw!r}: {exc.body}")


@pytest.mark.django_db
def test_the_tracker_watch_streams_changes_as_the_portal_account(portal_account, kube_api):
    """One watch stream per kind: the tracker's watch must deliver events, not fall back to relisting."""
    import json

    from tests.engine.factories import TeamFactory

    team = TeamFactory(slug=f"watch-{uuid.uuid4().hex[:6]}")
    namespace = provision_now(portal_account, team)
    response = kube.stream_get(
        "/apis/batch/v1/jobs",
        {"watch": "true", "labelSelector": "app.kubernetes.io/managed-by=gpuportal", "timeoutSeconds": "10"},
        read_timeout=15,
    )
    spec = _job(namespace)
    import time

    # RBAC needs a moment to learn of the RoleBinding just made (the engine retries the same 403).
    deadline = time.monotonic() + 30
    while True:
        try:
            kube.batch().create_namespaced_job(namespace, objects.make_job(spec))
            break
        except ApiException as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    seen = b""
    for chunk in response.stream(4096, decode_content=False):
        seen += chunk
        if spec.uid.encode() in seen:
            break
    response.release_conn()
    events = [json.loads(line) for line in seen.splitlines() if line.strip()]
    assert any(e["object"]["metadata"]["name"] == spec.object_name for e in events)
    k8s.CoreV1Api(kube_api).delete_namespace(namespace)
