"""`make run` picks real nodes by default and falls back to simulated ones, saying why in one line
(devtools/run.py choose_real_nodes)."""

from __future__ import annotations

import os

import pytest

from devtools import run
from localcluster.procs import ClusterError
from localcluster.realnode import check_host


def _can_run_real_nodes() -> bool:
    try:
        check_host()
    except ClusterError:
        return False
    return True


@pytest.fixture(autouse=True)
def _own_environ(monkeypatch):
    # choose_real_nodes sets it in this process's environment (the cluster reads it there); undone after.
    monkeypatch.setenv("GPUPORTAL_REAL_NODE_IMAGES", "")
    monkeypatch.delenv("GPUPORTAL_REAL_NODE_IMAGES")


@pytest.mark.skipif(not _can_run_real_nodes(), reason="this machine cannot run real nodes")
def test_real_nodes_by_default_with_the_local_catalog_and_images():
    env: dict[str, str] = {}
    assert run.choose_real_nodes(env) == 2
    assert env["GPUPORTAL_LOCAL_IMAGES"] == "1"
    assert os.environ["GPUPORTAL_REAL_NODE_IMAGES"] == "python,jupyterlab,tensorboard,devenv"


def test_turned_off_says_so_and_keeps_the_catalog_off_localhost(capsys):
    env = {"GPUPORTAL_REAL_NODES": "0"}
    assert run.choose_real_nodes(env) == 0
    assert "GPUPORTAL_LOCAL_IMAGES" not in env
    assert capsys.readouterr().err.strip() == "[run] GPUPORTAL_REAL_NODES=0: simulated nodes only"


def test_a_machine_that_cannot_falls_back_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # what check_host asks first: not root
    env: dict[str, str] = {}
    assert run.choose_real_nodes(env) == 0
    assert "GPUPORTAL_LOCAL_IMAGES" not in env
    said = capsys.readouterr().err.strip().splitlines()
    assert said == ["[run] real nodes off, simulated nodes only: real nodes need root (a kubelet and containerd "
                    "manage cgroups, mounts and network namespaces)."]  # fmt: skip
