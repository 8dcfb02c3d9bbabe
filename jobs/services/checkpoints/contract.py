"""What every batch job's container is told, as pure functions of the workload's facts.

- GPUPORTAL_CHECKPOINT_DIR: a directory in a workspace that outlives each attempt (the owner's home, or the
  team's shared space when the launch says so), one per workload: <workspace>/.gpuportal/checkpoints/<name>-<uid>.
- GPUPORTAL_ATTEMPT: 0 for the first run, then one more for each run after a preemption or a retry.
- GPUPORTAL_GRACE_SECONDS: how long the process has between SIGTERM and the kill whenever the portal stops
  it on purpose (preemption, time limit, cancel, node drain).
- GPUPORTAL_API_URL and GPUPORTAL_TOKEN_FILE: where `gpuportal checkpoint` reports a checkpoint, and the
  workload-scoped token it reports with (a file from a Secret mounted into the pod).
"""

from __future__ import annotations

from jobs.kube.objects import TOKEN_DIR, TOKEN_KEY

CHECKPOINT_SUBDIR = ".gpuportal/checkpoints"
TOKEN_FILE = f"{TOKEN_DIR}/{TOKEN_KEY}"


def checkpoint_dir(*, workspace: str, mounts: list[dict], name: str, uid: str) -> str:
    """The checkpoint directory inside the container: under the mount of `workspace` ("home" or "team"),
    else under the home (a launch that asked for the team space in a team without one), else ""."""
    by_kind = {m.get("kind"): m.get("mount_path", "") for m in mounts or ()}
    root = by_kind.get(workspace) or by_kind.get("home") or ""
    if not root:
        return ""
    return f"{root.rstrip('/')}/{CHECKPOINT_SUBDIR}/{name}-{uid}"


def contract_env(
    *, checkpoint_dir: str, attempt: int, grace_seconds: int, api_url: str, with_token: bool
) -> tuple[tuple[str, str], ...]:
    """The contract's variables, in a fixed order (a launch's own variable of the same name is dropped: these
    are the portal's word)."""
    env = [("GPUPORTAL_ATTEMPT", str(attempt)), ("GPUPORTAL_GRACE_SECONDS", str(grace_seconds))]
    if checkpoint_dir:
        env.append(("GPUPORTAL_CHECKPOINT_DIR", checkpoint_dir))
    if api_url:
        env.append(("GPUPORTAL_API_URL", api_url))
    if with_token:
        env.append(("GPUPORTAL_TOKEN_FILE", TOKEN_FILE))
    return tuple(env)


CONTRACT_NAMES = frozenset(
    {
        "GPUPORTAL_ATTEMPT",
        "GPUPORTAL_GRACE_SECONDS",
        "GPUPORTAL_CHECKPOINT_DIR",
        "GPUPORTAL_API_URL",
        "GPUPORTAL_TOKEN_FILE",
    }
)
