"""How the workload runs and waits: batch or service, its port, time limit, priority, restarts and
retries, and whether the team's budget allows any more."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.services.spec_fields import (
    CHECKPOINT_WORKSPACES,
    MAX_PORT,
    MAX_PRIORITY,
    MAX_RETRY_LIMIT,
    MAX_RETRYABLE_EXIT_CODES,
    MIN_PORT,
    MIN_PRIORITY,
)
from jobs.services.validation.facts import CatalogFacts, Facts
from jobs.services.validation.outcome import Checked, duration, is_int, refused

CHOOSE_KIND = "Choose 'batch' or 'service'."

PORT_RANGE = f"A port number between {MIN_PORT} and {MAX_PORT}."
BATCH_HAS_NO_PORT = "Only services listen on a port; leave it empty for a batch job."
SERVICE_NEEDS_PORT = "A service needs the port it listens on."
PRIORITY_RANGE = f"A whole number between {MIN_PRIORITY} and {MAX_PRIORITY}."
MANAGERS_SET_PRIORITY = "Only team managers can set a priority."
RESTARTABLE_SERVICE = "Only batch jobs can be restarted after preemption; a preempted service ends."
BUDGET_USED = "Your team has used its GPU-hour budget for this month."


def check_kind(value: Any) -> Checked[str]:
    kind = value or "batch"
    if kind not in ("batch", "service"):
        return refused("batch", "kind", CHOOSE_KIND)
    return Checked(kind)


def check_port(value: Any, *, kind: str, catalog: CatalogFacts | None) -> Checked[int | None]:
    """A service listens on a port (the catalog's default when left empty); a batch job on none."""
    given = value not in (None, "")
    if not given:
        value = catalog.default_port if catalog and kind == "service" else None
    if value is None:
        return refused(None, "port", SERVICE_NEEDS_PORT) if kind == "service" else Checked(None)
    if not is_int(value) or not MIN_PORT <= int(value) <= MAX_PORT:
        return refused(None, "port", PORT_RANGE)
    if kind == "batch":
        return refused(None, "port", BATCH_HAS_NO_PORT) if given else Checked(None)
    return Checked(int(value))


def check_time_limit(value: Any, *, kind: str, facts: Facts) -> Checked[int]:
    """Seconds, between the portal's minimum and maximum; empty: the default for the kind."""
    if value in (None, ""):
        value = facts.default_time_limit[kind]
    if not is_int(value):
        return refused(0, "time_limit_seconds", "Must be a whole number of seconds.")
    limit = int(value)
    if not facts.min_time_limit <= limit <= facts.max_time_limit:
        message = f"Between {duration(facts.min_time_limit)} and {duration(facts.max_time_limit)}."
        return refused(limit, "time_limit_seconds", message)
    return Checked(limit)


def check_priority(value: Any, *, may_set_priority: bool) -> Checked[int]:
    if value in (None, ""):
        value = 0
    if not is_int(value) or not MIN_PRIORITY <= int(value) <= MAX_PRIORITY:
        return refused(0, "priority", PRIORITY_RANGE)
    if int(value) != 0 and not may_set_priority:
        return refused(int(value), "priority", MANAGERS_SET_PRIORITY)
    return Checked(int(value))


def check_restartable(value: Any, *, kind: str) -> Checked[bool]:
    """A preempted batch job is requeued instead of failed when restartable; a service always ends."""
    if value in (None, ""):
        return Checked(False)
    if not isinstance(value, bool):
        return refused(False, "restartable", "true or false.")
    if value and kind == "service":
        return refused(True, "restartable", RESTARTABLE_SERVICE)
    return Checked(value)


RETRY_BATCH_ONLY = "Only restartable batch jobs are retried; leave it empty for a service."


def check_retry(raw: Mapping[str, Any], *, kind: str) -> Checked[tuple[int | None, tuple[int, ...], str]]:
    """The retry limit (0..MAX_RETRY_LIMIT or empty for the team's default), the exit codes of its own that
    are retried (1..255, at most MAX_RETRYABLE_EXIT_CODES) and where its checkpoint directory lies."""
    limit = _retry_limit(raw.get("retry_limit"))
    codes = _retryable_exit_codes(raw.get("retryable_exit_codes"))
    workspace = _checkpoint_workspace(raw.get("checkpoint_workspace"))
    problems = [*limit.problems, *codes.problems, *workspace.problems]
    if kind == "service":
        given = (("retry_limit", limit.value), ("retryable_exit_codes", codes.value))
        problems += [(f, RETRY_BATCH_ONLY) for f, v in given if v]
    return Checked((limit.value, codes.value, workspace.value), tuple(problems))


def _retry_limit(limit: Any) -> Checked[int | None]:
    if limit in (None, ""):
        return Checked(None)
    if not is_int(limit) or not 0 <= int(limit) <= MAX_RETRY_LIMIT:
        message = f"a whole number from 0 to {MAX_RETRY_LIMIT}, or empty for the team's default."
        return refused(None, "retry_limit", message)
    return Checked(int(limit))


def _retryable_exit_codes(codes: Any) -> Checked[tuple[int, ...]]:
    if codes in (None, "", []):
        return Checked(())
    if (
        not isinstance(codes, list | tuple)
        or len(codes) > MAX_RETRYABLE_EXIT_CODES
        or not all(is_int(c) and 1 <= int(c) <= 255 for c in codes)
    ):
        message = f"a list of at most {MAX_RETRYABLE_EXIT_CODES} exit codes from 1 to 255."
        return refused((), "retryable_exit_codes", message)
    return Checked(tuple(sorted({int(c) for c in codes})))


def _checkpoint_workspace(workspace: Any) -> Checked[str]:
    if workspace in (None, ""):
        return Checked("home")
    if workspace not in dict(CHECKPOINT_WORKSPACES):
        return refused("home", "checkpoint_workspace", '"home" (your home, the default) or "team" (the shared space).')
    return Checked(workspace)


def check_budget(facts: Facts) -> Checked[None]:
    if facts.budget_exhausted:
        return refused(None, "team", facts.budget_message or BUDGET_USED)
    return Checked(None)
