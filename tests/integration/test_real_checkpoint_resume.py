"""Work that survives, on a real node (issue 37's proof): a batch job in the local python image writes a
checkpoint every few seconds into its GPUPORTAL_CHECKPOINT_DIR and reports each with `gpuportal checkpoint`
(the image's standard-library helper, cli/incontainer.py) through GPUPORTAL_API_URL, with its own token; a
lending team reclaims its GPUs, so the portal preempts it (SIGTERM, then the kill) and requeues it; its next
attempt (GPUPORTAL_ATTEMPT=1) reads the checkpoint the first one wrote and says "resumed from step k", k > 0;
and the GPU-hours its timeline and usage call lost are its GPUs x the time from its last reported checkpoint
to the preemption, not since its start.

Everything is real: the kubelet, containerd and runc of tests/realnode_fixtures.py, the home workspace on the
local storage class, the portal's API served by this process and reached from the pod through a relay on the
nodes' bridge gateway (localcluster/hostrelay.py), the Celery worker and tracker as subprocesses.
"""

from __future__ import annotations

import re
import time

import pytest

from jobs.models import Checkpoint, RunSegment, State, Workload, WorkloadEvent
from jobs.services.logs.container_logs import LogsUnavailable, workload_logs
from tests.realnode_fixtures import api_as, submit_real

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]

REAL_NODE_IMAGES = ("sandbox", "python")  # batch jobs only (tests/realnode_fixtures.py)
EVERY = 3  # steps (seconds) between checkpoints

TRAIN = f"""
import json, os, subprocess, sys, time
directory = os.environ["GPUPORTAL_CHECKPOINT_DIR"]
attempt = int(os.environ["GPUPORTAL_ATTEMPT"])
state = os.path.join(directory, "state.json")
os.makedirs(directory, exist_ok=True)
step = 0
if os.path.exists(state):
    with open(state) as f:
        step = json.load(f)["step"]
    print(f"attempt {{attempt}}: resumed from step {{step}}", flush=True)
else:
    print(f"attempt {{attempt}}: starting from step 0", flush=True)
stop_at = step + 2 * {EVERY} if attempt else None  # the first attempt trains until it is stopped
while stop_at is None or step < stop_at:
    time.sleep(1)
    step += 1
    if step % {EVERY} == 0:
        with open(state + ".tmp", "w") as f:
            json.dump({{"step": step}}, f)
        os.replace(state + ".tmp", state)
        subprocess.run(["gpuportal", "checkpoint", "--step", str(step), "--path", state], check=True)
print(f"finished at step {{step}}", flush=True)
"""


def _until(what: str, check, timeout: float, workload: Workload):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    workload.refresh_from_db()
    log = ""
    try:
        log = workload_logs(workload)[-2000:]
    except LogsUnavailable as exc:
        log = f"(no log: {exc})"
    events = "\n".join(f"  {e.at:%H:%M:%S} {e.reason} {e.message}" for e in workload.events.all())
    pytest.fail(f"{what} within {timeout:.0f} s ({workload.state}, {workload.message})\n{events}\nlog:\n{log}")


def test_a_preempted_job_resumes_from_the_checkpoint_it_wrote_and_loses_only_the_work_since(
    real_engine, real_borrower, pods_reach_portal, settings
):
    settings.WORKSPACE_STORAGE_CLASS = "gpuportal-local"  # the home workspace, where the checkpoints go
    bob_api = api_as(real_borrower)
    own = submit_real(bob_api, gpu_count=2, command=["python", "-c", "import time; time.sleep(3600)"])
    job = submit_real(bob_api, name="train", gpu_count=2, restartable=True, command=["python", "-c", TRAIN])
    assert job.borrowed
    assert job.mounts  # the home workspace, where GPUPORTAL_CHECKPOINT_DIR lies

    # The first attempt trains and reports its checkpoints from inside the container.
    reported = _until(
        "two checkpoints reported by the job",
        lambda: (
            list(Checkpoint.objects.filter(workload=job, attempt=0)[:2])
            if Checkpoint.objects.filter(workload=job, attempt=0).count() >= 2
            else None
        ),
        timeout=240,
        workload=job,
    )
    assert all(c.step and c.step % EVERY == 0 for c in reported), reported
    assert reported[0].path.endswith(f"/.gpuportal/checkpoints/train-{job.uid}/state.json"), reported[0].path
    shown = bob_api.get(f"/api/v1/workloads/{job.uid}/checkpoints/").json()
    assert shown["last"] is not None, shown
    assert shown["checkpoints"], shown

    # The lender takes its GPUs back: the borrowed job is preempted and requeued, not failed.
    time.sleep(EVERY / 2)  # between two checkpoints: some work since the last one is lost
    lender = submit_real(api_as(real_engine.owner), gpu_count=2, command=["python", "-c", "import time; time.sleep(5)"])
    preempted = _until(
        "the preemption on the job's timeline",
        lambda: WorkloadEvent.objects.filter(workload=job, reason="Preempted").first(),
        timeout=120,
        workload=job,
    )
    real_engine.wait_for(lender, State.SUCCEEDED, State.FAILED, timeout=180)
    assert lender.state == State.SUCCEEDED, lender.message

    # Its next attempt starts from the checkpoint the first one wrote, and finishes.
    real_engine.wait_for(job, State.SUCCEEDED, State.FAILED, timeout=300)
    assert (job.state, job.attempt) == (State.SUCCEEDED, 1), job.message
    log = workload_logs(job)
    resumed = re.search(r"attempt 1: resumed from step (\d+)", log)
    assert resumed, log
    k = int(resumed.group(1))
    # The first attempt's run, as usage keeps it: from its start to the preemption (`finished_at` is the moment
    # the portal preempted it, the one its lost work was measured at).
    segment = RunSegment.objects.get(workload=job, attempt=0, reason="Preempted")
    before = Checkpoint.objects.filter(workload=job, attempt=0, at__lte=segment.finished_at).order_by("-at").first()
    assert before is not None
    assert before.step
    # k > 0: the file it reported last before the preemption, or one written just after it, never less.
    assert k > 0
    assert k >= before.step, (k, before.step, log)
    assert f"finished at step {k + 2 * EVERY}" in log, log
    assert Checkpoint.objects.filter(workload=job, attempt=1, step__gt=k).exists()

    # Lost: its 2 GPUs x the time from its last checkpoint to the preemption (seconds, not the whole run).
    expected = 2 * (segment.finished_at - before.at).total_seconds()
    assert segment.lost_gpu_seconds == pytest.approx(expected, abs=0.01), (segment.lost_gpu_seconds, expected)
    ran = 2 * (segment.finished_at - segment.started_at).total_seconds()
    assert 0 < segment.lost_gpu_seconds <= 2 * (EVERY + 2) < ran, (segment.lost_gpu_seconds, ran)
    job.refresh_from_db()
    assert job.lost_gpu_seconds == pytest.approx(segment.lost_gpu_seconds)
    assert "of work lost (since its last checkpoint)" in preempted.message, preempted.message

    assert bob_api.post(f"/api/v1/workloads/{own.uid}/cancel/").status_code in (200, 202)
    real_engine.wait_for(own, State.CANCELLED, timeout=60)
