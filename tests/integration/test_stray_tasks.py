"""A task that reached the wrong worker harms nothing (issue 32): two portals that shared a broker ran each
other's tasks, and one portal's "delete workload 7" deleted the other's running workload 7. Tasks now name
workloads by uid, and a delete re-reads the workload and acts only if it has ended."""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s
from rest_framework.test import APIClient

from jobs.models import State, Workload

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]


def test_stray_delete_and_preempt_tasks_sent_by_hand_leave_a_running_service_running(engine, kube_api):
    from portal.celery import app

    service = engine.submit(kind="service", port=8888, gpu_type="k2", gpu_count=1)
    engine.wait_for(service, State.RUNNING)
    service = engine.wait_until(service, lambda w: bool(w.k8s_name), "its object names recorded", timeout=60)
    # What another portal's worker, or someone at a Celery shell, might send: by row id (as tasks did), by
    # uid, and a preemption's delete of the attempt it runs now.
    app.send_task("jobs.tasks.delete_objects", args=[service.id])
    app.send_task("jobs.tasks.delete_objects", args=[service.uid])
    app.send_task("jobs.tasks.preempt_objects", args=[service.uid, service.k8s_name])
    said = [
        f"names workload {service.id} not by uid",
        f"refused to delete the objects of workload {service.uid}",
        f"refused to delete {service.k8s_name} of workload {service.uid}",
    ]
    deadline = time.monotonic() + 30
    while not all(line in engine.processes.log("worker") for line in said):
        assert time.monotonic() < deadline, engine.processes.log("worker")[-3000:]
        time.sleep(0.5)
    assert "the request came from" in engine.processes.log("worker")
    time.sleep(3)  # the tracker would have seen a deletion by now
    apps = k8s.AppsV1Api(kube_api)
    assert apps.read_namespaced_deployment(service.k8s_name, service.namespace).metadata.deletion_timestamp is None
    k8s.CoreV1Api(kube_api).read_namespaced_service(service.k8s_name, service.namespace)
    # Its owner sees it running, through the API.
    client = APIClient()
    client.force_authenticate(engine.owner)
    answer = client.get(f"/api/v1/workloads/{service.uid}/")
    assert answer.status_code == 200
    assert answer.json()["state"] == "RUNNING"
    assert Workload.objects.get(id=service.id).state == State.RUNNING
