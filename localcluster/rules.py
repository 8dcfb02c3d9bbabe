"""How the node simulator decides what a pod does: pure functions of the pod (a raw JSON dict).

Rules, first match wins for each setting:
1. pod annotations  sim.gpuportal.dev/{run-seconds,exit-code,start-seconds,outcome,term-seconds}
2. container env     SIM_RUN_SECONDS, SIM_EXIT_CODE, SIM_START_SECONDS, SIM_OUTCOME, SIM_TERM_SECONDS (first container that
   sets it) — the portal passes users' environment through, so end-to-end tests can steer a workload.
3. defaults          restartPolicy Never/OnFailure: run `default_batch_run_seconds`, exit 0;
                     restartPolicy Always (services): run until deleted.
An image matching one of `failing_images` never starts (ErrImagePull, then ImagePullBackOff).
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
from dataclasses import dataclass
from typing import Any

from localcluster.pools import SimulatorConfig

ANNOTATION_PREFIX = "sim.gpuportal.dev/"
RUN_SECONDS = "run-seconds"
EXIT_CODE = "exit-code"
START_SECONDS = "start-seconds"
OUTCOME = "outcome"
TERM_SECONDS = "term-seconds"  # how long the process takes to exit after SIGTERM (the kill ends it sooner)
ENV_NAMES = {
    TERM_SECONDS: "SIM_TERM_SECONDS",
    RUN_SECONDS: "SIM_RUN_SECONDS",
    EXIT_CODE: "SIM_EXIT_CODE",
    START_SECONDS: "SIM_START_SECONDS",
    OUTCOME: "SIM_OUTCOME",
}
# Outcomes a rule may ask for, besides a plain exit code.
OUTCOMES = {"Completed", "Error", "OOMKilled", "ErrImagePull"}
FOREVER = math.inf


@dataclass(frozen=True)
class PodPlan:
    """What the simulated kubelet will do with a pod."""

    start_seconds: float
    run_seconds: float  # math.inf: until deleted
    exit_code: int
    reason: str  # terminated reason: Completed, Error or OOMKilled
    pull_failure_image: str | None  # set: this image never pulls, the pod never starts
    restart_policy: str
    term_seconds: float = 0.0  # after SIGTERM; deletion's grace period caps it (then SIGKILL)

    @property
    def runs_forever(self) -> bool:
        return math.isinf(self.run_seconds)

    def restarts_after_exit(self) -> bool:
        """Whether the kubelet would restart the container in place after it exits with exit_code."""
        if self.restart_policy == "Always":
            return True
        return self.restart_policy == "OnFailure" and self.exit_code != 0


def _lookup(pod: dict[str, Any], key: str) -> str | None:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if ANNOTATION_PREFIX + key in annotations:
        return str(annotations[ANNOTATION_PREFIX + key])
    env_name = ENV_NAMES[key]
    for container in (pod.get("spec") or {}).get("containers") or []:
        for env in container.get("env") or []:
            if env.get("name") == env_name and "value" in env:
                return str(env["value"])
    return None


def parse_seconds(text: str, *, allow_forever: bool) -> float:
    """'3', '2.5', '90s', '2m'; 'forever'/'inf'/negative means until deleted (if allowed)."""
    value = text.strip().lower()
    if value in {"forever", "inf", "infinity", "never"}:
        if allow_forever:
            return FOREVER
        raise ValueError(f"{text!r} is not allowed here")
    scale = 1.0
    if value.endswith("ms"):
        value, scale = value[:-2], 0.001
    elif value.endswith("s"):
        value = value[:-1]
    elif value.endswith("m"):
        value, scale = value[:-1], 60.0
    elif value.endswith("h"):
        value, scale = value[:-1], 3600.0
    seconds = float(value) * scale
    if math.isnan(seconds):
        raise ValueError(f"{text!r} is not a duration")
    if seconds < 0:
        if allow_forever:
            return FOREVER
        raise ValueError(f"{text!r} is negative")
    return seconds


def image_fails(image: str, patterns: tuple[str, ...] | list[str]) -> bool:
    return any(fnmatch.fnmatchcase(image, p) for p in patterns)


def _seconds(pod: dict[str, Any], key: str, default: float, *, allow_forever: bool) -> float:
    """A duration rule of the pod, or `default` when it is absent or malformed."""
    raw = _lookup(pod, key)
    if raw is not None:
        with contextlib.suppress(ValueError):
            return parse_seconds(raw, allow_forever=allow_forever)
    return default


def _exit_code(pod: dict[str, Any]) -> int:
    """The exit-code rule, 0 to 255 (0 when absent or malformed)."""
    exit_code = 0
    exit_raw = _lookup(pod, EXIT_CODE)
    if exit_raw is not None:
        with contextlib.suppress(ValueError):
            exit_code = int(exit_raw.strip())
    return max(0, min(255, exit_code))


def _pull_failure(spec: dict[str, Any], outcome: str, config: SimulatorConfig) -> str | None:
    """The image whose pull fails: the first of a failing pattern, else the first's when the rule says so."""
    for container in spec.get("containers") or []:
        image = container.get("image") or ""
        if image_fails(image, config.failing_images):
            return image
    if outcome.lower() == "errimagepull":
        containers = spec.get("containers") or [{}]
        return containers[0].get("image") or "<none>"
    return None


def _ending(outcome: str, exit_code: int, run: float) -> tuple[int, str, float]:
    """(exit code, reason, run seconds) as the outcome rule makes them."""
    if outcome.lower() == "oomkilled":
        # An OOM kill has to happen at some point; without a run time it happens at once.
        return 137, "OOMKilled", 1.0 if math.isinf(run) else run
    if outcome.lower() == "error" and exit_code == 0:
        return 1, "Error", run
    return exit_code, "Completed" if exit_code == 0 else "Error", run


def resolve_plan(pod: dict[str, Any], config: SimulatorConfig) -> PodPlan:
    """The plan for a pod. Malformed rule values fall back to the defaults rather than wedging the pod."""
    spec = pod.get("spec") or {}
    restart_policy = spec.get("restartPolicy") or "Always"
    start = _seconds(pod, START_SECONDS, config.default_start_seconds, allow_forever=False)
    run = FOREVER if restart_policy == "Always" else config.default_batch_run_seconds
    run = _seconds(pod, RUN_SECONDS, run, allow_forever=True)
    outcome = (_lookup(pod, OUTCOME) or "").strip()
    exit_code, reason, run = _ending(outcome, _exit_code(pod), run)
    if exit_code != 0 and math.isinf(run) and _lookup(pod, RUN_SECONDS) is None:
        # An explicit exit code on a service means "crash": give it a short run before it exits.
        run = config.default_batch_run_seconds
    return PodPlan(
        term_seconds=_seconds(pod, TERM_SECONDS, 0.0, allow_forever=True),
        start_seconds=start,
        run_seconds=run,
        exit_code=exit_code,
        reason=reason,
        pull_failure_image=_pull_failure(spec, outcome, config),
        restart_policy=restart_policy,
    )


def restart_backoff(restart_count: int) -> float:
    """Seconds in CrashLoopBackOff before restart number `restart_count + 1`.

    The real kubelet starts at 10 s and doubles up to 5 min; we keep the shape but scale it down so tests
    and demos do not wait minutes.
    """
    return float(min(1 * 2**restart_count, 30))
