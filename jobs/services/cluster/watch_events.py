"""What the tracker keeps of a watched Job or pod, and how it reads a watch stream's line cheaply.

The tracker is the one watcher of every workload's objects, so what it spends per watch event is paid once
per event by that one process. Two things made most of it:
- decoding whole objects: a pod or Job as the API server sends it carries `metadata.managedFields` (which
  manager set which field, a nested map per manager, half of a pod's JSON or more) that nothing here reads;
  `decode_event` leaves that list out before decoding (falling back to a plain decode of the whole line
  should the cut not leave valid JSON), and decodes with orjson (about half json's CPU on these lines);
- events that change nothing the portal records (a Job's active or ready counts, a pod's finalizers, a
  status resend): the view keeps only the fields the tracker reads (`essentials`), and an event whose
  essentials equal those already held marks nothing for the next burst.
`essentials` keeps every field that status_mapping, gang_tracking and watch_loop read; a new reader of
another field adds it here (tests/engine/test_watch_events_unit.py holds them to it).

The watches and the list read a line straight into those essentials (`read_event`, `read_list`): msgspec
decodes it into types that declare only the fields kept (`_Pod`, `_Job`), skipping every other field of the
line in C without building it (managedFields, the pod's spec, the Job's template, status details: most of
an object), and turns them into the same dicts `essentials` makes of the whole object. A line the types do
not fit (an ERROR event's Status, a field of another type than the API's) is decoded whole and picked as
before, so what is kept is the same either way; the types name a new reader's field too.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import orjson

_MANAGED_FIELDS = b'"managedFields":['


def decode_event(line: bytes) -> dict[str, Any]:
    """One watch event (`{"type": ..., "object": ...}`), without its object's metadata.managedFields.

    The list holds objects of objects (field paths), never a list, so it ends at the first `}]` after its
    start; a key such as `"managedFields":[` cannot occur inside a JSON string unescaped. Should the line be
    shaped otherwise, the cut leaves invalid JSON and the whole line is decoded instead."""
    start = line.find(_MANAGED_FIELDS)
    if start >= 0:
        end = line.find(b"}]", start)
        if end >= 0:
            try:
                return orjson.loads(line[: start + len(_MANAGED_FIELDS)] + line[end + 1 :])
            except ValueError:  # orjson.JSONDecodeError is one
                pass
    return orjson.loads(line)


def _pick(source: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any]:
    source = source or {}
    return {key: source[key] for key in keys if source.get(key) is not None}


_META = ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp", "deletionTimestamp")
_CONDITION = ("type", "status", "reason", "message", "lastTransitionTime")
_CONTAINER_STATUS = ("name", "image", "state", "lastState")


def _conditions(status: dict[str, Any]) -> list[dict[str, Any]]:
    # lastProbeTime and lastUpdateTime are left out: they move without the condition changing.
    return [_pick(condition, _CONDITION) for condition in status.get("conditions") or []]


def _pod(pod: dict[str, Any]) -> dict[str, Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    kept_status = _pick(status, ("phase", "reason", "message", "podIP"))
    kept_status["conditions"] = _conditions(status)
    kept_status["containerStatuses"] = [_pick(c, _CONTAINER_STATUS) for c in status.get("containerStatuses") or []]
    return {
        "metadata": _pick(pod.get("metadata"), _META),
        "spec": {
            **_pick(spec, ("nodeName",)),
            "containers": [_pick(c, ("name", "image")) for c in spec.get("containers") or []],
        },
        "status": kept_status,
    }


def _job(job: dict[str, Any]) -> dict[str, Any]:
    status = job.get("status") or {}
    kept_status = _pick(status, ("startTime", "completionTime"))
    kept_status["conditions"] = _conditions(status)
    return {
        "metadata": _pick(job.get("metadata"), _META),
        "spec": _pick(job.get("spec"), ("activeDeadlineSeconds",)),
        "status": kept_status,
    }


def essentials(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The fields of a Job or pod that the tracker reads, in the object's own shape (pure)."""
    return _job(obj) if kind == "Job" else _pod(obj)


# The typed reading. Every kept leaf is `Any` (its value as JSON gives it, as the whole decode does) with None
# for a default: `omit_defaults` then leaves out a field absent or null, as `_pick` does. Each Struct names
# only what `essentials` keeps (and the metadata the version the watch resumes from); the rest is skipped.


class _Meta(msgspec.Struct, omit_defaults=True):
    name: Any = None
    namespace: Any = None
    uid: Any = None
    labels: Any = None
    annotations: Any = None
    creationTimestamp: Any = None
    deletionTimestamp: Any = None
    resourceVersion: Any = None  # for the watch only: popped before the object is kept


class _Condition(msgspec.Struct, omit_defaults=True):
    type: Any = None
    status: Any = None
    reason: Any = None
    message: Any = None
    lastTransitionTime: Any = None


class _Container(msgspec.Struct, omit_defaults=True):
    name: Any = None
    image: Any = None


class _ContainerStatus(msgspec.Struct, omit_defaults=True):
    name: Any = None
    image: Any = None
    state: Any = None
    lastState: Any = None


class _PodSpec(msgspec.Struct, omit_defaults=True):
    nodeName: Any = None
    containers: list[_Container] | None = None


class _PodStatus(msgspec.Struct, omit_defaults=True):
    phase: Any = None
    reason: Any = None
    message: Any = None
    podIP: Any = None
    conditions: list[_Condition] | None = None
    containerStatuses: list[_ContainerStatus] | None = None


class _Pod(msgspec.Struct, omit_defaults=True):
    metadata: _Meta | None = None
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


class _JobSpec(msgspec.Struct, omit_defaults=True):
    activeDeadlineSeconds: Any = None


class _JobStatus(msgspec.Struct, omit_defaults=True):
    startTime: Any = None
    completionTime: Any = None
    conditions: list[_Condition] | None = None


class _Job(msgspec.Struct, omit_defaults=True):
    metadata: _Meta | None = None
    spec: _JobSpec | None = None
    status: _JobStatus | None = None


class _PodEvent(msgspec.Struct, omit_defaults=True):
    type: Any = None
    object: _Pod | None = None


class _JobEvent(msgspec.Struct, omit_defaults=True):
    type: Any = None
    object: _Job | None = None


class _ListMeta(msgspec.Struct):
    resourceVersion: Any  # required, as the list's reader requires it


class _PodList(msgspec.Struct):
    metadata: _ListMeta
    items: list[_Pod] | None = None


class _JobList(msgspec.Struct):
    metadata: _ListMeta
    items: list[_Job] | None = None


_EVENT_DECODERS = {"Job": msgspec.json.Decoder(_JobEvent), "Pod": msgspec.json.Decoder(_PodEvent)}
_LIST_DECODERS = {"Job": msgspec.json.Decoder(_JobList), "Pod": msgspec.json.Decoder(_PodList)}
_to_builtins = msgspec.to_builtins


def _shaped(kind: str, obj: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """A typed object's builtins in `essentials`' shape (its always-present parts added), and its version."""
    meta = obj.get("metadata")
    if meta is None:
        obj["metadata"] = meta = {}
    version = meta.pop("resourceVersion", None)
    status = obj.get("status")
    if status is None:
        obj["status"] = status = {}
    if "conditions" not in status:
        status["conditions"] = []
    if kind == "Job":
        if "spec" not in obj:
            obj["spec"] = {}
    else:
        spec = obj.get("spec")
        if spec is None:
            obj["spec"] = spec = {}
        if "containers" not in spec:
            spec["containers"] = []
        if "containerStatuses" not in status:
            status["containerStatuses"] = []
    return obj, version


def read_event(kind: str, line: bytes) -> tuple[Any, Any, Any, bool]:
    """One watch event: its type, its object, that object's resourceVersion, and whether the object is already
    its essentials (a Job's or a pod's, as `kind` says). A line the types do not fit comes whole, as
    `decode_event` reads it (an ERROR event's Status; anything else is picked by `ClusterView.put`)."""
    # The whole line: msgspec skips managedFields faster than `decode_event`'s cut finds its end (a `}]`
    # among a thousand `}`).
    try:
        event = _to_builtins(_EVENT_DECODERS[kind].decode(line))
    except (msgspec.ValidationError, msgspec.DecodeError):
        whole = decode_event(line)
        version = ((whole.get("object") or {}).get("metadata") or {}).get("resourceVersion")
        return whole.get("type"), whole.get("object"), version, False
    kept, version = _shaped(kind, event.get("object") or {})
    return event.get("type"), kept, version, True


def read_list(kind: str, body: bytes) -> tuple[list[dict[str, Any]], Any, bool]:
    """A list response's objects, its resourceVersion, and whether the objects are already their essentials
    (else whole, as `json.loads` reads them)."""
    try:
        listed = _to_builtins(_LIST_DECODERS[kind].decode(body))
    except (msgspec.ValidationError, msgspec.DecodeError):
        whole = json.loads(body)
        return whole.get("items") or [], whole["metadata"]["resourceVersion"], False
    return [_shaped(kind, obj)[0] for obj in listed["items"] or []], listed["metadata"]["resourceVersion"], True
