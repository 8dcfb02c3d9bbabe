"""Checking a submission: a pure function of what was asked and the facts it is judged against.

`validate_submission` gathers no data itself; `jobs.services.submission.intake` looks the facts up (GPU types,
quotas, node sizes, registries, budget) and passes them in. That keeps every rule testable without a
database, and lets a property test feed it generated specs.

Each field has its own small check (`check_kind`, `check_image`, `check_gpu_count`, ...): a pure
function from the raw value (and what it depends on) to `Checked(value, problems)`, where each problem
names its field. `validate_submission` only composes them. The limits themselves (lengths, ranges,
choices) are described once in jobs.services.spec_fields, which the launch form and the API's schema
read too.

The checks live in this package by what they check: `names`, `images`, `gpus` (type, count, nodes, pod
size), `commands`, `environment` (variables and secrets), `datasets` and `scheduling` (kind, port, time
limit, priority, restarts, retries, budget); `facts` is what they are judged against and `outcome` what
they return. The rules a client can check before sending (names, variable names, sweeps) are spec_rules'.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from jobs.services.spec_fields import FIELDS
from jobs.services.validation.commands import check_arguments, check_command_total
from jobs.services.validation.datasets import check_datasets
from jobs.services.validation.environment import check_env, check_secret_refs
from jobs.services.validation.facts import CatalogFacts, CleanSubmission, Facts, GpuTypeFacts
from jobs.services.validation.gpus import (
    AT_LEAST_ONE_GPU,
    CHOOSE_GPU_TYPE,
    check_gang_command,
    check_gpu_count,
    check_gpu_type,
    check_nodes,
    check_pod_size,
    check_topology,
    per_container_message,
)
from jobs.services.validation.images import (
    CHOOSE_IMAGE,
    DEFAULT_REGISTRY,
    NOT_A_REFERENCE,
    ImageChoice,
    ImageReference,
    canonical_image,
    check_cuda_fit,
    check_image,
    check_image_on_nodes,
    check_root,
    cuda_tuple,
    parse_image_reference,
)
from jobs.services.validation.names import check_name, default_name
from jobs.services.validation.outcome import WHOLE_NUMBER, Checked, Problem, SubmissionInvalid
from jobs.services.validation.scheduling import (
    BATCH_HAS_NO_PORT,
    BUDGET_USED,
    CHOOSE_KIND,
    MANAGERS_SET_PRIORITY,
    PORT_RANGE,
    PRIORITY_RANGE,
    RESTARTABLE_SERVICE,
    RETRY_BATCH_ONLY,
    SERVICE_NEEDS_PORT,
    check_budget,
    check_kind,
    check_port,
    check_priority,
    check_restartable,
    check_retry,
    check_time_limit,
)
from spec_rules import (
    ENV_NAME_RE,
    MAX_NAME,
    NAME_RE,
    NAME_RULE,
    RESERVED_ENV,
    RESERVED_ENV_PREFIXES,
    SUBMITTER_ENV,
    env_reserved,
)

__all__ = [
    "AT_LEAST_ONE_GPU",
    "BATCH_HAS_NO_PORT",
    "BUDGET_USED",
    "CHOOSE_GPU_TYPE",
    "CHOOSE_IMAGE",
    "CHOOSE_KIND",
    "DEFAULT_REGISTRY",
    "ENV_NAME_RE",
    "MANAGERS_SET_PRIORITY",
    "MAX_NAME",
    "NAME_RE",
    "NAME_RULE",
    "NOT_A_REFERENCE",
    "PORT_RANGE",
    "PRIORITY_RANGE",
    "RESERVED_ENV",
    "RESERVED_ENV_PREFIXES",
    "RESTARTABLE_SERVICE",
    "RETRY_BATCH_ONLY",
    "SERVICE_NEEDS_PORT",
    "SUBMITTER_ENV",
    "WHOLE_NUMBER",
    "CatalogFacts",
    "Checked",
    "CleanSubmission",
    "Facts",
    "GpuTypeFacts",
    "ImageChoice",
    "ImageReference",
    "Problem",
    "SubmissionInvalid",
    "canonical_image",
    "check_arguments",
    "check_budget",
    "check_command_total",
    "check_cuda_fit",
    "check_datasets",
    "check_env",
    "check_gang_command",
    "check_gpu_count",
    "check_gpu_type",
    "check_image",
    "check_image_on_nodes",
    "check_kind",
    "check_name",
    "check_nodes",
    "check_pod_size",
    "check_port",
    "check_priority",
    "check_restartable",
    "check_retry",
    "check_root",
    "check_secret_refs",
    "check_time_limit",
    "check_topology",
    "check_unknown_fields",
    "cuda_tuple",
    "default_name",
    "env_reserved",
    "parse_image_reference",
    "per_container_message",
    "validate_submission",
]

T = TypeVar("T")


def check_unknown_fields(raw: Mapping[str, Any]) -> Checked[None]:
    return Checked(None, tuple((name, "Unknown field.") for name in sorted(set(raw) - set(FIELDS))))


# --- the whole submission ---------------------------------------------------------------------------
def validate_submission(raw: Mapping[str, Any], facts: Facts) -> CleanSubmission:
    """Check every field of a submission; raise SubmissionInvalid naming each field that is wrong."""
    problems: list[Problem] = []

    def take(checked: Checked[T]) -> T:
        problems.extend(checked.problems)
        return checked.value

    take(check_unknown_fields(raw))
    kind = take(check_kind(raw.get("kind")))
    chosen = take(check_image(raw.get("catalog_image"), raw.get("image") or "", kind=kind, facts=facts))
    catalog = chosen.catalog
    take(check_root(catalog))
    name = take(check_name(raw.get("name") or "", image=chosen.image))
    gpu = take(check_gpu_type(raw.get("gpu_type") or "", facts.gpu_types))
    gpu_count = take(check_gpu_count(raw.get("gpu_count", 1), gpu))
    nodes_checked = check_nodes(raw.get("nodes", 1), kind=kind, gpu=gpu, per_node=gpu_count)
    nodes = take(nodes_checked)
    topology = take(check_topology(raw.get("topology", ""), nodes=None if nodes_checked.problems else nodes))
    take(check_cuda_fit(catalog, gpu, facts.gpu_types))
    take(check_image_on_nodes(chosen.image, gpu, facts.catalog, kind=kind))
    command = take(check_arguments(raw.get("command"), "command", catalog.default_command if catalog else ()))
    args = take(check_arguments(raw.get("args"), "args", catalog.default_args if catalog else ()))
    take(check_command_total(command, args))
    take(check_gang_command(command, nodes=nodes))
    env = take(check_env(raw.get("env")))
    secrets = take(check_secret_refs(raw.get("secrets"), facts.secrets, {n for n, _ in env}))
    datasets = take(check_datasets(raw.get("datasets"), facts.datasets))
    cpu, memory = take(check_pod_size(raw, gpu if gpu and gpu.enabled else None, gpu_count))
    port = take(check_port(raw.get("port"), kind=kind, catalog=catalog))
    limit = take(check_time_limit(raw.get("time_limit_seconds"), kind=kind, facts=facts))
    priority = take(check_priority(raw.get("priority", 0), may_set_priority=facts.may_set_priority))
    restartable = take(check_restartable(raw.get("restartable", False), kind=kind))
    retry_limit, retryable_exit_codes, checkpoint_workspace = take(check_retry(raw, kind=kind))
    take(check_budget(facts))

    if problems:
        errors: dict[str, list[str]] = {}
        for field_name, message in problems:
            errors.setdefault(field_name, []).append(message)
        raise SubmissionInvalid(errors)
    return CleanSubmission(
        name=name,
        kind=kind,
        image=chosen.image,
        catalog_image_id=catalog.id if catalog else None,
        gpu_type=raw["gpu_type"],
        gpu_count=gpu_count,
        command=command,
        args=args,
        env=env,
        port=port,
        time_limit_seconds=limit,
        priority=priority,
        secrets=secrets,
        datasets=datasets,
        cpu_millicores=cpu,
        memory_mib=memory,
        restartable=restartable,
        retry_limit=retry_limit,
        retryable_exit_codes=retryable_exit_codes,
        checkpoint_workspace=checkpoint_workspace,
        nodes=nodes,
        topology=topology,
    )
