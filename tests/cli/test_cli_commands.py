"""The CLI's read commands and clone, through the installed entry point against a running portal."""

from __future__ import annotations

import json
import subprocess

import pytest

from identity.models import Membership, MembershipChange
from jobs.models import Dataset, GpuNode, State, TeamSecret, Workload
from tests.cli import test_cli_e2e
from tests.engine.factories import UserFactory

pytestmark = pytest.mark.slow
run_cli = test_cli_e2e.run_cli  # the fixture: the entry point with a token, against the live portal


def _workload(world, **fields) -> Workload:
    defaults = {
        "team": world.team, "owner": world.owner, "name": "source", "kind": "batch", "image": "docker.io/x:1",
        "gpu_type": world.p100, "gpu_count": 2, "time_limit_seconds": 5400, "state": State.SUCCEEDED,
        "command": ["python", "train.py"], "env": [{"name": "EPOCHS", "value": "3"}],
    }  # fmt: skip
    defaults.update(fields)
    return Workload.objects.create(**defaults)


def test_clone_submits_the_same_workload_under_a_new_name(run_cli, world):
    source = _workload(world)
    cloned = run_cli("--output", "json", "clone", source.uid, "--name", "again")
    assert cloned.returncode == 0, cloned.stderr
    copy = json.loads(cloned.stdout)
    assert copy["uid"] != source.uid
    assert (copy["name"], copy["image"], copy["gpu_type"], copy["gpu_count"]) == ("again", "docker.io/x:1", "p100", 2)
    assert copy["command"] == ["python", "train.py"]
    assert copy["env"] == [{"name": "EPOCHS", "value": "3"}]
    assert copy["time_limit_seconds"] == 5400
    assert (copy["retry_limit"], copy["retry_limit_from_launch"]) == (world.team.default_retry_limit, False)


def test_clone_keeps_the_retry_limit_its_launch_chose(run_cli, world):
    source = _workload(world, restartable=True, retry_limit=7, retryable_exit_codes=[75])
    cloned = run_cli("--output", "json", "clone", source.uid, "--name", "again")
    assert cloned.returncode == 0, cloned.stderr
    copy = json.loads(cloned.stdout)
    assert (copy["retry_limit"], copy["retry_limit_from_launch"], copy["retryable_exit_codes"]) == (7, True, [75])
    assert Workload.objects.get(uid=copy["uid"]).retry_limit == 7


def test_clone_of_another_teams_workload_is_not_found(run_cli, world):
    source = _workload(world)
    result = run_cli("clone", source.uid, token="outsider")
    assert result.returncode == 1
    assert "404" in result.stderr
    assert Workload.objects.count() == 1


def test_gpu_types_text_and_json(run_cli, world):
    text = run_cli("gpu-types")
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0].split()[:2] == ["SLUG", "NAME"]
    assert any(
        line.startswith("p100") and "0 of 4" not in line and "4 of 4" in line for line in text.stdout.splitlines()
    )
    as_json = json.loads(run_cli("-o", "json", "gpu-types").stdout)
    assert {t["slug"] for t in as_json} >= {"p100"}


def test_gpu_types_shows_the_cuda_version_the_launch_page_shows(run_cli, world):
    """Issue 32: `gpuportal gpu-types` said "-" for CUDA where the launch page said "≤ 11.4" (learnt from
    the nodes' drivers, not set by an admin). Both now show the version a submission is judged against."""
    GpuNode.objects.filter(gpu_type=world.p100).update(cuda_driver_version="11.4")
    assert world.p100.max_cuda_version == ""  # no admin set it: the nodes' drivers say
    text = run_cli("gpu-types")
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0].split()[-1] == "CUDA"
    row = next(line for line in text.stdout.splitlines() if line.startswith("p100"))
    assert row.endswith("≤ 11.4")
    as_json = json.loads(run_cli("-o", "json", "gpu-types").stdout)
    assert next(t for t in as_json if t["slug"] == "p100")["max_cuda_version"] == "11.4"


def test_queue_lists_what_waits_in_order(run_cli, world):
    _workload(world, name="holder", state=State.RUNNING, gpu_count=4)
    _workload(world, name="waits-first", state=State.QUEUED)
    _workload(world, name="waits-second", state=State.QUEUED)
    result = run_cli("queue")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    first = next(n for n, line in enumerate(lines) if "waits-first" in line)
    second = next(n for n, line in enumerate(lines) if "waits-second" in line)
    assert first < second
    body = json.loads(run_cli("--json", "queue").stdout)
    assert [w["name"] for w in body["queued"]] == ["waits-first", "waits-second"]


def test_usage_prints_a_total(run_cli, world):
    result = run_cli("usage", "--by", "gpu_type")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("vision: ")
    assert result.stdout.splitlines()[-1].split()[0] == "TOTAL"
    body = json.loads(run_cli("-o", "json", "usage").stdout)
    assert body["group_by"] == "day"
    assert "total_gpu_hours" in body


def test_usage_with_a_bad_date_names_the_field(run_cli, world):
    result = run_cli("usage", "--start", "yesterday")
    assert result.returncode == 1
    assert "start" in result.stderr


def test_secrets_are_stored_listed_and_deleted_with_the_value_from_standard_input(run_cli, world, settings):
    settings.PORTAL_SECRET_CONFIRM_SECONDS = 0  # no engine here: the store is accepted as being written
    value = "cli-secret-5d2e-never-printed"
    stored = run_cli("secret-set", "wandb", stdin=value + "\n")
    assert stored.returncode == 0, stored.stderr
    assert "wandb: being written by the portal" in stored.stdout
    assert value not in stored.stdout + stored.stderr
    secret = TeamSecret.objects.get(team=world.team, name="wandb")
    assert secret.owner == world.owner
    listed = run_cli("secrets")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:4] == ["wandb", "yours", world.owner.username, "pending"]
    assert value not in listed.stdout
    refused = run_cli("secret-set", "Bad Name", stdin=value)
    assert refused.returncode == 1
    assert "name:" in refused.stderr
    assert value not in refused.stderr
    assert run_cli("secret-delete", "wandb").returncode == 0
    assert run_cli("-o", "json", "secrets").stdout.strip() == "[]"


def test_datasets_lists_the_ones_the_team_may_use(run_cli, world):
    """`gpuportal datasets`: the names `submit --dataset` takes, before only in the error for a wrong one."""
    Dataset.objects.create(name="imagenet", description="ILSVRC 2012", claim_name="imagenet").teams.add(world.team)
    Dataset.objects.create(name="their-corpus", claim_name="corpus").teams.add(world.other_team)
    listed = run_cli("datasets")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[0].split() == ["NAME", "MOUNTED", "AT", "DESCRIPTION"]
    assert listed.stdout.splitlines()[1].split() == ["imagenet", "/datasets/imagenet", "ILSVRC", "2012"]
    assert "their-corpus" not in listed.stdout
    as_json = json.loads(run_cli("-o", "json", "datasets").stdout)
    assert [d["name"] for d in as_json] == ["imagenet"]


def test_managers_keep_their_team_from_the_terminal(run_cli, world):
    UserFactory(username="nina")
    listed = run_cli("members")
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:2] for line in listed.stdout.splitlines()] == [
        ["USERNAME", "ROLE"], ["maria", "manager"], ["olivia", "member"], ["tom", "member"],
    ]  # fmt: skip
    refused = run_cli("members-add", "nina")  # olivia is a plain member
    assert refused.returncode == 1
    assert "managers" in refused.stderr
    added = run_cli("members-add", "nina", "--team", "vision", token="manager")
    assert added.returncode == 0, added.stderr
    assert added.stdout.strip() == "nina is now a member of vision."
    promoted = run_cli("-o", "json", "members-role", "nina", "manager", token="manager")
    assert json.loads(promoted.stdout)["role"] == "manager"
    last = run_cli("members-remove", "maria", token="manager")
    assert last.returncode == 0, last.stderr  # nina manages now
    kept = run_cli("members-role", "nina", "member", "--team", "vision", token="admin")
    assert kept.returncode == 1
    assert "role: " in kept.stderr  # the field, and the reason: Vision needs a manager
    assert "needs at least one manager" in kept.stderr
    assert dict(Membership.objects.filter(team=world.team).values_list("user__username", "role")) == {
        "olivia": "member", "tom": "member", "nina": "manager",
    }  # fmt: skip
    made_here = MembershipChange.objects.filter(team=world.team).exclude(changed_by=None).order_by("id")
    assert [(c.username, c.changed_by_name) for c in made_here] == [("nina", "maria")] * 2 + [("maria", "maria")]


def test_list_into_a_reader_that_stops_early_ends_quietly(live_server, world, tmp_path):
    """`gpuportal list | head -1`: the reader closes the pipe after one line; no traceback follows."""
    import os
    import subprocess

    from tests.cli.test_cli_e2e import gpuportal_binary

    for i in range(400):  # more than a pipe's buffer holds, so the CLI is still writing when head leaves
        _workload(world, name=f"many-{i}")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "GPUPORTAL_URL": live_server.url,
           "GPUPORTAL_TOKEN": world.tokens["owner"]}  # fmt: skip
    cli = subprocess.Popen([gpuportal_binary(), "list", "--limit", "400"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)  # fmt: skip
    assert cli.stdout is not None
    first = cli.stdout.readline()
    cli.stdout.close()
    _, stderr = cli.communicate(timeout=60)
    assert first.startswith(b"UID")
    assert b"Traceback" not in stderr, stderr.decode()
    assert cli.returncode in (0, 141)


def test_following_a_queued_workloads_logs_says_it_waits_once_not_every_two_seconds(run_cli, world):
    queued = _workload(world, state=State.QUEUED)
    try:
        run_cli("logs", "--follow", queued.uid, timeout=9)
    except subprocess.TimeoutExpired as waited:  # still queued: it waits on, as it should
        said = waited.stderr.decode() if isinstance(waited.stderr, bytes) else waited.stderr or ""
    else:
        pytest.fail("logs --follow of a queued workload returned")
    assert said.count("waiting for its container") == 1, said
    assert f"{queued.uid} is QUEUED" in said, said


def test_json_wait_that_times_out_prints_the_workload_as_last_seen(run_cli, world):
    """`-o json wait --timeout N` printed nothing when the time ran out: a script reading stdout got ''.
    It prints the workload as last seen, marked `"timed_out": true`, and still exits 4."""
    queued = _workload(world, state=State.QUEUED)
    result = run_cli("-o", "json", "wait", queued.uid, "--timeout", "0.5", "--interval", "0.2")
    assert result.returncode == 4
    body = json.loads(result.stdout)
    assert (body["uid"], body["state"], body["timed_out"]) == (queued.uid, "QUEUED", True)
    assert "still QUEUED" in result.stderr
    finished = _workload(world, name="done")
    body = json.loads(run_cli("wait", finished.uid, "-o", "json").stdout)
    assert (body["state"], body.get("timed_out")) == ("SUCCEEDED", None)  # only a wait that ran out says so


def test_json_secret_delete_prints_what_was_deleted(run_cli, world, settings):
    """`-o json secret-delete NAME` printed nothing; it prints `{"deleted": ...}` with the secret as
    `gpuportal secrets -o json` listed it."""
    settings.PORTAL_SECRET_CONFIRM_SECONDS = 0
    assert run_cli("secret-set", "wandb", stdin="value\n").returncode == 0
    deleted = run_cli("-o", "json", "secret-delete", "wandb")
    assert deleted.returncode == 0, deleted.stderr
    body = json.loads(deleted.stdout)
    assert (body["deleted"]["name"], body["deleted"]["owner"]) == ("wandb", world.owner.username)
    assert json.loads(run_cli("-o", "json", "secrets").stdout) == []
    missing = run_cli("-o", "json", "secret-delete", "wandb")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert "HTTP 404" in missing.stderr


def test_json_members_remove_prints_who_was_removed(run_cli, world):
    """`-o json members-remove USER` printed nothing; it prints `{"deleted": ...}` with the membership as
    `gpuportal members -o json` listed it."""
    removed = run_cli("members-remove", "tom", "-o", "json", token="manager")
    assert removed.returncode == 0, removed.stderr
    body = json.loads(removed.stdout)
    assert (body["deleted"]["username"], body["deleted"]["role"]) == ("tom", "member")
    assert not Membership.objects.filter(team=world.team, user__username="tom").exists()
    refused = run_cli("members-remove", "olivia", "-o", "json")  # olivia is a plain member
    assert (refused.returncode, refused.stdout) == (1, "")
    assert Membership.objects.filter(team=world.team, user__username="olivia").exists()


def test_json_logs_prints_one_document(run_cli, world, monkeypatch):
    """`-o json logs UID` printed the container's raw text, which no JSON reader takes."""
    import api.views

    running = _workload(world, state=State.RUNNING, k8s_name="gp-source")
    monkeypatch.setattr(api.views, "workload_logs", lambda workload, **_: "epoch 1\nepoch 2\n")
    result = run_cli("-o", "json", "logs", running.uid)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"uid": running.uid, "rank": None, "logs": "epoch 1\nepoch 2\n"}


def test_cancel_takes_several_uids_as_xargs_hands_them_over(run_cli, world):
    """`gpuportal list --state queued -o json | jq -r '.[].uid' | xargs gpuportal cancel` was a usage error
    ("unrecognized arguments") as soon as two were queued. Each is cancelled; one that cannot be (another
    team's) is said on stderr, the others still go, and the exit is 1."""
    mine = [_workload(world, name=f"q{i}", state=State.QUEUED) for i in range(2)]
    theirs = _workload(world, name="theirs", state=State.QUEUED, team=world.other_team, owner=world.outsider)
    result = run_cli("cancel", mine[0].uid, mine[1].uid)
    assert result.returncode == 0, result.stderr
    assert [line.split() for line in result.stdout.splitlines()] == [[w.uid, "CANCELLED"] for w in mine]
    again = [_workload(world, name=f"r{i}", state=State.QUEUED) for i in range(2)]
    mixed = run_cli("-o", "json", "cancel", again[0].uid, theirs.uid, again[1].uid)
    assert mixed.returncode == 1
    assert [(w["uid"], w["state"]) for w in json.loads(mixed.stdout)] == [(w.uid, "CANCELLED") for w in again]
    assert f"{theirs.uid}: " in mixed.stderr
    assert "HTTP 404" in mixed.stderr
    assert Workload.objects.get(uid=theirs.uid).state == State.QUEUED
    one = _workload(world, name="one", state=State.QUEUED)
    assert json.loads(run_cli("-o", "json", "cancel", one.uid).stdout)["uid"] == one.uid  # one: the workload
