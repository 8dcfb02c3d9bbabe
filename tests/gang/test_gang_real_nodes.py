"""A gang job on real nodes (kubelet, containerd, runc, CNI): two ranks on two real-p100 nodes find each
other through MASTER_ADDR/MASTER_PORT (rank 0's pod IP handed over by the portal: this cluster has no
DNS) and complete an all-reduce over plain sockets; both logs show the same result. One rank exiting 1
fails the whole gang, naming the rank and its exit code, and the other rank is stopped."""

from __future__ import annotations

import contextlib
import re
import time

import pytest
from rest_framework.test import APIClient

from jobs.models import GangRank, State, Workload
from localcluster.images import IMAGES

pytestmark = [pytest.mark.cluster, pytest.mark.celery, pytest.mark.slow]

REAL_NODE_COUNT = 3  # real-p100-1, real-k2-1, real-p100-2: two nodes of one type for the gang

# Each rank contributes rank + 1; rank 0 sums what every rank sent and sends the sum back to all.
ALL_REDUCE = r"""
import os, socket, sys, time
rank, world = int(os.environ["NODE_RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
mine = rank + 1
print(f"rank {rank}/{world} master {addr}:{port} nproc {os.environ['NPROC_PER_NODE']}", flush=True)
if rank == 0:
    server = socket.create_server(("0.0.0.0", port))
    peers = [server.accept()[0] for _ in range(world - 1)]
    total = mine + sum(int(p.makefile().readline()) for p in peers)
    for p in peers:
        p.sendall(f"{total}\n".encode())
else:
    deadline = time.time() + 120
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)
    conn.sendall(f"{mine}\n".encode())
    total = int(conn.makefile().readline())
print(f"allreduce sum={total}", flush=True)
if rank == int(os.environ.get("FAIL_RANK", "-1")):
    sys.exit(1)
time.sleep(float(os.environ.get("HOLD_SECONDS", "0")))
"""


def _submit(user, **spec) -> Workload:
    client = APIClient()
    client.force_authenticate(user)
    body = {"gpu_type": "real-p100", "gpu_count": 1, "nodes": 2, "image": IMAGES["python"],
            "command": ["python", "-c", ALL_REDUCE], **spec}  # fmt: skip
    response = client.post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["nodes"] == 2
    assert response.json()["gpus_total"] == 2
    return Workload.objects.get(uid=response.json()["uid"])


def _rank_log(user, workload: Workload, rank: int, needle: str) -> str:
    client = APIClient()
    client.force_authenticate(user)
    deadline = time.monotonic() + 120
    text = ""
    while time.monotonic() < deadline:
        response = client.get(f"/api/v1/workloads/{workload.uid}/logs/", {"rank": rank})
        if response.status_code == 200:
            text = response.content.decode()
            if needle in text:
                return text
        time.sleep(1)
    return text


def test_two_ranks_on_two_real_nodes_all_reduce_over_sockets(real_engine):
    workload = _submit(real_engine.owner, env=[{"name": "HOLD_SECONDS", "value": "20"}])
    real_engine.wait_for(workload, State.RUNNING, State.FAILED, State.SUCCEEDED, timeout=240)
    assert workload.state != State.FAILED, workload.message
    logs = [_rank_log(real_engine.owner, workload, rank, "allreduce sum=") for rank in (0, 1)]
    for rank, text in enumerate(logs):
        assert f"rank {rank}/2" in text, text
        assert "allreduce sum=3" in text, text  # 1 + 2, the same result on both ranks
    # Rank 1 reached rank 0 at the address the portal handed it (rank 0's pod IP).
    rank0_ip = GangRank.objects.get(workload=workload, attempt=workload.attempt, rank=0).pod_ip
    assert re.search(rf"master {re.escape(rank0_ip)}:29500", logs[1]), logs[1]
    done = real_engine.wait_for(workload, State.SUCCEEDED, State.FAILED, timeout=180)
    assert done.state == State.SUCCEEDED, done.message
    ranks = list(GangRank.objects.filter(workload=workload, attempt=workload.attempt).order_by("rank"))
    assert len({r.node_name for r in ranks}) == 2
    assert all(r.node_name.startswith("real-p100-") for r in ranks)
    # GPU-hours: the sum over ranks of each one's own run (1 GPU each), by Kubernetes' timestamps.
    per_rank = sum((r.finished_at - r.started_at).total_seconds() for r in ranks)
    assert done.gpu_seconds() == pytest.approx(per_rank, abs=0.01)


def test_one_rank_exiting_1_fails_the_gang_naming_the_rank(real_engine):
    workload = _submit(
        real_engine.owner,
        env=[{"name": "FAIL_RANK", "value": "1"}, {"name": "HOLD_SECONDS", "value": "600"}],
    )
    done = real_engine.wait_for(workload, State.FAILED, State.SUCCEEDED, timeout=240)
    assert done.state == State.FAILED
    assert done.exit_code == 1
    assert done.message.startswith("Rank 1 of 2 failed: Exited with code 1."), done.message
    # Rank 0, still holding its GPU, is stopped.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if not _live_rank_pods(real_engine, workload):
                break
        time.sleep(1)
    else:
        pytest.fail("rank 0 was not stopped after rank 1 failed")


def _live_rank_pods(engine, workload: Workload) -> list:
    from kubernetes import client as k8s

    from jobs.kube import client as kube
    from jobs.kube import names

    del engine
    pods = k8s.CoreV1Api(kube.api_client()).list_namespaced_pod(
        workload.namespace, label_selector=f"{names.LABEL_GANG}={names.gang_label(workload.uid, workload.attempt)}"
    )
    return [p for p in pods.items if not p.metadata.deletion_timestamp and p.status.phase in ("Pending", "Running")]
