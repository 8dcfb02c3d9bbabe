"""The fields of a submission, described once: each limit the validators enforce, and that the launch
form and the API's schema (api/serializers.py) show, is written here and nowhere else.

`field_limits(name)` gives a field's limits as keyword arguments that Django form fields and DRF
serializer fields both take (max_length, min_value, max_value, choices); `item_limits(name)` those of a
list's items. A test compares the form's and the serializer's fields with this description.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spec_rules import MAX_ENV_NAME, MAX_NAME, MAX_PRIORITY, MIN_PRIORITY

FIELDS = ("name", "kind", "image", "catalog_image", "gpu_type", "gpu_count", "command", "args", "env",
          "port", "time_limit_seconds", "priority", "restartable", "secrets", "datasets", "cpu_millicores", "memory_mib",
          "retry_limit", "retryable_exit_codes", "checkpoint_workspace",
          "nodes", "topology")  # fmt: skip

KIND_CHOICES = (("batch", "Batch job"), ("service", "Service"))
# A gang job's ranks and whether they must share one value of the admin's topology label (a zone, a rack).
MAX_NODES = 64
TOPOLOGY_CHOICES = (("", "Anywhere"), ("preferred", "Same group if possible"), ("required", "Same group only"))

MAX_IMAGE = 255
MAX_LIST_ITEMS = 256  # command, args
MAX_ITEM_CHARS = 4096
MAX_COMMAND_TOTAL = 32 * 1024
MAX_ENV_VARS = 100
# A real workload's environment is a few settings and paths, well under a kilobyte; these caps leave
# ample room and keep pod specs (stored in etcd, each object at most 1.5 MB) small.
MAX_ENV_VALUE = 4 * 1024
MAX_ENV_TOTAL = 16 * 1024
MIN_PORT, MAX_PORT = 1, 65535
MAX_SECRET_REFS = 32
MAX_DATASETS = 16
MAX_RETRY_LIMIT = 20
MAX_RETRYABLE_EXIT_CODES = 16
CHECKPOINT_WORKSPACES = (("home", "My home"), ("team", "The team's shared space"))


@dataclass(frozen=True)
class FieldLimits:
    """What a field may hold, as far as a form or a schema can say it (the validators check the rest)."""

    max_length: int | None = None  # characters; for a list: items
    min_value: int | None = None
    max_value: int | None = None
    choices: tuple[tuple[str, str], ...] | None = None
    item_max_length: int | None = None  # a list of strings: characters per item

    def kwargs(self) -> dict[str, Any]:
        """The limits as Django form / DRF serializer field keyword arguments (only those that are set)."""
        pairs = {
            "max_length": self.max_length,
            "min_value": self.min_value,
            "max_value": self.max_value,
            "choices": list(self.choices) if self.choices is not None else None,
        }
        return {key: value for key, value in pairs.items() if value is not None}


SPEC_LIMITS: dict[str, FieldLimits] = {
    "name": FieldLimits(max_length=MAX_NAME),
    "kind": FieldLimits(choices=KIND_CHOICES),
    "image": FieldLimits(max_length=MAX_IMAGE),
    "gpu_count": FieldLimits(min_value=1),
    "nodes": FieldLimits(min_value=1, max_value=MAX_NODES),
    "topology": FieldLimits(choices=TOPOLOGY_CHOICES),
    "command": FieldLimits(max_length=MAX_LIST_ITEMS, item_max_length=MAX_ITEM_CHARS),
    "args": FieldLimits(max_length=MAX_LIST_ITEMS, item_max_length=MAX_ITEM_CHARS),
    "env": FieldLimits(max_length=MAX_ENV_VARS),
    "env.name": FieldLimits(max_length=MAX_ENV_NAME),
    "env.value": FieldLimits(max_length=MAX_ENV_VALUE),
    "secrets": FieldLimits(max_length=MAX_SECRET_REFS),
    "datasets": FieldLimits(max_length=MAX_DATASETS),
    "port": FieldLimits(min_value=MIN_PORT, max_value=MAX_PORT),
    "priority": FieldLimits(min_value=MIN_PRIORITY, max_value=MAX_PRIORITY),
    # The pod's size: at least one unit; the GPU type's limits apply on top (validation).
    "cpu_millicores": FieldLimits(min_value=1),
    "memory_mib": FieldLimits(min_value=1),
    # Automatic retry and the checkpoint directory (jobs/services/retry.py, jobs/services/checkpoints).
    "retry_limit": FieldLimits(min_value=0, max_value=MAX_RETRY_LIMIT),
    "retryable_exit_codes": FieldLimits(max_length=MAX_RETRYABLE_EXIT_CODES),
    "checkpoint_workspace": FieldLimits(choices=CHECKPOINT_WORKSPACES),
}


def field_limits(name: str) -> dict[str, Any]:
    return SPEC_LIMITS[name].kwargs()


def item_limits(name: str) -> dict[str, Any]:
    """A list field's per-item limits (command and args: characters per argument)."""
    return {"max_length": SPEC_LIMITS[name].item_max_length}


def time_limit_limits(min_seconds: int, max_seconds: int) -> FieldLimits:
    """The time limit's bounds come from settings (PORTAL_MIN_TIME_LIMIT, PORTAL_MAX_TIME_LIMIT)."""
    return FieldLimits(min_value=min_seconds, max_value=max_seconds)
