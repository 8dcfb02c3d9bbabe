"""The command-line client, through its installed entry point, against a running portal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from jobs.models import State, Workload

pytestmark = pytest.mark.slow


def gpuportal_binary() -> str:
    found = shutil.which("gpuportal", path=str(Path(sys.executable).parent)) or shutil.which("gpuportal")
    if found is None:
        pytest.fail("the gpuportal entry point is not installed: run `make venv` (pip install -e .)")
    return found


@pytest.fixture
def run_cli(live_server, world, tmp_path):
    def run(
        *args: str,
        token: str | None = "owner",  # noqa: S107 (a person, not a secret)
        env: dict | None = None,
        timeout: float = 60,
        stdin: str | None = None,
    ):
        environment = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(tmp_path),
            "GPUPORTAL_URL": live_server.url,
        }
        if token is not None:
            environment["GPUPORTAL_TOKEN"] = world.tokens.get(token, token)
        environment.update(env or {})
        return subprocess.run(
            [gpuportal_binary(), *args], env=environment, capture_output=True, text=True, timeout=timeout,
            input=stdin,
        )  # fmt: skip

    return run


def test_submit_list_cancel_wait(run_cli, world):
    # The team's 4 P100s are busy, so what is submitted waits in the queue (admission runs on commit).
    blocker = Workload.objects.create(
        team=world.team, owner=world.manager, name="busy", kind="batch", image="docker.io/x:1",
        gpu_type=world.p100, gpu_count=4, time_limit_seconds=3600, state=State.RUNNING,
    )  # fmt: skip
    submitted = run_cli(
        "submit", "--image", "docker.io/library/python:3.12", "--gpu-type", "p100", "--gpus", "2",
        "--name", "train", "--env", "EPOCHS=3", "--", "python", "-c", "print('hi')",
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    uid, state = submitted.stdout.split()[:2]
    workload = Workload.objects.get(uid=uid)
    assert workload.command == ["python", "-c", "print('hi')"]
    assert workload.env == [{"name": "EPOCHS", "value": "3"}]
    assert workload.gpu_count == 2
    assert state == "QUEUED"
    assert Workload.objects.get(uid=uid).state == State.QUEUED

    listed = run_cli("list", token="teammate")
    assert listed.returncode == 0, listed.stderr
    assert uid in listed.stdout
    assert blocker.uid in listed.stdout
    assert "UID" in listed.stdout.splitlines()[0]
    as_json = json.loads(run_cli("--json", "list", "--state", "queued").stdout)
    assert [w["uid"] for w in as_json] == [uid]
    assert run_cli("list", token="outsider").stdout.count("\n") == 1  # the header only

    timed_out = run_cli("wait", uid, "--timeout", "1", "--interval", "0.2")
    assert timed_out.returncode == 4
    assert "still QUEUED" in timed_out.stderr

    refused = run_cli("cancel", uid, token="teammate")
    assert refused.returncode == 1
    assert "owner or a manager" in refused.stderr

    cancelled = run_cli("cancel", uid)
    assert cancelled.returncode == 0, cancelled.stderr
    assert "CANCELLED" in cancelled.stdout
    waited = run_cli("wait", uid)
    assert waited.returncode == 1  # it did not succeed
    assert "CANCELLED" in waited.stderr


def test_wait_succeeds_when_the_workload_does(run_cli, world):
    submitted = run_cli("submit", "--image", "docker.io/x:1", "--gpu-type", "p100")
    uid = submitted.stdout.split()[0]
    Workload.objects.filter(uid=uid).update(state=State.SUCCEEDED, exit_code=0)
    waited = run_cli("--json", "wait", uid)
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout)["state"] == "SUCCEEDED"


def test_field_errors_are_printed(run_cli):
    result = run_cli("submit", "--image", "quay.io/evil/x:1", "--gpu-type", "p100", "--gpus", "99")
    assert result.returncode == 1
    assert "image:" in result.stderr
    assert "gpu_count:" in result.stderr
    assert Workload.objects.count() == 0


def test_logs_of_a_queued_workload(run_cli):
    uid = run_cli("submit", "--image", "docker.io/x:1", "--gpu-type", "p100").stdout.split()[0]
    result = run_cli("logs", uid)
    assert result.returncode == 1
    assert "not started" in result.stderr
    missing = run_cli("logs", "ffffffffffffffff")
    assert missing.returncode == 1
    assert "HTTP 404" in missing.stderr
    not_an_id = run_cli("logs", "nosuchuid")
    assert not_an_id.returncode == 2
    assert "not a workload's id" in not_an_id.stderr


def test_configuration_and_auth_errors(run_cli, live_server, world, tmp_path):
    no_token = run_cli("list", token=None)
    assert no_token.returncode == 2
    assert "/profile/tokens/" in no_token.stderr
    bad_token = run_cli("list", token="gpp_wrong")
    assert bad_token.returncode == 1
    assert "HTTP 401" in bad_token.stderr
    config = tmp_path / "gpuportal.toml"
    config.write_text(f'url = "{live_server.url}"\ntoken = "{world.tokens["manager"]}"\n')
    from_file = run_cli("list", token=None, env={"GPUPORTAL_CONFIG": str(config), "GPUPORTAL_URL": ""})
    assert from_file.returncode == 0, from_file.stderr


def test_unreachable_portal(run_cli):
    result = run_cli("list", env={"GPUPORTAL_URL": "http://127.0.0.1:9"}, timeout=60)
    assert result.returncode == 3
    assert "cannot reach the portal" in result.stderr


def test_open_prints_the_address_and_can_start_a_browser(run_cli, world, live_server, tmp_path):
    service = Workload.objects.create(
        team=world.team, owner=world.owner, name="nb", kind="service", image="docker.io/x:1", gpu_type=world.p100,
        gpu_count=1, port=8888, time_limit_seconds=3600, state=State.RUNNING,
    )  # fmt: skip
    opened = run_cli("open", service.uid)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == f"{live_server.url}/w/{service.uid}/"

    seen = tmp_path / "browser-was-asked-for"
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\necho "$1" > {seen}\n')
    browser.chmod(0o755)
    run_cli("open", service.uid, "--browser", env={"BROWSER": str(browser)})
    assert seen.read_text().strip() == f"{live_server.url}/w/{service.uid}/"

    batch = Workload.objects.create(
        team=world.team, owner=world.owner, name="job", kind="batch", image="docker.io/x:1", gpu_type=world.p100,
        gpu_count=1, time_limit_seconds=3600, state=State.RUNNING,
    )  # fmt: skip
    refused = run_cli("open", batch.uid)
    assert refused.returncode == 1
    assert "only services can be opened" in refused.stderr
    assert run_cli("open", service.uid, token="outsider").returncode == 1


def _finish_when_submitted(count: int) -> threading.Thread:
    """Marks the next `count` workloads SUCCEEDED once the CLI has submitted them (no cluster runs them here)."""

    def finish() -> None:
        try:
            deadline = time.monotonic() + 30
            while Workload.objects.count() < count and time.monotonic() < deadline:
                time.sleep(0.1)
            Workload.objects.update(state=State.SUCCEEDED, exit_code=0)
        finally:
            connection.close()

    thread = threading.Thread(target=finish, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("array", [None, "2"])
def test_json_submit_and_wait_prints_one_document_a_script_can_read(run_cli, world, array):
    # `-o json submit --wait` printed the submitted workload and then the finished one: two JSON documents
    # one after the other, which json.loads (or jq -e .state) refuses. An array printed one per copy.
    finisher = _finish_when_submitted(int(array or 1))
    extra = ["--array", array] if array else []
    result = run_cli(
        "-o", "json", "submit", "--image", "docker.io/x:1", "--gpu-type", "p100", *extra, "--wait", timeout=90
    )
    finisher.join(timeout=60)
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    if array:
        assert [w["state"] for w in body] == ["SUCCEEDED", "SUCCEEDED"]
        assert sorted(w["uid"] for w in body) == sorted(Workload.objects.values_list("uid", flat=True))
    else:
        assert body["state"] == "SUCCEEDED"
        assert body["uid"] == Workload.objects.get().uid


def test_output_json_may_follow_the_command_as_scripts_write_it(run_cli, world):
    # `gpuportal list -o json` (the way kubectl and gh take it) was a usage error: only `gpuportal -o json list`
    # was understood.
    submitted = run_cli("submit", "--image", "docker.io/x:1", "--gpu-type", "p100", "--json")
    assert submitted.returncode == 0, submitted.stderr
    uid = json.loads(submitted.stdout)["uid"]
    for args in (["list", "-o", "json"], ["list", "--output", "json"], ["list", "--json"]):
        listed = run_cli(*args)
        assert listed.returncode == 0, listed.stderr
        assert [w["uid"] for w in json.loads(listed.stdout)] == [uid]
    # Given before the command, it still holds (a command's own default does not undo it).
    assert json.loads(run_cli("-o", "json", "list").stdout)[0]["uid"] == uid
    assert run_cli("list").stdout.startswith("UID")
