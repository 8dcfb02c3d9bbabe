"""Loading GPU types, teams' quotas, the image catalog and allowed registries from a document.

The same format feeds `manage.py seed --file` (the Helm chart's seed hook renders it from values) and
`manage.py seed_demo`. Seeding only creates what is missing: the hook runs on every chart upgrade, and
what an admin changed since (a quota, a team's budget, a billing weight, a disabled GPU type) stays as
the admin left it. Every quota the seed creates is written to the quota audit, as a manual change is.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.utils.text import slugify

from jobs import gpu_shares
from jobs.models import AllowedRegistry, CatalogImage, GpuType, Quota, QuotaChange, Team
from jobs.models.catalog import node_label_owner

SEED_NOTE = "Created by the seed (manage.py seed: the chart's seed hook or seed_demo)."


class SeedError(ValueError):
    """The seed document is malformed; the message names the entry and field."""


def _require(entry: dict[str, Any], key: str, where: str) -> Any:
    if key not in entry or entry[key] in (None, ""):
        raise SeedError(f"{where}: '{key}' is required")
    return entry[key]


SHARE_FIELDS = ("kind", "share_parts", "share_of", "physical_gpu", "device_memory_mib", "max_per_container")


def _share_fields(entry: dict, where: str) -> dict:
    """A GPU type's slice settings (issue 40), checked as admin checks them."""
    fields = {name: entry[name] for name in SHARE_FIELDS if entry.get(name) is not None}
    if fields.get("kind", gpu_shares.WHOLE) not in dict(gpu_shares.KIND_CHOICES):
        problems = {"kind": f"one of {', '.join(dict(gpu_shares.KIND_CHOICES))}"}
    else:
        problems = gpu_shares.share_problems(GpuType(**fields).share)
    if problems:
        field, message = next(iter(problems.items()))
        raise SeedError(f"{where}: {field!r}: {message}")
    return fields


def _reserve_after(value: Any, where: str, name: str = "reserve_after_seconds") -> int:
    """A GPU type's bounded wait (issue 38): seconds a workload waits before GPUs are reserved for it (`name`:
    the head's wait, or reserve_deeper_after_seconds, the wait of those behind it)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SeedError(f"{where}: {name!r} must be a whole number of seconds, 0 or more")
    return value


def _cpu_millicores(entry: dict[str, Any]) -> Any:
    """CPU per GPU as given: in millicores, or in cores; None when neither is."""
    cpu = entry.get("cpu_per_gpu_millicores")
    if cpu is None and entry.get("cpu_per_gpu") is not None:
        cpu = int(Decimal(str(entry["cpu_per_gpu"])) * 1000)
    return cpu


def _gpu_type_defaults(entry: dict[str, Any], slug: str, where: str) -> dict[str, Any]:
    """A new GPU type's fields from its entry."""
    cpu = _cpu_millicores(entry)
    try:
        weight = Decimal(str(entry.get("billing_weight", 1)))
    except InvalidOperation as exc:
        raise SeedError(f"{where}: 'billing_weight' must be a number") from exc
    defaults = {
        "display_name": entry.get("display_name") or slug.upper(),
        "node_label_key": entry.get("node_label_key") or "gputype",
        "node_label_value": entry.get("node_label_value") or slug,
        "resource_name": entry.get("resource_name") or "nvidia.com/gpu",
        "billing_weight": weight,
        "enabled": bool(entry.get("enabled", True)),
        "max_cuda_version": entry.get("max_cuda_version") or "",
    }
    if cpu is not None:
        defaults["cpu_per_gpu_millicores"] = int(cpu)
    if entry.get("memory_per_gpu_mib") is not None:
        defaults["memory_per_gpu_mib"] = int(entry["memory_per_gpu_mib"])
    return defaults | _queue_fields(entry, where) | _share_fields(entry, where)


def _seed_gpu_type(entry: dict[str, Any], where: str) -> bool:
    slug = _require(entry, "slug", where)
    defaults = _gpu_type_defaults(entry, slug, where)
    if not GpuType.objects.filter(slug=slug).exists():
        label = (defaults["node_label_key"], defaults["node_label_value"])
        other = node_label_owner(*label)
        if other is not None:
            raise SeedError(
                f"{where}: 'node_label_value' {label[0]}={label[1]} is already the node label of GPU "
                f"type {other.slug!r}; each GPU type needs a label of its own"
            )
    _, created = GpuType.objects.get_or_create(slug=slug, defaults=defaults)
    return created


def _seed_team(entry: dict[str, Any], where: str) -> bool:
    name = _require(entry, "name", where)
    _, created = Team.objects.get_or_create(
        slug=entry.get("slug") or slugify(name),
        defaults={"name": name, "monthly_gpu_hour_budget": entry.get("monthly_gpu_hour_budget")},
    )
    return created


def _seed_quota(entry: dict[str, Any], where: str) -> bool:
    team_slug = _require(entry, "team", where)
    type_slug = _require(entry, "gpu_type", where)
    max_gpus = int(_require(entry, "max_gpus", where))
    gpu_type = GpuType.objects.filter(slug=type_slug).first()
    if gpu_type is None:
        raise SeedError(f"{where}: unknown gpu_type {type_slug!r}")
    team, _ = Team.objects.get_or_create(slug=team_slug, defaults={"name": team_slug})
    _, created = Quota.objects.get_or_create(team=team, gpu_type=gpu_type, defaults={"max_gpus": max_gpus})
    if created:
        QuotaChange.objects.create(
            team=team, gpu_type=gpu_type, old_max_gpus=None, new_max_gpus=max_gpus, note=SEED_NOTE
        )
    return created


def _seed_image(entry: dict[str, Any], where: str) -> bool:
    _, created = CatalogImage.objects.get_or_create(
        reference=_require(entry, "reference", where),
        defaults={
            "title": _require(entry, "title", where),
            "description": entry.get("description", ""),
            "suits": entry.get("suits", CatalogImage.Suits.ANY),
            "default_command": list(entry.get("default_command") or []),
            "default_args": list(entry.get("default_args") or []),
            "default_port": entry.get("default_port"),
            "cuda_version": entry.get("cuda_version") or "",
            "enabled": bool(entry.get("enabled", True)),
            "needs_root": bool(entry.get("needs_root", False)),
            "root_allowed": bool(entry.get("root_allowed", False)),
            "read_only_root": bool(entry.get("read_only_root", False)),
            "runs_sshd": bool(entry.get("runs_sshd", False)),
            "base_url_args": [str(a) for a in entry.get("base_url_args") or []],
            "base_url_env": {str(k): str(v) for k, v in (entry.get("base_url_env") or {}).items()},
        },
    )
    return created


def _seed_registry(host: Any, where: str) -> bool:
    _, created = AllowedRegistry.objects.get_or_create(host=str(host).strip().lower())
    return created


def _queue_fields(entry: dict[str, Any], where: str) -> dict[str, Any]:
    """A GPU type's queue settings (issue 38): its bounded waits and aging, where the entry gives them."""
    fields: dict[str, Any] = {}
    if entry.get("reserve_after_seconds") is not None:
        fields["reserve_after_seconds"] = _reserve_after(entry["reserve_after_seconds"], where)
    if entry.get("reserve_deeper_after_seconds") is not None:
        value = entry["reserve_deeper_after_seconds"]
        fields["reserve_deeper_after_seconds"] = _reserve_after(value, where, "reserve_deeper_after_seconds")
    if entry.get("queue_aging") is not None:
        if not isinstance(entry["queue_aging"], bool):
            raise SeedError(f"{where}: 'queue_aging' must be true or false")
        fields["queue_aging"] = entry["queue_aging"]
    return fields


def apply_seed(document: dict[str, Any]) -> dict[str, int]:
    """Create what the document names and the database lacks; returns how many of each were created."""
    if not isinstance(document, dict):
        raise SeedError("the seed document must be a mapping")
    # (count, the document's list, as entries are named in errors, how one is created), in this order: a
    # quota names a GPU type and a team the seed may create first.
    sections = (
        ("gpu_types", document.get("gpu_types"), "gpu_types", _seed_gpu_type),
        ("teams", document.get("teams"), "teams", _seed_team),
        ("quotas", document.get("default_quotas") or document.get("quotas"), "default_quotas", _seed_quota),
        ("images", document.get("images"), "images", _seed_image),
        ("allowed_registries", document.get("allowed_registries"), "allowed_registries", _seed_registry),
    )
    counts = {count: 0 for count, *_ in sections}
    with transaction.atomic():
        for count, entries, name, seed_one in sections:
            for i, entry in enumerate(entries or []):
                counts[count] += seed_one(entry, f"{name}[{i}]")
    return counts


DEMO = {
    "gpu_types": [
        # Bounded waits on: a newcomer's queued P100 workload shows "starts no later than" (issue 38).
        {"slug": "p100", "display_name": "Tesla P100", "node_label_value": "p100", "cpu_per_gpu": 4,
         "memory_per_gpu_mib": 16384, "billing_weight": "1.0", "reserve_after_seconds": 0},
        {"slug": "k2", "display_name": "GRID K2", "node_label_value": "k2", "cpu_per_gpu": 2,
         "memory_per_gpu_mib": 8192, "billing_weight": "0.5"},
        {"slug": "v100", "display_name": "Tesla V100", "node_label_value": "v100", "cpu_per_gpu": 6,
         "memory_per_gpu_mib": 24576, "billing_weight": "2.0"},
    ],
    "teams": [{"name": "Demo Lab", "slug": "demo"}],
    "default_quotas": [
        {"team": "demo", "gpu_type": "p100", "max_gpus": 4},
        {"team": "demo", "gpu_type": "k2", "max_gpus": 8},
        {"team": "demo", "gpu_type": "v100", "max_gpus": 4},
    ],
    "images": [
        {"reference": "nvidia/cuda:12.2.0-base-ubuntu22.04", "title": "CUDA 12.2 base", "suits": "batch",
         "description": "Ubuntu 22.04 with the CUDA 12.2 runtime. Bring your own command.",
         "default_command": ["nvidia-smi"], "cuda_version": "12.2"},
        {"reference": "pytorch/pytorch:2.3.1-cuda11.8-cudnn8-runtime", "title": "PyTorch 2.3 (CUDA 11.8)",
         "suits": "batch", "description": "PyTorch with CUDA 11.8 and cuDNN 8 for training scripts.",
         "default_command": ["python", "train.py"], "cuda_version": "11.8"},
        {"reference": "jupyter/tensorflow-notebook:2023-10-20", "title": "Jupyter notebook (TensorFlow)",
         "suits": "service", "description": "JupyterLab with TensorFlow; press Open on its page once it runs.",
         "default_port": 8888, "cuda_version": "11.8",
         # The portal signs people in, so the notebook's own token and password are off.
         "base_url_args": ["--ServerApp.base_url={base_url}", "--IdentityProvider.token=", "--ServerApp.password="]},
        {"reference": "tensorflow/tensorflow:2.15.0-gpu", "title": "TensorBoard", "suits": "service",
         "description": "TensorBoard serving the logs under /logs.", "default_command": ["tensorboard"],
         "default_args": ["--logdir", "/logs", "--bind_all"], "default_port": 6006, "cuda_version": "12.2",
         "base_url_args": ["--path_prefix={base_path}"]},
        {"reference": "nvcr.io/nvidia/digits:20.12-tensorflow-py3", "title": "NVIDIA DIGITS", "suits": "service",
         "description": "The DIGITS web app for training image models interactively.", "default_port": 5000,
         "cuda_version": "11.1", "base_url_env": {"DIGITS_URL_PREFIX": "{base_path}"}},
    ],
    "allowed_registries": ["docker.io", "nvcr.io", "ghcr.io"],
}  # fmt: skip
