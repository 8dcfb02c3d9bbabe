"""The node simulator's rules, seen through the real API server: timestamps, exit codes, OOM kills, image
pull failures, services that run until deleted, deletion, and logs proxied from the simulated kubelet."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster.helpers import pod_manifest, slice_addresses, wait_for

pytestmark = pytest.mark.cluster


def _phase(core: client.CoreV1Api, ns: str, name: str, *phases: str) -> client.V1Pod | None:
    pod = core.read_namespaced_pod(name, ns)
    return pod if pod.status.phase in phases else None


def test_run_seconds_annotation_gives_real_start_and_finish_times(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    created = dt.datetime.now(dt.UTC).replace(microsecond=0)
    core.create_namespaced_pod(
        kube_namespace, pod_manifest("timed", gpus=1, annotations={"sim.gpuportal.dev/run-seconds": "3"})
    )
    pod = wait_for(lambda: _phase(core, kube_namespace, "timed", "Succeeded"), what="Succeeded")
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0
    assert terminated.reason == "Completed"
    # metav1.Time has whole seconds: 3 s apart, give or take the rounding of each end.
    assert 2 <= (terminated.finished_at - terminated.started_at).total_seconds() <= 4
    assert terminated.started_at >= created - dt.timedelta(seconds=1)
    assert pod.status.pod_ip
    assert pod.status.host_ip == "127.0.0.1"


def test_env_var_rules_apply_when_no_annotation_is_set(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(
        kube_namespace, pod_manifest("envrules", env={"SIM_RUN_SECONDS": "1", "SIM_EXIT_CODE": "5"})
    )
    pod = wait_for(lambda: _phase(core, kube_namespace, "envrules", "Failed"), what="Failed")
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (5, "Error")


def test_annotation_wins_over_env_var(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    manifest = pod_manifest(
        "both",
        annotations={"sim.gpuportal.dev/run-seconds": "1", "sim.gpuportal.dev/exit-code": "0"},
        env={"SIM_EXIT_CODE": "9", "SIM_RUN_SECONDS": "600"},
    )
    core.create_namespaced_pod(kube_namespace, manifest)
    pod = wait_for(lambda: _phase(core, kube_namespace, "both", "Succeeded", "Failed"), what="an end")
    assert pod.status.phase == "Succeeded"


def test_oomkilled_outcome(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(
        kube_namespace, pod_manifest("oom", env={"SIM_OUTCOME": "OOMKilled", "SIM_RUN_SECONDS": "1"})
    )
    pod = wait_for(lambda: _phase(core, kube_namespace, "oom", "Failed"), what="Failed")
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (137, "OOMKilled")


def test_failing_image_never_starts_and_reports_pull_errors(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(kube_namespace, pod_manifest("badimage", image="registry.invalid/team/app:1"))
    seen: set[str] = set()

    def backoff():
        pod = core.read_namespaced_pod("badimage", kube_namespace)
        waiting = pod.status.container_statuses and pod.status.container_statuses[0].state.waiting
        if waiting:
            seen.add(waiting.reason)
        return waiting if waiting and waiting.reason == "ImagePullBackOff" else None

    waiting = wait_for(backoff, what="ImagePullBackOff")
    assert "registry.invalid/team/app:1" in waiting.message
    pod = core.read_namespaced_pod("badimage", kube_namespace)
    assert pod.status.phase == "Pending"
    assert seen <= {"ContainerCreating", "ErrImagePull", "ImagePullBackOff"}

    def events():
        items = core.list_namespaced_event(kube_namespace, field_selector="involvedObject.name=badimage").items
        return {e.reason: e for e in items if e.source.component == "kubelet"} or None

    reasons = wait_for(lambda: (found := events()) and "BackOff" in found and found, what="kubelet events")
    assert reasons["Failed"].type == "Warning"
    assert "registry.invalid/team/app:1" in reasons["Failed"].message


def test_active_deadline_fails_the_pod_like_the_kubelet(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    manifest = pod_manifest("slow", annotations={"sim.gpuportal.dev/run-seconds": "60"})
    manifest["spec"]["activeDeadlineSeconds"] = 2
    core.create_namespaced_pod(kube_namespace, manifest)
    pod = wait_for(lambda: _phase(core, kube_namespace, "slow", "Failed"), what="Failed")
    assert pod.status.reason == "DeadlineExceeded"
    assert pod.status.container_statuses[0].state.terminated.exit_code == 137


def test_service_pod_runs_until_deleted_and_is_removed_promptly(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(kube_namespace, pod_manifest("web", restart_policy="Always", labels={"app": "web"}))
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8888}]},
    }
    core.create_namespaced_service(kube_namespace, service)
    pod = wait_for(lambda: _phase(core, kube_namespace, "web", "Running"), what="Running")

    def endpoints():
        return [ip for ip, _ in slice_addresses(kube_api, kube_namespace, "web")]

    assert wait_for(endpoints, what="the service's EndpointSlice") == [pod.status.pod_ip]
    time.sleep(2)
    assert _phase(core, kube_namespace, "web", "Running")

    started = time.monotonic()
    core.delete_namespaced_pod("web", kube_namespace)

    def gone():
        try:
            core.read_namespaced_pod("web", kube_namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=10, what="the pod to be removed")
    assert time.monotonic() - started < 5


def test_logs_through_the_api_server_with_tail_timestamps_and_follow(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(
        kube_namespace, pod_manifest("talk", gpus=2, annotations={"sim.gpuportal.dev/run-seconds": "3"})
    )
    wait_for(lambda: _phase(core, kube_namespace, "talk", "Running"), what="Running")

    # follow=true streams until the container ends.
    stream = core.read_namespaced_pod_log("talk", kube_namespace, follow=True, _preload_content=False)
    followed = stream.data.decode() if hasattr(stream, "data") else b"".join(stream.stream()).decode()
    lines = followed.strip().splitlines()
    assert lines[0].startswith("[simulated] container main started on node")
    assert "with 2 GPU(s)" in lines[0]
    assert any("running: 1s elapsed" in line for line in lines)
    assert lines[-1] == "[simulated] container exited with code 0 (Completed)"

    tail = core.read_namespaced_pod_log("talk", kube_namespace, tail_lines=1)
    assert tail.strip() == "[simulated] container exited with code 0 (Completed)"

    stamped = core.read_namespaced_pod_log("talk", kube_namespace, timestamps=True, tail_lines=2)
    for line in stamped.strip().splitlines():
        stamp = line.split(" ", 1)[0]
        assert dt.datetime.fromisoformat(stamp[:26] + "+00:00")


def test_logs_of_a_pod_that_never_started_say_why(kube_api, kube_namespace):
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(kube_namespace, pod_manifest("nopull", image="x.invalid/y:1"))
    wait_for(
        lambda: (
            (s := core.read_namespaced_pod("nopull", kube_namespace).status.container_statuses)
            and s[0].state.waiting.reason == "ImagePullBackOff"
        ),
        what="ImagePullBackOff",
    )
    with pytest.raises(ApiException) as refused:
        core.read_namespaced_pod_log("nopull", kube_namespace)
    assert refused.value.status == 400
    assert "waiting to start" in refused.value.body


def test_api_server_restart_keeps_port_and_state(kube_cluster, kube_api, kube_namespace):
    if not getattr(kube_cluster, "owns_processes", False):
        pytest.skip("an external cluster cannot be restarted from here")
    core = client.CoreV1Api(kube_api)
    core.create_namespaced_pod(kube_namespace, pod_manifest("before", restart_policy="Always"))
    wait_for(lambda: _phase(core, kube_namespace, "before", "Running"), what="Running")
    server = kube_cluster.server

    kube_cluster.stop_component("kube-apiserver")
    with pytest.raises(Exception):  # noqa: B017,PT011 - connection refused surfaces as urllib3's error
        core.read_namespaced_pod("before", kube_namespace, _request_timeout=2)
    kube_cluster.start_component("kube-apiserver")

    assert kube_cluster.server == server
    assert _phase(core, kube_namespace, "before", "Running")
    # The simulator's watch reconnected: a new pod still gets run.
    core.create_namespaced_pod(
        kube_namespace, pod_manifest("after", annotations={"sim.gpuportal.dev/run-seconds": "1"})
    )
    wait_for(lambda: _phase(core, kube_namespace, "after", "Succeeded"), timeout=30, what="Succeeded")


@pytest.mark.parametrize(("term", "grace", "low", "high"), [("forever", 3, 2.5, 6), ("1", 30, 0.5, 4)])
def test_sigterm_then_kill_at_the_grace_period(kube_api, kube_namespace, term, grace, low, high):
    """A process that ignores SIGTERM lives until its grace period ends; one that exits on it goes sooner."""
    core = client.CoreV1Api(kube_api)
    name = f"term-{grace}"
    annotations = {"sim.gpuportal.dev/run-seconds": "forever", "sim.gpuportal.dev/term-seconds": term}
    core.create_namespaced_pod(kube_namespace, pod_manifest(name, gpus=1, annotations=annotations))
    wait_for(lambda: _phase(core, kube_namespace, name, "Running"), what="Running")
    started = time.monotonic()
    core.delete_namespaced_pod(name, kube_namespace, grace_period_seconds=grace)

    def gone():
        try:
            core.read_namespaced_pod(name, kube_namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=high + 5, what="the pod to be removed")
    assert low <= time.monotonic() - started <= high
