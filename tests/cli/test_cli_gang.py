"""`gpuportal submit --nodes`, `clone` of a gang and `logs --rank`, through the installed entry point."""

from __future__ import annotations

import json

import pytest

from jobs.models import State, Workload
from tests.cli import test_cli_e2e

pytestmark = pytest.mark.slow
run_cli = test_cli_e2e.run_cli


def test_submit_a_gang_then_clone_it_and_refuse_a_rank_it_does_not_have(run_cli, world):
    made = run_cli("-o", "json", "submit", "--image", "docker.io/x:1", "--gpu-type", "p100", "--gpus", "2",
                   "--nodes", "2", "--topology", "preferred", "--", "torchrun", "train.py")  # fmt: skip
    assert made.returncode == 0, made.stderr
    body = json.loads(made.stdout)
    assert (body["nodes"], body["gpu_count"], body["gpus_total"], body["topology"]) == (2, 2, 4, "preferred")
    stored = Workload.objects.get(uid=body["uid"])
    assert stored.gpu_count == 4

    Workload.objects.filter(id=stored.id).update(state=State.CANCELLED)  # room in the quota for the copy
    cloned = run_cli("-o", "json", "clone", body["uid"], "--name", "again")
    assert cloned.returncode == 0, cloned.stderr
    copy = json.loads(cloned.stdout)
    assert (copy["nodes"], copy["gpu_count"], copy["topology"]) == (2, 2, "preferred")

    refused = run_cli("logs", copy["uid"], "--rank", "2")
    assert refused.returncode == 1
    assert "rank" in refused.stderr


def test_too_many_nodes_is_refused_naming_the_field(run_cli, world):
    result = run_cli("submit", "--image", "docker.io/x:1", "--gpu-type", "p100", "--nodes", "3", "--", "python")
    assert result.returncode == 1
    assert "nodes: The cluster has 2 ready Tesla P100 node(s)." in result.stderr
    assert not Workload.objects.exists()
