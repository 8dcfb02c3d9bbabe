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


# A pod and its Job as a v1.3x API server sends them in a watch event, field for field (the kubelet's status
# with its null probe times, the managers' field sets, the Job's template and counts): what the typed reading
# skips, it must skip without changing what is kept.
REAL_POD = b"""{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"train-w1-0-x7k2p",
"generateName":"train-w1-0-","namespace":"gp-vision","uid":"5b0d6c1e-3f0a-4a51-9f9e-0a6c2f7b9d11",
"resourceVersion":"48213","creationTimestamp":"2026-01-01T00:00:00Z","labels":{"app.kubernetes.io/managed-by":
"gpuportal","gpuportal.dev/instance":"unit","gpuportal.dev/workload":"w1","batch.kubernetes.io/controller-uid":
"0f3e","batch.kubernetes.io/job-name":"train-w1-0","controller-uid":"0f3e","job-name":"train-w1-0"},
"annotations":{"gpuportal.dev/master-addr":"10.0.0.1"},"ownerReferences":[{"apiVersion":"batch/v1","kind":"Job",
"name":"train-w1-0","uid":"0f3e","controller":true,"blockOwnerDeletion":true}],"finalizers":
["batch.kubernetes.io/job-tracking"],"managedFields":[{"manager":"kube-controller-manager","operation":"Update",
"apiVersion":"v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:finalizers":
{".":{},"v:\\"batch.kubernetes.io/job-tracking\\"":{}},"f:labels":{".":{},"f:job-name":{}},"f:ownerReferences":
{".":{},"k:{\\"uid\\":\\"0f3e\\"}":{}}},"f:spec":{"f:containers":{"k:{\\"name\\":\\"main\\"}":{".":{},"f:image":{},
"f:name":{},"f:resources":{".":{},"f:limits":{".":{},"f:nvidia.com/gpu":{}}}}}}}},{"manager":"kubelet",
"operation":"Update","apiVersion":"v1","time":"2026-01-01T00:00:05Z","fieldsType":"FieldsV1","fieldsV1":
{"f:status":{"f:conditions":{"k:{\\"type\\":\\"Ready\\"}":{".":{},"f:lastProbeTime":{},"f:lastTransitionTime":{},
"f:status":{},"f:type":{}}},"f:containerStatuses":{},"f:phase":{},"f:podIP":{},"f:podIPs":{".":{},
"k:{\\"ip\\":\\"10.1.0.2\\"}":{".":{},"f:ip":{}}}}},"subresource":"status"}]},"spec":{"volumes":[{"name":"dshm",
"emptyDir":{"medium":"Memory","sizeLimit":"1Gi"}},{"name":"kube-api-access-abcde","projected":{"sources":
[{"serviceAccountToken":{"expirationSeconds":3607,"path":"token"}}],"defaultMode":420}}],"containers":[{"name":
"main","image":"x:1","command":["python","train.py"],"env":[{"name":"WORLD_SIZE","value":"1"}],"resources":
{"limits":{"nvidia.com/gpu":"1"},"requests":{"nvidia.com/gpu":"1"}},"volumeMounts":[{"name":"dshm","mountPath":
"/dev/shm"}],"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":
"IfNotPresent"}],"restartPolicy":"Never","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst",
"serviceAccountName":"default","nodeName":"gpu-1","securityContext":{},"schedulerName":"default-scheduler",
"tolerations":[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"},{"key":
"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}],"priority":0,
"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"},"status":{"phase":"Running","conditions":
[{"type":"PodReadyToStartContainers","status":"True","lastProbeTime":null,"lastTransitionTime":
"2026-01-01T00:00:04Z"},{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":
"2026-01-01T00:00:00Z"},{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":
"2026-01-01T00:00:05Z"},{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":
"2026-01-01T00:00:00Z"}],"hostIP":"172.18.0.3","hostIPs":[{"ip":"172.18.0.3"}],"podIP":"10.1.0.2","podIPs":
[{"ip":"10.1.0.2"}],"startTime":"2026-01-01T00:00:00Z","containerStatuses":[{"name":"main","state":{"running":
{"startedAt":"2026-01-01T00:00:05Z"}},"lastState":{},"ready":true,"restartCount":0,"image":"docker.io/library/x:1",
"imageID":"docker.io/library/x@sha256:0123","containerID":"containerd://abc","started":true}],"qosClass":
"BestEffort"}}}""".replace(b"\n", b"")

REAL_JOB = b"""{"type":"MODIFIED","object":{"kind":"Job","apiVersion":"batch/v1","metadata":{"name":"train-w1-0",
"namespace":"gp-vision","uid":"0f3e","resourceVersion":"48290","generation":1,"creationTimestamp":
"2026-01-01T00:00:00Z","labels":{"app.kubernetes.io/managed-by":"gpuportal","gpuportal.dev/instance":"unit",
"gpuportal.dev/workload":"w1"},"annotations":{"batch.kubernetes.io/job-tracking":""},"managedFields":[{"manager":
"gpuportal","operation":"Update","apiVersion":"batch/v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1",
"fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:gpuportal.dev/workload":{}}},"f:spec":{"f:activeDeadlineSeconds":
{},"f:backoffLimit":{}}}},{"manager":"kube-controller-manager","operation":"Update","apiVersion":"batch/v1","time":
"2026-01-01T01:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:completionTime":{},"f:conditions":{},
"f:startTime":{},"f:succeeded":{},"f:terminating":{},"f:uncountedTerminatedPods":{}}},"subresource":"status"}]},
"spec":{"parallelism":1,"completions":1,"activeDeadlineSeconds":3600,"backoffLimit":0,"selector":{"matchLabels":
{"batch.kubernetes.io/controller-uid":"0f3e"}},"manualSelector":false,"template":{"metadata":{"creationTimestamp":
null,"labels":{"gpuportal.dev/workload":"w1","job-name":"train-w1-0"}},"spec":{"containers":[{"name":"main",
"image":"x:1","resources":{"limits":{"nvidia.com/gpu":"1"}}}],"restartPolicy":"Never"}},"completionMode":
"NonIndexed","suspend":false,"podReplacementPolicy":"TerminatingOrFailed"},"status":{"conditions":[{"type":
"SuccessCriteriaMet","status":"True","lastProbeTime":"2026-01-01T01:00:00Z","lastTransitionTime":
"2026-01-01T01:00:00Z","reason":"CompletionsReached","message":"Reached expected number of succeeded pods"},
{"type":"Complete","status":"True","lastProbeTime":"2026-01-01T01:00:00Z","lastTransitionTime":
"2026-01-01T01:00:00Z","reason":"CompletionsReached","message":"Reached expected number of succeeded pods"}],
"startTime":"2026-01-01T00:00:00Z","completionTime":"2026-01-01T01:00:00Z","succeeded":1,"terminating":0,
"uncountedTerminatedPods":{},"ready":0}}}""".replace(b"\n", b"")


def _lines() -> list[tuple[str, bytes]]:
    """Watch lines of every kind and event type the tracker sees."""
    lines = [("Pod", REAL_POD), ("Job", REAL_JOB), ("Pod", REAL_POD.replace(b"MODIFIED", b"DELETED", 1))]
    for event in ("ADDED", "MODIFIED", "DELETED"):
        lines += [("Pod", as_sent("Pod", pod, event)) for pod in PODS.values()]
        lines += [("Job", as_sent("Job", job, event)) for job in JOBS.values() if job]
    bare = {"metadata": {"name": "p", "labels": _labels()}}  # no spec, no status: each is kept empty
    lines += [("Pod", json.dumps({"type": "ADDED", "object": bare}).encode()), ("Job", json.dumps(
        {"type": "ADDED", "object": {**bare, "status": {"conditions": None, "startTime": None}}}).encode())]  # fmt: skip
    lines += [(kind, b'{"type":"BOOKMARK","object":{"kind":"%s","metadata":{"resourceVersion":"9"}}}' % kind.encode())
              for kind in ("Pod", "Job")]  # fmt: skip
    return lines


def _read_as_before(kind: str, line: bytes) -> tuple:
    whole = watch_events.decode_event(line)
    obj = whole["object"]
    return whole["type"], watch_events.essentials(kind, obj), obj["metadata"].get("resourceVersion")


@pytest.mark.parametrize(("kind", "line"), _lines())
def test_a_line_read_typed_keeps_what_the_whole_decode_kept(kind, line):
    event, kept, version, is_kept = watch_events.read_event(kind, line)
    assert is_kept
    assert (event, kept, version) == _read_as_before(kind, line)
    assert watch_events.essentials(kind, kept) == kept  # nothing left to pick
    view, before = watch_loop.ClusterView(), watch_loop.ClusterView()
    assert view.put(kind, kept, kept=True) == before.put(kind, watch_events.decode_event(line)["object"])
    assert (view.jobs, view.pods) == (before.jobs, before.pods)


def test_the_real_pod_and_job_read_typed_say_what_they_say_whole():
    _, pod, _, _ = watch_events.read_event("Pod", REAL_POD)
    _, job, _, _ = watch_events.read_event("Job", REAL_JOB)
    whole_pod, whole_job = json.loads(REAL_POD)["object"], json.loads(REAL_JOB)["object"]
    assert observe(kind=Kind.BATCH, job=job, pods=[pod]) == observe(kind=Kind.BATCH, job=whole_job, pods=[whole_pod])
    assert pod["status"]["containerStatuses"] == [{"name": "main", "image": "docker.io/library/x:1",
                                                   "state": {"running": {"startedAt": "2026-01-01T00:00:05Z"}},
                                                   "lastState": {}}]  # fmt: skip
    assert "lastProbeTime" not in job["status"]["conditions"][1]
    assert job["spec"] == {"activeDeadlineSeconds": 3600}


@pytest.mark.parametrize(
    ("kind", "line"),
    [
        # An ERROR event's object is a Status, whose `status` is a string.
        ("Pod", b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",'
                b'"message":"too old resource version: 1 (48213)","reason":"Expired","code":410}}'),
        # Fields of another type than the API's: the whole decode and `essentials` decide, as before.
        ("Pod", json.dumps({"type": "MODIFIED", "object": {**PODS["running"], "status": []}}).encode()),
        ("Pod", json.dumps({"type": "MODIFIED", "object": {"metadata": {"labels": _labels()},
                                                           "status": {"conditions": [None]}}}).encode()),
        ("Job", json.dumps({"type": "MODIFIED", "object": {**JOBS["complete"], "spec": "x"}}).encode()),
    ],
)  # fmt: skip
def test_a_line_the_types_do_not_fit_comes_whole(kind, line):
    event, obj, version, is_kept = watch_events.read_event(kind, line)
    whole = watch_events.decode_event(line)
    assert (event, obj, is_kept) == (whole["type"], whole["object"], False)
    assert version == (whole["object"].get("metadata") or {}).get("resourceVersion")


def test_a_list_read_typed_keeps_what_the_whole_decode_kept():
    pods = [json.loads(REAL_POD)["object"], *(json.loads(as_sent("Pod", pod))["object"] for pod in PODS.values())]
    body = json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "77"}, "items": pods}).encode()
    items, version, is_kept = watch_events.read_list("Pod", body)
    assert (version, is_kept) == ("77", True)
    assert items == [watch_events.essentials("Pod", pod) for pod in pods]
    empty = json.dumps({"kind": "JobList", "metadata": {"resourceVersion": "78"}, "items": None}).encode()
    assert watch_events.read_list("Job", empty) == ([], "78", True)
    odd = json.dumps({"metadata": {"resourceVersion": "79"}, "items": [{"metadata": [], "spec": 1}]}).encode()
    assert watch_events.read_list("Job", odd) == ([{"metadata": [], "spec": 1}], "79", False)
