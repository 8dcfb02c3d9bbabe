"""The workload-scoped token: it lets a job report its own checkpoints and nothing else.

It is derived from the workload's uid with the site's secret key (an HMAC), so no token is stored and a
retried create that meets its Secret already there (409, adopted) finds the same value in it. It is good
only while the workload has not ended ("dies with it"); every other endpoint refuses it (api/authentication.py).
"""

from __future__ import annotations

import re

from django.utils.crypto import constant_time_compare, salted_hmac

PREFIX = "gpw_"
_SALT = "gpuportal.workload-checkpoint-token"
_SHAPE = re.compile(r"^gpw_([0-9a-f]{16})_([0-9a-f]{64})$")


def workload_token(uid: str) -> str:
    return f"{PREFIX}{uid}_{salted_hmac(_SALT, uid, algorithm='sha256').hexdigest()}"


def looks_like_workload_token(raw: str) -> bool:
    return raw.startswith(PREFIX)


def token_uid(raw: str) -> str | None:
    """The uid of the workload the token was made for, if it is one of ours; else None."""
    match = _SHAPE.match(raw or "")
    if match is None:
        return None
    uid = match.group(1)
    return uid if constant_time_compare(raw, workload_token(uid)) else None


def secret_name(uid: str) -> str:
    """The Kubernetes Secret that carries a workload's token into its pods (one per workload, every attempt)."""
    return f"gpw-{uid}"
