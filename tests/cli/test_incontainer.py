"""`gpuportal checkpoint` inside a job's container (cli/incontainer.py): one file, Python's standard library only
(run here with `python3 -S -I`: no site-packages at all), against a running portal with the workload's own token."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli.incontainer import Usage, checkpoint_request, refusal
from jobs.models import Checkpoint, State, Workload
from jobs.services.checkpoints.tokens import workload_token
from tests.api.conftest import submit  # noqa: F401 (fixture)

HELPER = Path(__file__).resolve().parents[2] / "cli" / "incontainer.py"


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-S", "-I", str(HELPER), *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def job_env(world, submit, tmp_path, live_server):  # noqa: F811
    uid = submit()["uid"]
    Workload.objects.filter(uid=uid).update(state=State.RUNNING, attempt=2)
    token = tmp_path / "token"
    token.write_text(workload_token(uid) + "\n")
    return {
        "GPUPORTAL_API_URL": live_server.url,
        "GPUPORTAL_TOKEN_FILE": str(token),
        "GPUPORTAL_WORKLOAD": uid,
        "GPUPORTAL_ATTEMPT": "2",
    }


@pytest.mark.slow
def test_the_helper_reports_a_checkpoint_with_the_jobs_own_token(job_env):
    done = _run(job_env, "checkpoint", "--step", "42", "--path", "/home/u/ck/42.pt", "--note", "epoch 3")
    assert done.returncode == 0, done.stderr
    uid = job_env["GPUPORTAL_WORKLOAD"]
    assert done.stdout.strip() == f"checkpoint step 42 recorded for {uid} (attempt 2)"
    stored = Checkpoint.objects.get(workload__uid=uid)
    assert (stored.step, stored.attempt, stored.path, stored.note) == (42, 2, "/home/u/ck/42.pt", "epoch 3")


@pytest.mark.slow
def test_the_helper_says_why_the_portal_refused(job_env):
    # Another workload's uid with this token: the portal answers 404, the helper says so and exits 1.
    other = {**job_env, "GPUPORTAL_WORKLOAD": "0" * 12}
    refused = _run(other, "checkpoint", "--step", "1")
    assert refused.returncode == 1
    assert "(HTTP 404)" in refused.stderr or "(HTTP 401)" in refused.stderr, refused.stderr
    # A negative step: 400 naming the field.
    invalid = _run(job_env, "checkpoint", "--step", "-1")
    assert invalid.returncode == 1
    assert "step:" in invalid.stderr, invalid.stderr
    assert "(HTTP 400)" in invalid.stderr, invalid.stderr


def test_outside_a_job_it_names_what_is_missing(tmp_path):
    with pytest.raises(Usage, match="GPUPORTAL_API_URL, GPUPORTAL_TOKEN_FILE not set"):
        checkpoint_request({"GPUPORTAL_WORKLOAD": "abc"}, step=1, path="", note="")
    with pytest.raises(Usage, match="cannot read the workload token"):
        checkpoint_request(
            {"GPUPORTAL_API_URL": "http://10.0.0.1:8000", "GPUPORTAL_TOKEN_FILE": str(tmp_path / "none"),
             "GPUPORTAL_WORKLOAD": "abc"}, step=1, path="", note="",
        )  # fmt: skip
    with pytest.raises(Usage, match="must start with http"):
        checkpoint_request(
            {"GPUPORTAL_API_URL": "10.0.0.1:8000", "GPUPORTAL_TOKEN_FILE": "/x", "GPUPORTAL_WORKLOAD": "a"},
            step=1, path="", note="",
        )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-S", "-I", str(HELPER), "checkpoint"], env={}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "not inside a GPU Portal batch job" in done.stderr


def test_the_request_carries_the_token_step_and_attempt(tmp_path):
    token = tmp_path / "t"
    token.write_text("gpw_abc_123\n")
    env = {"GPUPORTAL_API_URL": "http://10.0.0.1:8000/", "GPUPORTAL_TOKEN_FILE": str(token),
           "GPUPORTAL_WORKLOAD": "abc", "GPUPORTAL_ATTEMPT": "3"}  # fmt: skip
    url, body, headers = checkpoint_request(env, step=7, path="/ck", note="")
    assert url == "http://10.0.0.1:8000/api/v1/workloads/abc/checkpoints/"
    assert body == {"path": "/ck", "note": "", "step": 7, "attempt": 3}
    assert headers["Authorization"] == "Bearer gpw_abc_123"
    # No step given: none sent (the portal keeps null), and no attempt when the variable is not a number.
    _, body, _ = checkpoint_request({**env, "GPUPORTAL_ATTEMPT": ""}, step=None, path="", note="n")
    assert body == {"path": "", "note": "n"}


def test_a_refusal_reads_as_the_portals_words():
    payload = b'{"error": {"status": 400, "message": "Invalid.", "fields": {"step": ["Must be 0 or more."]}}}'
    assert refusal(400, payload) == "Invalid.; step: Must be 0 or more. (HTTP 400)"
    assert refusal(502, b"<html>bad gateway</html>") == "HTTP 502"
