"""The team namespace's ResourceQuota caps CPU and memory, not only GPUs, against the real API server.

The caps come from the team's quotas (plus borrowing in a cohort) times each GPU type's most CPU and memory
per GPU, so every pod the portal admits fits and a larger one is refused by Kubernetes itself, whoever
creates it. A quota change, and a change to a GPU type's sizes, reach the namespace through the
provisioner (the engine's provision-queue worker), as in production.
"""

from __future__ import annotations

import time
import uuid
from decimal import Decimal
from typing import Any

import pytest
from django.db import transaction
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from devtools.engine import provision_now
from jobs.kube import objects
from jobs.models import Cohort, Quota
from jobs.services.provisioning import team_namespace_caps
from jobs.services.queue.settings_changes import quota_change_record
from tests.engine.factories import GpuTypeFactory, TeamFactory

pytestmark = pytest.mark.cluster


def pod(namespace: str, gpu_type: Any, *, gpus: int, cpu_millicores: int, memory_mib: int) -> dict:
    """A pod exactly as the portal renders a workload's (so only its size can be refused)."""
    uid = uuid.uuid4().hex[:16]
    spec = objects.WorkloadSpec(
        uid=uid, name="sized", kind="batch", team_slug="t", username="ann", namespace=namespace,
        image="docker.io/library/python:3.12", time_limit_seconds=600, gpu_count=gpus,
        gpu_type=objects.GpuTypeSpec(
            gpu_type.slug, gpu_type.node_label_key, gpu_type.node_label_value, gpu_type.resource_name,
            gpu_type.cpu_per_gpu_millicores, gpu_type.memory_per_gpu_mib,
        ),
        cpu_millicores=cpu_millicores, memory_mib=memory_mib,
    )  # fmt: skip
    template = objects.make_pod_template(spec)
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"sized-{uid}", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }  # fmt: skip


def hard(kube_api: Any, namespace: str) -> dict[str, Decimal]:
    quota = k8s.CoreV1Api(kube_api).read_namespaced_resource_quota(objects.QUOTA_NAME, namespace)
    return {key: parse_quantity(value) for key, value in quota.spec.hard.items()}


def test_a_pod_over_the_teams_cpu_or_memory_is_refused_by_the_api_server(portal_account, kube_api, db):
    suffix = uuid.uuid4().hex[:6]
    # No node carries this label: the pods stay Pending and take nothing from the cluster's GPUs.
    gpu_type = GpuTypeFactory(
        slug=f"nq-{suffix}", cpu_per_gpu_millicores=1000, max_cpu_per_gpu_millicores=2000, memory_per_gpu_mib=1024
    )
    team = TeamFactory(slug=f"nq-{suffix}", cohort=Cohort.objects.create(name=f"nq-{suffix}"))
    Quota.objects.create(team=team, gpu_type=gpu_type, max_gpus=1, borrowing_limit=1)
    caps = team_namespace_caps(team)
    # Two GPUs (quota 1 + borrowing 1) times the most a pod may ask per GPU: 2 x 2000m CPU, 2 x 1024 MiB.
    assert (caps.cpu_millicores, caps.memory_mib) == (4000, 2048)
    namespace = provision_now(portal_account, team)
    core = k8s.CoreV1Api(kube_api)
    try:
        assert hard(kube_api, namespace) == {
            "requests.nvidia.com/gpu": Decimal(2),
            "requests.cpu": Decimal(4),
            "requests.memory": Decimal(2048 * 2**20),
            "limits.memory": Decimal(2048 * 2**20),
        }
        # Over the CPU cap: refused by the API server's quota admission, whoever asks.
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod(
                namespace, pod(namespace, gpu_type, gpus=1, cpu_millicores=4500, memory_mib=1024)
            )
        assert refused.value.status == 403
        assert "exceeded quota" in refused.value.body
        assert "requests.cpu" in refused.value.body
        # Over the memory cap likewise.
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod(
                namespace, pod(namespace, gpu_type, gpus=1, cpu_millicores=1000, memory_mib=3000)
            )
        assert refused.value.status == 403
        assert "requests.memory" in refused.value.body
        # The largest pod the portal would admit fits; then nothing more does.
        core.create_namespaced_pod(namespace, pod(namespace, gpu_type, gpus=2, cpu_millicores=4000, memory_mib=2048))
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod(namespace, pod(namespace, gpu_type, gpus=0, cpu_millicores=100, memory_mib=64))
        assert refused.value.status == 403
    finally:
        core.delete_namespace(namespace, propagation_policy="Background")


def wait_for_cpu(kube_api: Any, namespace: str, cores: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (found := hard(kube_api, namespace).get("requests.cpu")) != Decimal(cores):
        assert time.monotonic() < deadline, f"requests.cpu is {found}, not {cores}, after {timeout:.0f}s"
        time.sleep(0.5)


@pytest.mark.celery
def test_quota_and_gpu_type_changes_reach_the_namespace_through_the_provisioner(engine, kube_api, admin_client):
    team, k2 = engine.team, engine.gpu_types["k2"]
    namespace = provision_now(engine.identity, team)
    # p100 4 x 4 cores + k2 8 x 2 cores + v100 8 x 6 cores (the demo types' sizes).
    wait_for_cpu(kube_api, namespace, 80)
    with transaction.atomic():
        Quota.objects.filter(team=team, gpu_type=k2).update(max_gpus=2)
        quota_change_record(team=team, gpu_type=k2, old=8, new=2, by=None)
    wait_for_cpu(kube_api, namespace, 80 - 6 * 2)
    # An admin lets k2 pods ask up to 3 cores per GPU: the cap follows (2 k2 GPUs x 3 cores).
    form = {
        "slug": k2.slug, "display_name": k2.display_name, "node_label_key": k2.node_label_key,
        "node_label_value": k2.node_label_value, "resource_name": k2.resource_name,
        "cpu_per_gpu_millicores": str(k2.cpu_per_gpu_millicores), "max_cpu_per_gpu_millicores": "3000",
        "memory_per_gpu_mib": str(k2.memory_per_gpu_mib), "billing_weight": str(k2.billing_weight),
        "ephemeral_storage_request_mib": str(k2.ephemeral_storage_request_mib),
        "ephemeral_storage_limit_mib": str(k2.ephemeral_storage_limit_mib), "min_runtime_seconds": "0", "enabled": "on",
        "kind": k2.kind, "share_parts": str(k2.share_parts), "share_of": str(k2.share_of),
        "reserve_deeper_after_seconds": str(k2.reserve_deeper_after_seconds),
    }  # fmt: skip
    assert admin_client.post(f"/admin/jobs/gputype/{k2.pk}/change/", form).status_code == 302
    wait_for_cpu(kube_api, namespace, 16 + 2 * 3 + 48)
