"""Kubernetes names and label values derived from portal objects: valid for any input, deterministic."""

from __future__ import annotations

import hashlib
import re

MANAGED_BY = "gpuportal"
LABEL_PREFIX = "gpuportal.dev"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_INSTANCE = f"{LABEL_PREFIX}/instance"
LABEL_WORKLOAD = f"{LABEL_PREFIX}/workload"
LABEL_TEAM = f"{LABEL_PREFIX}/team"
LABEL_USER = f"{LABEL_PREFIX}/user"
LABEL_GPU_TYPE = f"{LABEL_PREFIX}/gpu-type"
LABEL_KIND = f"{LABEL_PREFIX}/kind"
LABEL_WORKSPACE = f"{LABEL_PREFIX}/workspace"
LABEL_GANG = f"{LABEL_PREFIX}/gang"  # a gang job's ranks: the workload uid and attempt ("<uid>-<attempt>")
LABEL_RANK = f"{LABEL_PREFIX}/rank"
ANNOTATION_MASTER_ADDR = f"{LABEL_PREFIX}/master-addr"  # rank 0's pod IP, handed to the other ranks

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_NOT_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")


def dns_label(text: str, *, max_length: int = 63, fallback: str = "x") -> str:
    """Lowercase letters, digits and '-', starting with a letter, ending with a letter or digit."""
    label = _NOT_DNS.sub("-", text.lower()).strip("-")
    label = re.sub(r"-{2,}", "-", label)
    if not label or not label[0].isalpha():
        label = f"{fallback}-{label}".rstrip("-")
    return label[:max_length].rstrip("-")


def object_name(workload_name: str, uid: str) -> str:
    """The name of a workload's Job/Deployment/Service: readable prefix, unique uid suffix, <= 63.

    The uid is fixed when the workload is stored, so every retry of a create uses the same name and a
    second attempt meets 409 AlreadyExists instead of making a duplicate.
    """
    suffix = f"-{uid}"
    return dns_label(workload_name, max_length=63 - len(suffix), fallback="w") + suffix


def attempt_name(workload_name: str, uid: str, attempt: int) -> str:
    """The object name of one attempt: a batch job requeued after preemption runs again under a new name,
    so its next Job never adopts (or is confused with) the one still being deleted."""
    return object_name(workload_name, uid if not attempt else f"{uid}-{attempt}")


def rank_name(workload_name: str, uid: str, attempt: int, rank: int) -> str:
    """The Job of one rank of a gang job: the attempt's name with `-r<rank>` inside the unique suffix."""
    suffix = f"{uid}-r{rank}" if not attempt else f"{uid}-{attempt}-r{rank}"
    return object_name(workload_name, suffix)


def gang_label(uid: str, attempt: int) -> str:
    """What every rank of one attempt of a gang wears (and only those): anti-affinity and the tracker
    select on it, so a requeued gang's new ranks never count the old ones still terminating."""
    return f"{uid}-{attempt}"


def label_value(text: str) -> str:
    """A valid label value for any string; a hash suffix keeps distinct long values distinct."""
    value = _NOT_LABEL.sub("_", text).strip("_.-")
    if len(value) <= 63 and value == text:
        return value
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{value[:54].rstrip('_.-')}-{digest}".lstrip("_.-")


def home_claim_name(username: str, user_id: int) -> str:
    """The claim of a new home workspace: readable, and distinct for distinct users (their id, never a
    hash that two usernames could share). Homes made before this kept their stored name (hash of the
    username, `home-<name>-<8 hex>`): the `u` keeps the two forms apart."""
    suffix = f"-u{int(user_id)}"
    return f"home-{dns_label(username, max_length=63 - 5 - len(suffix), fallback='u')}{suffix}"


TEAM_CLAIM_NAME = "team-shared"


def secret_object_name(name: str, *, user_id: int, shared: bool) -> str:
    """The Kubernetes Secret behind a new stored secret: per user (their id) or team-wide. Secrets made
    before this keep their stored name (`secret-u<8 hex of the username>-<name>`); `p` keeps the forms apart."""
    if shared:
        return f"secret-team-{name}"
    return f"secret-p{int(user_id)}-{name}"


def pull_secret_name(registry_host: str) -> str:
    """The image pull Secret for a registry (host[:port]), in each team namespace."""
    digest = hashlib.sha256(registry_host.encode()).hexdigest()[:8]
    return f"pull-{dns_label(registry_host, max_length=63 - 14, fallback='r')}-{digest}"
