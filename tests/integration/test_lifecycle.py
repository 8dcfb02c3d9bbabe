"""A workload's whole life through the real engine: PostgreSQL, Redis, a Celery worker, the tracker and
the local GPU cluster (real API server, scheduler and controllers; simulated kubelets)."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from jobs.models import State
from jobs.services.cancel import workload_cancel
from jobs.services.errors import WorkloadStateError
from jobs.services.logs.container_logs import workload_logs

pytestmark = [pytest.mark.cluster, pytest.mark.celery]


def test_batch_job_succeeds_and_accounts_its_gpu_seconds(engine):
    workload = engine.submit(gpu_count=2, env={"SIM_RUN_SECONDS": "3"})
    assert workload.state == State.SUBMITTING  # within the quota: admitted as it is stored
    engine.wait_for(workload, State.SUCCEEDED, timeout=60)
    assert workload.exit_code == 0
    assert workload.node_name.startswith("gpu-p100-")
    # Kubernetes' own container start and finish: 3 simulated seconds on 2 GPUs.
    assert workload.gpu_seconds() == pytest.approx(6.0, abs=0.2)
    states = [e.to_state for e in workload.events.order_by("at", "id")]
    assert states[:2] == [State.QUEUED, State.SUBMITTING]
    assert states[-1] == State.SUCCEEDED
    assert State.RUNNING in states


def test_exit_code_3_fails_with_the_code(engine):
    workload = engine.submit(env={"SIM_RUN_SECONDS": "1", "SIM_EXIT_CODE": "3"})
    engine.wait_for(workload, State.FAILED)
    assert (workload.reason, workload.exit_code) == ("ExitCode", 3)
    assert workload.message == "Exited with code 3."


def test_an_unpullable_image_waits_then_fails(engine):
    workload = engine.submit(image="registry.invalid/team/model:1")
    engine.wait_for(workload, State.PENDING)
    seen = engine.wait_for(workload, State.FAILED, timeout=60)
    timeline = list(seen.events.values_list("reason", flat=True))
    assert any(reason in ("ErrImagePull", "ImagePullBackOff") for reason in timeline), timeline
    assert seen.reason in ("ErrImagePull", "ImagePullBackOff")
    assert "Gave up after 4 s" in seen.message


def test_a_service_runs_until_cancelled(engine, kube_api):
    workload = engine.submit(kind="service", port=8888, gpu_type="k2", gpu_count=1)
    engine.wait_for(workload, State.RUNNING)
    # The tracker may see the Deployment's pod run before the worker has made the Service and recorded
    # the names (a Service create can take seconds on a loaded API server).
    engine.wait_until(workload, lambda w: bool(w.k8s_name), "its object names recorded", timeout=60)
    apps = k8s.AppsV1Api(kube_api)
    assert apps.read_namespaced_deployment(workload.k8s_name, workload.namespace).spec.strategy.type == "Recreate"
    service = k8s.CoreV1Api(kube_api).read_namespaced_service(workload.k8s_name, workload.namespace)
    assert service.spec.ports[0].port == 8888
    workload_cancel(workload=workload, by=engine.owner)
    workload.refresh_from_db()
    assert workload.state == State.CANCELLED
    assert workload.finished_at is not None
    # Its objects go away.
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        names = [d.metadata.name for d in apps.list_namespaced_deployment(workload.namespace).items]
        if workload.k8s_name not in names:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the cancelled service's Deployment was not deleted")
    with pytest.raises(WorkloadStateError):
        workload_cancel(workload=workload, by=engine.owner)


def test_time_limit_ends_a_job_as_deadline_exceeded(engine, kube_api):
    workload = engine.submit(env={"SIM_RUN_SECONDS": "600"}, time_limit_seconds=60)
    engine.wait_for(workload, State.RUNNING)
    # Shorten the Job's deadline (as the admin) to see a 60 s limit play out without waiting a minute.
    batch = k8s.BatchV1Api(kube_api)
    batch.patch_namespaced_job(workload.k8s_name, workload.namespace, {"spec": {"activeDeadlineSeconds": 2}})
    engine.wait_for(workload, State.FAILED, timeout=60)
    assert workload.reason == "DeadlineExceeded"


def test_logs_come_through_the_api_server(engine):
    workload = engine.submit(env={"SIM_RUN_SECONDS": "2"})
    engine.wait_for(workload, State.SUCCEEDED)
    text = workload_logs(workload, tail=50)
    assert workload.node_name in text
