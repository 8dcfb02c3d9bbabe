"""The submission rules a client can check before it sends anything, written once for every front end.

Pure and free of Django: the portal's validation (jobs.services.validation, which the launch form, the REST
API and Django admin all go through) and the `gpuportal` CLI import these same functions, so a name the
portal refuses is refused by the CLI with the same words before a request is made. It sits below every
other package (import-linter's layers in pyproject.toml) so that the CLI, which may not import the
domain, can still use it.
"""

from __future__ import annotations

import re
from typing import Any

# --- workload names (DNS labels: they become Kubernetes object names) -----------------------------
MAX_NAME = 40
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_RULE = "Lowercase letters, digits and '-', starting with a letter and not ending with '-'."

# --- priority: set by a team's managers on the launch form, the API and CLI, and by admins in Django admin --
MIN_PRIORITY, MAX_PRIORITY = -100, 100

# --- environment variable names -------------------------------------------------------------------
MAX_ENV_NAME = 128
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# GPU visibility is the device plugin's job; letting users set these would let a pod see GPUs it was
# not given (the NVIDIA runtime honours NVIDIA_VISIBLE_DEVICES=all).
RESERVED_ENV = frozenset({"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"})
RESERVED_ENV_PREFIXES = ("GPUPORTAL_",)
# Under the portal's prefix but the submitter's to set: a sweep member's number and the sweep's size
# (`gpuportal submit --array N` and the launch page's copies set them; the portal sets nothing under these).
ARRAY_INDEX_ENV, ARRAY_SIZE_ENV = "GPUPORTAL_ARRAY_INDEX", "GPUPORTAL_ARRAY_SIZE"
SUBMITTER_ENV = frozenset({ARRAY_INDEX_ENV, ARRAY_SIZE_ENV})


def env_reserved(name: str) -> bool:
    """Whether the portal sets this variable itself, so a submission may not."""
    return name in RESERVED_ENV or (name.startswith(RESERVED_ENV_PREFIXES) and name not in SUBMITTER_ENV)


def env_name_problem(name: Any) -> str | None:
    """What is wrong with an environment variable's name (a plain variable's or a secret's), or None:
    letters, digits and '_', not starting with a digit, at most MAX_ENV_NAME characters, and not one the
    portal sets itself."""
    if not isinstance(name, str) or not ENV_NAME_RE.match(name) or len(name) > MAX_ENV_NAME:
        return f"{str(name)[:40]!r} is not a valid variable name (letters, digits, '_'; not starting with a digit)."
    if env_reserved(name):
        return f"{name} is set by the portal and cannot be overridden."
    return None


# --- gang jobs: keeping a job's nodes together ---------------------------------------------------
TOPOLOGY_NEEDS_NODES = (
    "Only a job on several nodes can keep them together: ask for 2 nodes or more, or leave topology empty."
)


def topology_problem(topology: Any, nodes: Any) -> str | None:
    """A topology (`preferred`, `required`) asked for a job of one node: it has nothing to keep together, so
    it is refused rather than silently dropped (the submitter meant several nodes and forgot to say so)."""
    if topology in (None, ""):
        return None
    if nodes is None or (isinstance(nodes, int) and nodes < 2):
        return TOPOLOGY_NEEDS_NODES
    return None


# --- sweeps: N copies of one batch job in one request -----------------------------------------------
SWEEP_AT_MOST = 500  # workloads in one request: a sweep's worth; a bigger one is sent in parts


def sweep_count_problem(copies: int) -> str | None:
    if not 1 <= copies <= SWEEP_AT_MOST:
        return f"1 to {SWEEP_AT_MOST} copies in one request (got {copies}); send the rest in another."
    return None


def sweep_name_room(copies: int) -> int:
    """How long a sweep's base name may be so that its longest member name (BASE-(copies-1)) still fits."""
    return MAX_NAME - len(f"-{copies - 1}")


def sweep_name_problem(name: str, copies: int) -> str | None:
    """A name the submitter gave a sweep of `copies`: each member is named NAME-0 .. NAME-(copies-1), so the
    name must leave room for the longest suffix. (A name the portal makes up is cut instead: `sweep_base`.)"""
    room = sweep_name_room(copies)
    if copies > 1 and len(name) > room:
        return f"With {copies} copies the name may have at most {room} characters (each gets -0, -1, …)."
    return None


def sweep_base(derived_name: str, copies: int) -> str:
    """A made-up base name (the image's) cut so that every member's name fits, never ending in '-'."""
    return derived_name[: sweep_name_room(copies)].rstrip("-") or "copy"


def sweep_member(spec: dict[str, Any], index: int, copies: int, *, base: str | None) -> dict[str, Any]:
    """Member `index` of a sweep: the spec named BASE-index (when a base is given) and told apart by
    $GPUPORTAL_ARRAY_INDEX and $GPUPORTAL_ARRAY_SIZE after its own variables."""
    member = dict(spec)
    if base is not None:
        member["name"] = f"{base}-{index}"
    member["env"] = [
        *spec.get("env", []),
        {"name": ARRAY_INDEX_ENV, "value": str(index)},
        {"name": ARRAY_SIZE_ENV, "value": str(copies)},
    ]
    return member
