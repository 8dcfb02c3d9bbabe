"""Real batch work through the portal (issue 35, item 4): a user submits through the REST API, the portal's
engine runs it on a real node (kubelet, containerd, runc) and records what the kernel and the kubelet
report: the process's own exit code with what the portal gave it (device ids from our device plugin, its
GPUPORTAL_* variables, its secret as a file, a dataset the kernel refuses writes to with EROFS), the failed
job's log still readable after the tracker's resyncs, a real image pull failure, SIGTERM and the grace
period at cancel and at preemption, and an OOM kill at the GPU type's memory limit. Nothing here is a
simulator rule; the nodes come from tests/realnode_fixtures.py (one pair for the module)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from django.conf import settings
from kubernetes import client as k8s

from jobs.models import Dataset, State, Workload
from jobs.services.logs.container_logs import follow_logs, workload_logs
from tests.cluster.helpers import wait_for
from tests.integration.test_secrets import store
from tests.realnode_fixtures import api_as, submit_real

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]

DATASET = "mnist-mini"

REPORT_AND_EXIT = f"""
import errno, os, sys
print("devices=" + os.environ.get("NVIDIA_VISIBLE_DEVICES", "<none>"))
for key in sorted(os.environ):
    if key.startswith("GPUPORTAL_"):
        print(key + "=" + os.environ[key])
print("uid=%d" % os.getuid())
print("secret file=" + open("/var/run/secrets/gpuportal/wandb").read())
print("dataset=" + open("/datasets/{DATASET}/README").read().strip())
try:
    open("/datasets/{DATASET}/mine.txt", "w")
    print("dataset write: allowed")
except OSError as exc:
    print("dataset write: " + errno.errorcode[exc.errno] + " " + exc.strerror)
sys.exit(3)
"""

HANDLE_SIGTERM = """
import signal, sys, time
def stop(signum, frame):
    print("handled SIGTERM, saving a checkpoint", flush=True)
    time.sleep(2)  # within the grace period: the portal's cancel gives 5 s, preemption 6 s here
    print("checkpoint saved, exiting cleanly", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("training", flush=True)
while True:
    time.sleep(0.2)
"""

EAT_MEMORY = """
chunks = []
while True:
    chunks.append(bytearray(64 * 1024 * 1024))  # touched: bytearray zero-fills its pages
"""


def _stage_dataset(kube_api, engine) -> None:
    """What an admin does before a team can pick a dataset: a claim in the team's namespace (the local
    cluster's hostPath class), its files put there from the host, and the Dataset row naming it."""
    core = k8s.CoreV1Api(kube_api)
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": DATASET},
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "gpuportal-local",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    core.create_namespaced_persistent_volume_claim(engine.team.namespace, claim)
    volume = wait_for(
        lambda: core.read_namespaced_persistent_volume_claim(DATASET, engine.team.namespace).spec.volume_name,
        timeout=60,
        what="the dataset's claim to be bound",
    )
    directory = Path(core.read_persistent_volume(volume).spec.host_path.path)
    directory.mkdir(parents=True, exist_ok=True)  # the provisioner's; DirectoryOrCreate would make it too
    (directory / "README").write_text("60000 handwritten digits\n")
    Dataset.objects.create(name=DATASET, claim_name=DATASET).teams.add(engine.team)


def test_a_batch_job_runs_on_a_real_node_sees_what_the_portal_gave_it_and_its_exit_code_is_recorded(
    real_engine, kube_api
):
    api = api_as(real_engine.owner)
    store(api, "wandb", "wandb-key-42")  # the first call for a new team: its namespace is made here
    _stage_dataset(kube_api, real_engine)
    workload = submit_real(
        api, command=["python", "-c", REPORT_AND_EXIT], secrets=[{"name": "wandb"}], datasets=[DATASET]
    )
    real_engine.wait_for(workload, State.FAILED, State.SUCCEEDED, timeout=240)

    assert workload.state == State.FAILED
    assert (workload.exit_code, workload.reason, workload.message) == (3, "ExitCode", "Exited with code 3.")
    assert workload.node_name == "real-p100-1"  # the only node labelled gputype=real-p100
    shown = api.get(f"/api/v1/workloads/{workload.uid}/").json()
    assert (shown["state"].lower(), shown["exit_code"]) == ("failed", 3), shown
    # The failed job's log stays readable after it ended: past two of the tracker's resyncs, whose reaper
    # once deleted the ended pod ("The container is gone"), read it as the user would, once.
    time.sleep(2 * settings.PORTAL_RESYNC_SECONDS + 5)
    log = workload_logs(workload)
    # The device plugin's Allocate answer, as the container sees it: one device id of the p100 node's.
    devices = next(line.split("=", 1)[1] for line in log.splitlines() if line.startswith("devices="))
    assert devices in real_engine.real_nodes.device_ids("real-p100-1"), log
    assert f"GPUPORTAL_WORKLOAD={workload.uid}" in log
    assert "uid=1000" in log  # the portal's non-root user, applied by runc
    assert "secret file=wandb-key-42" in log  # the kubelet wrote the Secret as a file
    assert "dataset=60000 handwritten digits" in log
    assert "dataset write: EROFS Read-only file system" in log  # the kernel's own refusal (a ro bind mount)


@pytest.fixture
def nodes_that_pull(real_engine, kube_api):
    """The real nodes labelled as nodes that pull (as at a site whose nodes reach a registry), so that the
    portal takes an image they lack; labelled back afterwards (tests/integration/test_real_images.py)."""
    from jobs.services.cluster.inventory import inventory_sync
    from localcluster.realnode import PULLS_IMAGES_LABEL

    core = k8s.CoreV1Api(kube_api)

    def label(value: str) -> None:
        for name in real_engine.real_nodes.names:
            core.patch_node(name, {"metadata": {"labels": {PULLS_IMAGES_LABEL: value}}})
        inventory_sync()

    label("true")
    try:
        yield real_engine
    finally:
        label("false")


def test_a_missing_image_is_a_real_pull_error_in_words(nodes_that_pull):
    real_engine = nodes_that_pull
    api = api_as(real_engine.owner)
    workload = submit_real(api, image="localhost/gpuportal/no-such-image:1", command=["python", "-c", "pass"])
    real_engine.wait_until(
        workload, lambda w: w.reason in ("ErrImagePull", "ImagePullBackOff"), "refused its image", timeout=120
    )
    assert workload.message.startswith("Cannot pull the image: "), workload.message
    assert "localhost/gpuportal/no-such-image:1" in workload.message
    # In words (nothing listens for a registry at localhost:443 here), not containerd's gRPC text.
    assert workload.message.endswith(
        ("its registry cannot be reached from the node.", "the node could not pull it and tries again shortly.")
    ), workload.message
    assert "rpc error" not in workload.message
    assert api.post(f"/api/v1/workloads/{workload.uid}/cancel/").status_code in (200, 202)


def _follow_while_training(engine, workload: Workload) -> tuple[threading.Thread, list[str]]:
    """Once the process runs and printed its first line: its log followed as the portal's log page follows
    it (until the container ends), into a list."""
    engine.wait_until(workload, lambda w: w.state == State.RUNNING, "running", timeout=180)
    deadline = time.monotonic() + 60
    while "training" not in workload_logs(workload):
        assert time.monotonic() < deadline, "the process never printed its first line"
        time.sleep(0.2)
    lines: list[str] = []
    thread = threading.Thread(target=lambda: lines.extend(follow_logs(workload, timeout_seconds=90)), daemon=True)
    thread.start()
    return thread, lines


def _handled_sigterm_cleanly(thread: threading.Thread, lines: list[str]) -> None:
    thread.join(90)
    log = "\n".join(lines)
    assert "handled SIGTERM, saving a checkpoint" in log, log
    assert "checkpoint saved, exiting cleanly" in log, log  # it had its grace period, not the kill


def test_sigterm_at_cancel_reaches_the_process_which_gets_its_grace_period(real_engine):
    api = api_as(real_engine.owner)
    workload = submit_real(api, command=["python", "-c", HANDLE_SIGTERM])
    thread, lines = _follow_while_training(real_engine, workload)

    assert api.post(f"/api/v1/workloads/{workload.uid}/cancel/").status_code in (200, 202)
    _handled_sigterm_cleanly(thread, lines)
    workload.refresh_from_db()
    assert workload.state == State.CANCELLED


def test_sigterm_at_preemption_reaches_the_borrowers_process_which_gets_its_grace_period(real_engine, real_borrower):
    """Two teams in a cohort share the real P100 node's 4 GPUs, 2 each; B borrows A's 2 for a job, A asks
    for them back: B's borrowed job is preempted, and its process gets SIGTERM and the grace period."""
    bob_api = api_as(real_borrower)
    own = submit_real(bob_api, gpu_count=2, command=["python", "-c", "import time; time.sleep(3600)"])
    borrowed = submit_real(bob_api, gpu_count=2, command=["python", "-c", HANDLE_SIGTERM])
    assert (own.borrowed, borrowed.borrowed) == (False, True)
    thread, lines = _follow_while_training(real_engine, borrowed)

    lender = submit_real(api_as(real_engine.owner), gpu_count=2, command=["python", "-c", "print('mine again')"])
    _handled_sigterm_cleanly(thread, lines)
    real_engine.wait_for(lender, State.SUCCEEDED, State.FAILED, timeout=180)
    assert lender.state == State.SUCCEEDED, lender.message
    borrowed.refresh_from_db()
    assert (borrowed.state, borrowed.reason) == (State.FAILED, "Preempted"), borrowed.message
    assert bob_api.post(f"/api/v1/workloads/{own.uid}/cancel/").status_code in (200, 202)
    real_engine.wait_for(own, State.CANCELLED, timeout=60)


def test_a_container_over_its_memory_limit_is_oom_killed_by_the_kernel(real_engine):
    # real-p100 gives 1024 MiB per GPU, as a limit equal to the request; the script takes 64 MiB at a time.
    workload = submit_real(api_as(real_engine.owner), command=["python", "-c", EAT_MEMORY])
    real_engine.wait_for(workload, State.FAILED, State.SUCCEEDED, timeout=180)

    assert (workload.state, workload.reason) == (State.FAILED, "OOMKilled"), workload.message
    assert workload.exit_code == 137
    assert "ran out of memory (OOMKilled)" in workload.message
