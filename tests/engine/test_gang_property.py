"""A property of gang jobs over random arrivals, cancels, node losses and the passage of time: after the
start window no gang holds part of its ranks, and the team's quota is never exceeded counting whole gangs.

The portal's own code decides everything: intake and admission (PostgreSQL), the tracker's view of a gang
(`sync_gang` over pod JSON as the API server reports it), the start-window release and cancel. The
cluster is a model kept here: three nodes of 4 GPUs, some taken outside the portal; a scheduler that
places each pending rank on a live node with room, never two ranks of one gang on a node; and a rank's
GPUs are freed only when the portal asked Kubernetes to delete that rank's Job (through the in-memory
client of tests/engine/fake_kube.py, which records every delete). The engine tests play the same story
on the real local cluster (tests/gang/test_gang_cluster.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest
from django.db import transaction
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from jobs.kube import names
from jobs.models import AllowedRegistry, GpuNode, State, Workload
from jobs.services.cancel import workload_cancel
from jobs.services.cluster.gang_tracking import sync_gang
from jobs.services.cluster.object_creation import workload_delete_objects
from jobs.services.queue.admission import quota_admit
from jobs.services.queue.gangs import release_overdue
from jobs.services.submission.intake import workload_submit
from jobs.services.transitions import transition
from jobs.services.validation import SubmissionInvalid
from tests.engine.factories import GpuTypeFactory, MembershipFactory, QuotaFactory, TeamFactory

pytestmark = pytest.mark.django_db

WINDOW = 30
QUOTA = 8
NODES = ("gpu-a", "gpu-b", "gpu-c")
GPUS_PER_NODE = 4

events = st.lists(
    st.one_of(
        st.tuples(st.just("arrive"), st.integers(2, 3), st.integers(1, 4)),
        st.tuples(st.just("tick"), st.integers(1, 40)),
        st.tuples(st.just("cancel"), st.integers(0, 20)),
        st.tuples(st.just("lose_node"), st.integers(0, 2)),
        st.tuples(st.just("free_outside"), st.integers(0, 2)),
    ),
    max_size=30,
)


@dataclass
class Rank:
    node: str
    since: datetime
    lost: bool = False


@dataclass
class Cluster:
    """What the model cluster holds: placed ranks per (workload uid, attempt, rank)."""

    outside: dict[str, int]
    alive: set[str] = field(default_factory=lambda: set(NODES))
    ranks: dict[tuple[str, int, int], Rank] = field(default_factory=dict)

    def free(self, node: str) -> int:
        used = sum(gpus for (uid, _, _), r in self.ranks.items() if r.node == node for gpus in [self.per_node[uid]])
        return GPUS_PER_NODE - self.outside[node] - used

    per_node: dict[str, int] = field(default_factory=dict)


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.GANG_START_WINDOW_SECONDS = WINDOW
    settings.CLUSTER_DNS = True  # the model has no pod IPs to hand over
    settings.PORTAL_INSTANCE = "unit"


# The story the property is about, always tried: one node's GPUs all taken outside the portal, a gang of 3.
@example(outside=[4, 0, 0], story=[("arrive", 3, 1), ("tick", 20), ("tick", 20), ("free_outside", 0), ("tick", 5)])
@given(outside=st.lists(st.integers(0, 4), min_size=3, max_size=3), story=events)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_no_gang_holds_part_of_its_ranks_past_the_window_and_quota_counts_whole_gangs(fake_kube, outside, story):
    fake_kube.calls.clear()
    with transaction.atomic():  # each example starts from an empty database
        play(fake_kube, outside, story)
        transaction.set_rollback(True)


def play(fake_kube, outside: list[int], story: list[tuple]) -> None:
    AllowedRegistry.objects.get_or_create(host="docker.io")
    team = TeamFactory(slug="vision")
    owner = MembershipFactory(team=team).user
    p100 = GpuTypeFactory(slug="p100")
    QuotaFactory(team=team, gpu_type=p100, max_gpus=QUOTA)
    for node in NODES:
        GpuNode.objects.create(name=node, gpu_type=p100, gpus_capacity=4, gpus_allocatable=4, ready=True,
                               last_seen_at=timezone.now())  # fmt: skip
    cluster = Cluster(outside=dict(zip(NODES, outside, strict=True)))
    now = timezone.now()

    def step(now: datetime) -> None:
        quota_admit(team_id=team.id, gpu_type_id=p100.id)
        for workload in Workload.objects.filter(state=State.SUBMITTING):  # the worker: objects made
            transition(workload, State.PENDING, reason="Created", submitted_at=now,
                       k8s_name=names.attempt_name(workload.name, workload.uid, workload.attempt))  # fmt: skip
        schedule(cluster, now)
        for workload in Workload.objects.filter(state__in=(State.PENDING, State.RUNNING)).select_related("team"):
            sync_gang(workload, [], pods_of(cluster, workload, now))
        release_overdue(now)
        for workload in Workload.objects.filter(state__in=State.final()):  # the delete task, once ended
            if any(uid == workload.uid for uid, _, _ in cluster.ranks):
                workload_delete_objects(workload)
        forget_deleted(cluster, fake_kube)
        check(cluster, now)

    for event in story:
        if event[0] == "arrive":
            _, nodes, per_node = event
            try:
                made = workload_submit(team=team, owner=owner, spec={
                    "image": "docker.io/x:1", "gpu_type": "p100", "gpu_count": per_node, "nodes": nodes,
                    "command": ["python", "train.py"]})  # fmt: skip
            except SubmissionInvalid:
                continue  # more than the quota at once: refused, nothing stored
            cluster.per_node[made.uid] = per_node
        elif event[0] == "tick":
            now += timedelta(seconds=event[1])
        elif event[0] == "cancel":
            active = list(Workload.objects.exclude(state__in=State.final()).order_by("id"))
            if active:
                workload_cancel(workload=active[event[1] % len(active)], by=owner)
        elif event[0] == "lose_node":
            node = NODES[event[1]]
            cluster.alive.discard(node)
            for rank in cluster.ranks.values():
                rank.lost = rank.lost or rank.node == node
        else:
            cluster.outside[NODES[event[1]]] = 0
        step(now)


def schedule(cluster: Cluster, now: datetime) -> None:
    """Place every pending rank of the portal's current attempts where the scheduler would."""
    for workload in Workload.objects.filter(state=State.PENDING, nodes__gt=1):
        for rank in range(workload.nodes):
            key = (workload.uid, workload.attempt, rank)
            if key in cluster.ranks:
                continue
            taken = {r.node for (uid, attempt, _), r in cluster.ranks.items() if (uid, attempt) == key[:2]}
            room = [
                n for n in NODES if n in cluster.alive and n not in taken and cluster.free(n) >= workload.gpus_per_node
            ]
            if room:
                cluster.ranks[key] = Rank(room[0], now)


def pods_of(cluster: Cluster, workload: Workload, now: datetime) -> list[dict]:
    """The pods of the workload's current attempt, as the API server would list them."""
    pods = []
    for rank in range(workload.nodes):
        placed = cluster.ranks.get((workload.uid, workload.attempt, rank))
        meta = {"name": f"{workload.uid}-{workload.attempt}-r{rank}", "namespace": workload.namespace,
                "uid": f"pod-{workload.uid}-{workload.attempt}-{rank}", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {names.LABEL_GANG: names.gang_label(workload.uid, workload.attempt),
                           names.LABEL_RANK: str(rank), names.LABEL_WORKLOAD: workload.uid}}  # fmt: skip
        if placed is None:
            status = {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no room"}]}  # fmt: skip
            pods.append({"metadata": meta, "spec": {}, "status": status})
        elif placed.lost:
            status = {"phase": "Failed", "reason": "NodeLost", "message": f"{placed.node} was lost."}
            pods.append({"metadata": meta, "spec": {"nodeName": placed.node}, "status": status})
        else:
            started = placed.since.isoformat().replace("+00:00", "Z")
            status = {
                "phase": "Running",
                "containerStatuses": [{"name": "main", "state": {"running": {"startedAt": started}}}],
            }
            pods.append({"metadata": meta, "spec": {"nodeName": placed.node}, "status": status})
    return pods


def forget_deleted(cluster: Cluster, fake_kube) -> None:
    """A rank's GPUs go back only when the portal deleted its Job."""
    deleted = {call[2] for call in fake_kube.calls if call[0] == "delete_namespaced_job"}
    names_of = {
        key: names.rank_name(w.name, w.uid, key[1], key[2])
        for w in Workload.objects.filter(uid__in={k[0] for k in cluster.ranks})
        for key in cluster.ranks
        if key[0] == w.uid
    }
    for key, name in names_of.items():
        if name in deleted:
            del cluster.ranks[key]


def check(cluster: Cluster, now: datetime) -> None:
    held = sum(w.gpu_count for w in Workload.objects.filter(state__in=State.holding()))
    assert held <= QUOTA, f"{held} GPUs held over a quota of {QUOTA}"
    by_attempt: dict[tuple[str, int], list[Rank]] = {}
    for (uid, attempt, _), rank in cluster.ranks.items():
        by_attempt.setdefault((uid, attempt), []).append(rank)
    for (uid, attempt), placed in by_attempt.items():
        workload = Workload.objects.get(uid=uid)
        whole = len(placed) == workload.nodes and not any(r.lost for r in placed)
        if whole and workload.attempt == attempt and workload.state in State.holding():
            continue
        # Part of a gang, or a gang the portal let go of: only inside its start window, and only while
        # the portal still counts it against the quota.
        assert workload.attempt == attempt, f"{uid}: attempt {attempt} still holds GPUs after it was released"
        assert workload.state in State.holding(), f"{uid} holds GPUs while {workload.state}"
        assert workload.submitted_at is not None
        assert now - workload.submitted_at <= timedelta(seconds=WINDOW), (
            f"{uid}: {len(placed)} of {workload.nodes} ranks held {now - workload.submitted_at} after its objects"
        )
