"""The CLI against a running portal with the real engine behind it (worker, tracker, local GPU cluster):
`submit`, `logs --follow` until the container ends, and `wait` with the workload's outcome as exit code."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from django.utils import timezone

from api.tokens import token_create
from jobs.models import State, Workload
from tests.cli.test_cli_e2e import gpuportal_binary

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]


@pytest.fixture
def cli(engine, live_server, tmp_path):
    token = token_create(user=engine.owner, name="cli test").raw

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "GPUPORTAL_URL": live_server.url,
               "GPUPORTAL_TOKEN": token}  # fmt: skip
        return subprocess.run([gpuportal_binary(), *args], env=env, capture_output=True, text=True, timeout=timeout)

    return run


def test_submit_follow_logs_and_wait_for_success(cli, engine):
    submitted = cli(
        "submit", "--image", "nvidia/cuda:12.2.0-base-ubuntu22.04", "--gpu-type", "p100", "--gpus", "2",
        "--env", "SIM_RUN_SECONDS=3", "--name", "cli-train",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    uid = submitted.stdout.split()[0]
    followed = cli("logs", "--follow", uid)
    assert followed.returncode == 0, followed.stderr
    workload = Workload.objects.get(uid=uid)
    assert workload.node_name
    assert workload.node_name in followed.stdout
    waited = cli("wait", uid, "--interval", "0.5")
    assert waited.returncode == 0, waited.stderr
    assert "SUCCEEDED" in waited.stderr
    assert Workload.objects.get(uid=uid).state == State.SUCCEEDED
    # Plain logs of the finished job, through the API.
    logs = cli("logs", uid, "--tail", "20")
    assert logs.returncode == 0, logs.stderr
    assert workload.node_name in logs.stdout


def test_wait_reports_a_failure_with_exit_code_1(cli, engine):
    submitted = cli(
        "submit", "--image", "nvidia/cuda:12.2.0-base-ubuntu22.04", "--gpu-type", "p100",
        "--env", "SIM_RUN_SECONDS=1", "--env", "SIM_EXIT_CODE=3", "--wait",
    )  # fmt: skip
    assert submitted.returncode == 1, submitted.stderr
    assert "FAILED" in submitted.stderr
    assert "Exited with code 3." in submitted.stderr


def test_an_array_runs_every_copy_with_its_own_index(cli, engine):
    submitted = cli(
        "submit", "--image", "nvidia/cuda:12.2.0-base-ubuntu22.04", "--gpu-type", "p100", "--name", "sweep",
        "--env", "SIM_RUN_SECONDS=1", "--array", "3", "--wait", timeout=240,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    uids = [line.split()[0] for line in submitted.stdout.splitlines()]
    assert len(uids) == 3
    workloads = {w.uid: w for w in Workload.objects.filter(uid__in=uids)}
    assert [workloads[uid].name for uid in uids] == ["sweep-0", "sweep-1", "sweep-2"]
    assert {workloads[uid].state for uid in uids} == {State.SUCCEEDED}
    indexes = [{e["name"]: e["value"] for e in workloads[uid].env}["GPUPORTAL_ARRAY_INDEX"] for uid in uids]
    assert indexes == ["0", "1", "2"]


def test_an_array_with_a_bad_field_submits_nothing(cli, engine):
    refused = cli("submit", "--image", "docker.io/x:1", "--gpu-type", "p100", "--gpus", "99", "--array", "2")
    assert refused.returncode != 0
    assert "workloads[0].gpu_count" in refused.stderr
    assert cli("submit", "--image", "docker.io/x:1", "--gpu-type", "p100", "--array", "0").returncode == 2
    assert not Workload.objects.filter(owner=engine.owner, image="docker.io/x:1").exists()


def test_follow_logs_since_starts_from_that_many_seconds_ago(cli, engine):
    # `logs --follow --since N` (and the API's follow=true&since=N) dropped `since`: the stream began with
    # the container's first line (the last 200 lines), whatever N said.
    submitted = cli(
        "submit", "--image", "nvidia/cuda:12.2.0-base-ubuntu22.04", "--gpu-type", "p100",
        "--env", "SIM_RUN_SECONDS=10", "--name", "since",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    uid = submitted.stdout.split()[0]
    deadline = time.monotonic() + 90
    while not Workload.objects.get(uid=uid).started_at and time.monotonic() < deadline:
        time.sleep(0.5)
    started = Workload.objects.get(uid=uid).started_at
    assert started, "the job did not start"
    time.sleep(max(0.0, 6 - (timezone.now() - started).total_seconds()))
    followed = cli("logs", "--follow", "--since", "3", uid)
    assert followed.returncode == 0, followed.stderr
    assert "container exited" in followed.stdout  # it followed to the end
    assert "started on node" not in followed.stdout, followed.stdout
    assert "running: 1s elapsed" not in followed.stdout, followed.stdout
