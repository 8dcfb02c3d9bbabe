"""What the tracker keeps of a watched object (jobs.services.cluster.watch_events): the decode without
managedFields, the essentials every reader needs, and the events that change none of them (pure; no
database)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from benchmarks.profile_tracker import as_sent
from jobs.kube import names
from jobs.models import Kind
from jobs.services.cluster import watch_events, watch_loop
from jobs.services.cluster.gang_tracking import _newest, attempt_object_name, rank_objects
from jobs.services.cluster.status_mapping import observe

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z", "2026-01-01T01:00:00Z"


@pytest.fixture(autouse=True)
def _instance(settings):
    settings.PORTAL_INSTANCE = "unit"


def _labels(**more: str) -> dict[str, str]:
    return {
        names.LABEL_MANAGED_BY: names.MANAGED_BY,
        names.LABEL_INSTANCE: names.label_value("unit"),
        names.LABEL_WORKLOAD: "w1",
        "job-name": "train-w1-0",
        **more,
    }


def _pod(status: dict, *, deleting: bool = False, name: str = "train-w1-0-abcde", **labels: str) -> dict:
    meta = {"name": name, "namespace": "gp-vision", "uid": f"uid-{name}", "labels": _labels(**labels),
            "creationTimestamp": T0, "annotations": {names.ANNOTATION_MASTER_ADDR: "10.0.0.1"}}  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = T2
    return {"metadata": meta, "spec": {"nodeName": "gpu-1", "containers": [{"name": "main", "image": "x:1"}]},
            "status": status}  # fmt: skip


def _main(state: dict, last: dict | None = None) -> list[dict]:
    return [{"name": "main", "image": "x:1", "state": state, "lastState": last or {}, "restartCount": 0}]


PODS = {
    "running": _pod({"phase": "Running", "podIP": "10.1.0.2", "containerStatuses": _main({"running": {"startedAt": T1}})}),
    "pull": _pod({"phase": "Pending", "containerStatuses": _main({"waiting": {"reason": "ErrImagePull", "message": "nope"}})}),
    "unschedulable": _pod({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                           "reason": "Unschedulable", "message": "0/2 nodes", "lastProbeTime": None}]}),
    "exited": _pod({"phase": "Failed", "containerStatuses": _main({"terminated": {"exitCode": 3, "reason": "Error",
                    "startedAt": T1, "finishedAt": T2}})}),
    "oom": _pod({"phase": "Running", "containerStatuses": _main({"waiting": {"reason": "CrashLoopBackOff"}},
                 {"terminated": {"exitCode": 137, "reason": "OOMKilled", "startedAt": T1, "finishedAt": T2}})}),
    "evicted": _pod({"phase": "Failed", "reason": "Evicted", "message": "memory pressure",
                     "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": T2}]}),
    "disrupted": _pod({"phase": "Running", "containerStatuses": _main({"running": {"startedAt": T1}}),
                       "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                                       "message": "node lost", "lastTransitionTime": T2}]}, deleting=True),
    "service starting": _pod({"phase": "Running", "containerStatuses": _main({"running": {"startedAt": T1}}),
                              "conditions": [{"type": "Ready", "status": "False"}]}),
}  # fmt: skip

JOBS = {
    "none": None,
    "complete": {"metadata": {"name": "train-w1-0", "namespace": "gp-vision", "labels": _labels()},
                 "status": {"conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": T2}],
                            "completionTime": T2, "startTime": T0, "succeeded": 1}},
    "deadline": {"metadata": {"name": "train-w1-0", "namespace": "gp-vision", "labels": _labels()},
                 "spec": {"activeDeadlineSeconds": 3600, "backoffLimit": 0},
                 "status": {"startTime": T0, "conditions": [{"type": "Failed", "status": "True",
                            "reason": "BackoffLimitExceeded", "lastTransitionTime": T2}]}},
}  # fmt: skip


@pytest.mark.parametrize("pod_name", [*PODS, None])
@pytest.mark.parametrize("job_name", list(JOBS))
@pytest.mark.parametrize("kind", [Kind.BATCH, Kind.SERVICE])
def test_what_is_kept_says_what_the_whole_object_says(kind, job_name, pod_name):
    job, pods = JOBS[job_name], [PODS[pod_name]] if pod_name else []
    kept_job = watch_events.essentials("Job", job) if job else None
    kept_pods = [watch_events.essentials("Pod", pod) for pod in pods]
    assert observe(kind=kind, job=kept_job, pods=kept_pods) == observe(kind=kind, job=job, pods=pods)


def test_what_is_kept_serves_the_gang_and_the_reaper():
    rank = {names.LABEL_GANG: "g1", names.LABEL_RANK: "1"}
    pods = [_pod(PODS["running"]["status"], name=f"train-w1-0-r{i}", **rank) for i in range(2)]
    pods[1]["metadata"]["deletionTimestamp"] = T2
    kept = [watch_events.essentials("Pod", pod) for pod in pods]
    job = {**JOBS["complete"], "metadata": {**JOBS["complete"]["metadata"], "labels": _labels(**rank)}}
    kept_job = watch_events.essentials("Job", job)

    def named(by_rank):
        return {rank: ((j or {}).get("metadata", {}).get("name"), [p["metadata"]["name"] for p in ps])
                for rank, (j, ps) in by_rank.items()}  # fmt: skip

    assert named(rank_objects([kept_job], kept, gang="g1")) == named(rank_objects([job], pods, gang="g1")) != {}
    assert _newest(kept) == watch_events.essentials("Pod", _newest(pods))
    assert kept[0]["status"]["podIP"] == "10.1.0.2"
    assert kept[0]["metadata"]["annotations"] == {names.ANNOTATION_MASTER_ADDR: "10.0.0.1"}
    workload = SimpleNamespace(name="train", uid="w1", attempt=1)
    assert attempt_object_name(workload, kept[0]["metadata"]["labels"]) == attempt_object_name(
        workload, pods[0]["metadata"]["labels"]
    )
    assert [watch_loop.still_runs(p) for p in kept] == [watch_loop.still_runs(p) for p in pods] == [True, False]


def test_a_line_decodes_to_the_object_less_its_managed_fields():
    line = as_sent("Pod", PODS["running"])
    whole = json.loads(line)
    decoded = watch_events.decode_event(line)
    assert whole["object"]["metadata"]["managedFields"]
    assert decoded["object"]["metadata"]["managedFields"] == []
    whole["object"]["metadata"]["managedFields"] = []
    assert decoded == whole


def test_a_line_the_cut_does_not_fit_is_decoded_whole():
    odd = {"metadata": {"name": "p", "managedFields": [{"manager": "a}]b", "fieldsV1": {}}], "labels": {}}}
    line = json.dumps({"type": "MODIFIED", "object": odd}).replace(" ", "").encode()
    assert watch_events.decode_event(line) == {"type": "MODIFIED", "object": odd}
    plain = json.dumps({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}}).encode()
    assert watch_events.decode_event(plain) == json.loads(plain)


def test_an_event_that_changes_nothing_the_tracker_reads_marks_nothing():
    view = watch_loop.ClusterView()
    running = PODS["running"]
    assert view.put("Pod", running, if_changed=True) == "w1"
    resent = json.loads(json.dumps(running))
    resent["metadata"].update(resourceVersion="8", finalizers=[], managedFields=[{"manager": "kubelet"}])
    resent["status"]["containerStatuses"][0]["restartCount"] = 0
    assert view.put("Pod", resent, if_changed=True) is None
    assert view.put("Pod", resent) == "w1"  # a relist or a direct put still names its workload
    ended = json.loads(json.dumps(PODS["exited"]))
    assert view.put("Pod", ended, if_changed=True) == "w1"
    job = JOBS["complete"]
    assert view.put("Job", job, if_changed=True) == "w1"
    counted = {**job, "status": {**job["status"], "succeeded": 1, "uncountedTerminatedPods": {}}}
    assert view.put("Job", counted, if_changed=True) is None
    assert view.put("Pod", ended, deleted=True, if_changed=True) == "w1"
    assert not view.pods["w1"]
