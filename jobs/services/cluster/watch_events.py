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
"""

from __future__ import annotations

from typing import Any

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
