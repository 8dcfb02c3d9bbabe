"""Checking a submission: a pure function of what was asked and the facts it is judged against.

`validate_submission` gathers no data itself; `jobs.services.intake` looks the facts up (GPU types,
quotas, node sizes, registries, budget) and passes them in. That keeps every rule testable without a
database, and lets a property test feed it generated specs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# --- image references (the grammar of OCI/distribution references) ---------------------------------
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|-+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:(?P<domain>{_DOMAIN})/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
DEFAULT_REGISTRY = "docker.io"

NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# GPU visibility is the device plugin's job; letting users set these would let a pod see GPUs it was
# not given (the NVIDIA runtime honours NVIDIA_VISIBLE_DEVICES=all).
RESERVED_ENV = {"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
RESERVED_ENV_PREFIXES = ("GPUPORTAL_",)

MAX_NAME = 40
MAX_IMAGE = 255
MAX_LIST_ITEMS = 256
MAX_ITEM_CHARS = 4096
MAX_COMMAND_TOTAL = 32 * 1024
MAX_ENV_VARS = 100
MAX_ENV_NAME = 128
# A real workload's environment is a few settings and paths, well under a kilobyte; these caps leave
# ample room and keep pod specs (stored in etcd, each object at most 1.5 MB) small.
MAX_ENV_VALUE = 4 * 1024
MAX_ENV_TOTAL = 16 * 1024
MIN_PRIORITY, MAX_PRIORITY = -100, 100


@dataclass(frozen=True)
class ImageReference:
    registry: str
    name: str
    tag: str | None
    digest: str | None


def parse_image_reference(reference: str) -> ImageReference | None:
    """Parse `[registry/]path[:tag][@digest]`; None when it is not a valid reference."""
    if not reference or len(reference) > MAX_IMAGE:
        return None
    match = _REFERENCE.match(reference)
    if match is None or len(match.group("name")) > MAX_IMAGE:
        return None
    domain = match.group("domain")
    name = match.group("name")
    # As docker does: the first component is a registry only if it looks like a host.
    if domain and not ("." in domain or ":" in domain or domain == "localhost" or domain.startswith("[")):
        domain = None
    if domain is None:
        registry = DEFAULT_REGISTRY
    else:
        registry = domain.lower()
        name = name[len(domain) + 1 :]
    if not re.fullmatch(rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*", name):
        return None
    return ImageReference(registry=registry, name=name, tag=match.group("tag"), digest=match.group("digest"))


def cuda_tuple(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor or 0)


# --- the facts a submission is judged against ---------------------------------------------------------
@dataclass(frozen=True)
class GpuTypeFacts:
    slug: str
    display_name: str
    enabled: bool
    quota: int | None  # the team's max GPUs of this type; None: no quota row, not usable
    largest_node: int  # most allocatable GPUs on one ready node of this type; 0: none known
    max_cuda: str | None  # highest CUDA the drivers on these nodes run; None: unknown
    cpu_per_gpu: int = 4000  # millicores per GPU by default, and at most (sized pods)
    max_cpu_per_gpu: int | None = None
    memory_per_gpu: int = 16384  # MiB
    max_memory_per_gpu: int | None = None


@dataclass(frozen=True)
class CatalogFacts:
    id: int
    reference: str
    suits: str  # batch | service | any
    enabled: bool
    cuda_version: str | None
    default_command: tuple[str, ...] = ()
    default_args: tuple[str, ...] = ()
    default_port: int | None = None
    needs_root: bool = False  # the image only works as root
    root_allowed: bool = False  # and an admin approved that for this entry


@dataclass(frozen=True)
class Facts:
    gpu_types: Mapping[str, GpuTypeFacts]
    catalog: Mapping[int, CatalogFacts]
    allowed_registries: frozenset[str]
    budget_exhausted: bool = False
    budget_message: str = ""
    may_set_priority: bool = False
    default_time_limit: Mapping[str, int] = field(default_factory=lambda: {"batch": 86400, "service": 28800})
    min_time_limit: int = 60
    max_time_limit: int = 7 * 86400
    secrets: Mapping[str, str] = field(default_factory=dict)  # secret names the user may use -> k8s name
    datasets: Mapping[str, bool] = field(default_factory=dict)  # every enabled dataset -> may the team use it


@dataclass(frozen=True)
class CleanSubmission:
    name: str
    kind: str
    image: str
    catalog_image_id: int | None
    gpu_type: str
    gpu_count: int
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    port: int | None
    time_limit_seconds: int
    priority: int
    secrets: tuple[tuple[str, str, str], ...] = ()  # (name, k8s name, env var or "")
    datasets: tuple[str, ...] = ()
    cpu_millicores: int | None = None  # None: the type's default
    memory_mib: int | None = None
    restartable: bool = False


class SubmissionInvalid(Exception):
    """The submission breaks one or more rules; `errors` maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{f}: {' '.join(m)}" for f, m in errors.items()))
        self.errors = errors


FIELDS = ("name", "kind", "image", "catalog_image", "gpu_type", "gpu_count", "command", "args", "env",
          "port", "time_limit_seconds", "priority", "restartable", "secrets", "datasets", "cpu_millicores", "memory_mib")  # fmt: skip


def validate_submission(raw: Mapping[str, Any], facts: Facts) -> CleanSubmission:
    """Check every field of a submission; raise SubmissionInvalid naming each field that is wrong."""
    errors: dict[str, list[str]] = {}

    def fail(name: str, message: str) -> None:
        errors.setdefault(name, []).append(message)

    for unknown in sorted(set(raw) - set(FIELDS)):
        fail(unknown, "Unknown field.")

    # kind
    kind = raw.get("kind") or "batch"
    if kind not in ("batch", "service"):
        fail("kind", "Choose 'batch' or 'service'.")
        kind = "batch"

    # image: a catalog entry, or a custom reference from an allowed registry
    catalog: CatalogFacts | None = None
    catalog_id = raw.get("catalog_image")
    image = raw.get("image") or ""
    if catalog_id not in (None, ""):
        if not _is_int(catalog_id) or int(catalog_id) not in facts.catalog:
            fail("catalog_image", "No such image in the catalog.")
        else:
            catalog = facts.catalog[int(catalog_id)]
            if not catalog.enabled:
                fail("catalog_image", "This catalog image is no longer offered.")
            elif catalog.suits not in ("any", kind):
                fail("catalog_image", f"This image is meant for {catalog.suits} workloads, not {kind}.")
            if image and image != catalog.reference:
                fail("image", "Give either a catalog image or a custom image reference, not both.")
            image = catalog.reference
    if not isinstance(image, str) or not image:
        if catalog_id in (None, ""):
            fail("image", "Choose an image from the catalog or give an image reference.")
        image = ""
    elif catalog is None:
        reference = parse_image_reference(image)
        catalog_match = next((c for c in facts.catalog.values() if c.reference == image and c.enabled), None)
        if reference is None:
            fail("image", "Not a valid image reference (expected [registry/]name[:tag][@sha256:digest]).")
        elif catalog_match is not None:
            catalog = catalog_match
        elif reference.registry not in facts.allowed_registries:
            allowed = ", ".join(sorted(facts.allowed_registries)) or "none"
            fail(
                "image",
                f"Images from {reference.registry} are not allowed here (allowed registries: {allowed}).",
            )

    validate_root(catalog, fail)

    # name
    name = raw.get("name") or ""
    if not isinstance(name, str):
        fail("name", "Must be text.")
        name = ""
    if name:
        if len(name) > MAX_NAME:
            fail("name", f"At most {MAX_NAME} characters.")
        elif not NAME_RE.match(name):
            fail("name", "Lowercase letters, digits and '-', starting with a letter and not ending with '-'.")
    else:
        base = image.rsplit("/", 1)[-1].split("@")[0].split(":")[0] if image else "workload"
        name = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:MAX_NAME].rstrip("-") or "workload"
        if not name[0].isalpha():
            name = f"w-{name}"[:MAX_NAME].rstrip("-")

    # GPU type, count, quota, node size, CUDA fit
    gpu_slug = raw.get("gpu_type") or ""
    gpu_facts = facts.gpu_types.get(gpu_slug) if isinstance(gpu_slug, str) else None
    if not gpu_slug:
        fail("gpu_type", "Choose a GPU type.")
    elif gpu_facts is None:
        fail("gpu_type", f"Unknown GPU type {gpu_slug!r}.")
    elif not gpu_facts.enabled:
        fail("gpu_type", f"{gpu_facts.display_name} GPUs are currently disabled.")
    elif gpu_facts.quota is None:
        fail("gpu_type", f"Your team has no quota for {gpu_facts.display_name} GPUs.")
    gpu_count = raw.get("gpu_count", 1)
    if not _is_int(gpu_count):
        fail("gpu_count", "Must be a whole number.")
        gpu_count = 0
    gpu_count = int(gpu_count)
    if gpu_count < 1:
        fail("gpu_count", "At least 1 GPU.")
    elif gpu_facts is not None and gpu_facts.enabled and gpu_facts.quota is not None:
        if gpu_count > gpu_facts.quota:
            fail("gpu_count", f"Your team's quota for {gpu_facts.display_name} is {gpu_facts.quota} GPUs.")
        elif gpu_facts.largest_node == 0:
            fail("gpu_count", f"No ready {gpu_facts.display_name} node is in the cluster right now.")
        elif gpu_count > gpu_facts.largest_node:
            fail("gpu_count", f"The largest {gpu_facts.display_name} node has {gpu_facts.largest_node} GPUs.")
    if catalog is not None and catalog.cuda_version and gpu_facts is not None and gpu_facts.max_cuda:
        needed = cuda_tuple(catalog.cuda_version)
        if needed > cuda_tuple(gpu_facts.max_cuda):
            fitting = sorted(
                g.display_name
                for g in facts.gpu_types.values()
                if g.enabled and g.quota and g.max_cuda and cuda_tuple(g.max_cuda) >= needed
            )
            hint = f" It runs on: {', '.join(fitting)}." if fitting else " No GPU type here runs it."
            fail(
                "image",
                f"This image needs CUDA {catalog.cuda_version}, but {gpu_facts.display_name} drivers support "
                f"up to CUDA {gpu_facts.max_cuda}.{hint}",
            )

    # command and arguments
    command = _string_list(raw.get("command"), "command", fail, catalog.default_command if catalog else ())
    args = _string_list(raw.get("args"), "args", fail, catalog.default_args if catalog else ())
    if sum(len(x) for x in command + args) > MAX_COMMAND_TOTAL:
        fail("args", f"Command and arguments together may be at most {MAX_COMMAND_TOTAL // 1024} KiB.")

    env = _env(raw.get("env"), fail)
    secrets = validate_secret_refs(raw.get("secrets"), facts.secrets, {n for n, _ in env}, fail)
    datasets = validate_datasets(raw.get("datasets"), facts.datasets, fail)
    cpu, memory = validate_pod_size(raw, gpu_facts if gpu_facts and gpu_facts.enabled else None, gpu_count, fail)

    # port
    port = raw.get("port")
    if port in (None, ""):
        port = catalog.default_port if catalog and kind == "service" else None
    if port is not None:
        if not _is_int(port) or not 1 <= int(port) <= 65535:
            fail("port", "A port number between 1 and 65535.")
            port = None
        elif kind == "batch":
            if raw.get("port") not in (None, ""):
                fail("port", "Only services listen on a port; leave it empty for a batch job.")
            port = None
        else:
            port = int(port)
    if kind == "service" and port is None and "port" not in errors:
        fail("port", "A service needs the port it listens on.")

    # time limit
    limit = raw.get("time_limit_seconds")
    if limit in (None, ""):
        limit = facts.default_time_limit[kind]
    if not _is_int(limit):
        fail("time_limit_seconds", "Must be a whole number of seconds.")
        limit = 0
    limit = int(limit)
    if "time_limit_seconds" not in errors and not facts.min_time_limit <= limit <= facts.max_time_limit:
        fail(
            "time_limit_seconds",
            f"Between {_duration(facts.min_time_limit)} and {_duration(facts.max_time_limit)}.",
        )

    # priority
    priority = raw.get("priority", 0)
    if priority in (None, ""):
        priority = 0
    if not _is_int(priority) or not MIN_PRIORITY <= int(priority) <= MAX_PRIORITY:
        fail("priority", f"A whole number between {MIN_PRIORITY} and {MAX_PRIORITY}.")
        priority = 0
    elif int(priority) != 0 and not facts.may_set_priority:
        fail("priority", "Only team managers can set a priority.")
    priority = int(priority)

    # restartable: a preempted batch job is requeued instead of failed (a service always ends)
    restartable = raw.get("restartable", False)
    if restartable in (None, ""):
        restartable = False
    if not isinstance(restartable, bool):
        fail("restartable", "true or false.")
        restartable = False
    elif restartable and kind == "service":
        fail("restartable", "Only batch jobs can be restarted after preemption; a preempted service ends.")

    if facts.budget_exhausted:
        fail("team", facts.budget_message or "Your team has used its GPU-hour budget for this month.")

    if errors:
        raise SubmissionInvalid(errors)
    return CleanSubmission(
        name=name,
        kind=kind,
        image=image,
        catalog_image_id=catalog.id if catalog else None,
        gpu_type=gpu_slug,
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
        restartable=bool(restartable),
    )


MAX_DATASETS = 16


def validate_root(catalog: CatalogFacts | None, fail) -> None:
    """An image that needs root runs only once an admin allowed its catalog entry; every other workload
    runs as a fixed non-root uid (jobs/kube/objects.py), so there is nothing to check for it."""
    if catalog is not None and catalog.needs_root and not catalog.root_allowed:
        fail(
            "image",
            "This image needs to run as root, and an administrator has not allowed that for it. "
            "Choose another image or ask a portal administrator.",
        )


def validate_pod_size(
    raw: Mapping[str, Any], gpu: GpuTypeFacts | None, gpu_count: int, fail
) -> tuple[int | None, int | None]:
    """`cpu_millicores` / `memory_mib` for the whole pod: from the type's default per GPU up to its limit per
    GPU (times the GPUs asked for). Empty: the default."""
    sizes: list[int | None] = []
    for name, default, limit, unit in (
        ("cpu_millicores", gpu.cpu_per_gpu if gpu else 0, gpu.max_cpu_per_gpu if gpu else None, "millicores"),
        ("memory_mib", gpu.memory_per_gpu if gpu else 0, gpu.max_memory_per_gpu if gpu else None, "MiB"),
    ):
        value = raw.get(name)
        if value in (None, ""):
            sizes.append(None)
            continue
        if not _is_int(value):
            fail(name, "Must be a whole number.")
            sizes.append(None)
            continue
        value = int(value)
        sizes.append(value)
        if gpu is None or gpu_count < 1:
            continue  # the GPU type or count is already wrong; its limit cannot be judged
        low, high = default * gpu_count, (limit or default) * gpu_count
        if not low <= value <= high:
            fail(name, f"Between {low} and {high} {unit} for {gpu_count} {gpu.display_name} GPU(s).")
    return sizes[0], sizes[1]


def validate_datasets(value: Any, allowed: Mapping[str, bool], fail) -> tuple[str, ...]:
    """`datasets`: names of datasets the team may use (each mounted read-only at /datasets/<name>)."""
    if value in (None, "", []):
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        fail("datasets", "A list of dataset names.")
        return ()
    if len(value) > MAX_DATASETS:
        fail("datasets", f"At most {MAX_DATASETS} datasets.")
        return ()
    clean: list[str] = []
    for name in value:
        if name not in allowed:
            fail("datasets", f"No dataset named {name[:40]!r}.")
        elif not allowed[name]:
            fail("datasets", f"Your team may not use the dataset {name}; ask an admin.")
        elif name in clean:
            fail("datasets", f"{name} is given twice.")
        else:
            clean.append(name)
    return tuple(clean)


MAX_SECRET_REFS = 32


def validate_secret_refs(
    value: Any, available: Mapping[str, str], env_names: set[str], fail
) -> tuple[tuple[str, str, str], ...]:
    """`secrets`: [{"name": <stored secret>, "env": <variable, optional>}] or a list of names.

    Each must be a secret the user may use; no secret twice; an env variable neither reserved nor
    clashing with a plain variable or another secret's."""
    if value in (None, "", []):
        return ()
    if not isinstance(value, list | tuple):
        fail("secrets", 'A list of {"name": <secret>, "env": <VARIABLE>} (env optional).')
        return ()
    if len(value) > MAX_SECRET_REFS:
        fail("secrets", f"At most {MAX_SECRET_REFS} secrets.")
        return ()
    clean: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    used_env = set(env_names)
    for item in value:
        ref = {"name": item} if isinstance(item, str) else item
        if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or set(ref) - {"name", "env"}:
            fail("secrets", 'Each item is a secret name or {"name": <secret>, "env": <VARIABLE>}.')
            continue
        name, env_name = ref["name"], ref.get("env") or ""
        if name not in available:
            fail("secrets", f"No secret named {name[:40]!r} is available to you (store it first).")
            continue
        if name in seen:
            fail("secrets", f"{name} is given twice.")
            continue
        if env_name:
            if not isinstance(env_name, str) or not ENV_NAME_RE.match(env_name) or len(env_name) > MAX_ENV_NAME:
                fail("secrets", f"{str(env_name)[:40]!r} is not a valid variable name.")
                continue
            if env_name in RESERVED_ENV or env_name.startswith(RESERVED_ENV_PREFIXES):
                fail("secrets", f"{env_name} is set by the portal and cannot be overridden.")
                continue
            if env_name in used_env:
                fail("secrets", f"{env_name} clashes with another variable of the same name.")
                continue
            used_env.add(env_name)
        seen.add(name)
        clean.append((name, available[name], env_name))
    return tuple(clean)


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and re.fullmatch(r"-?\d{1,9}", value.strip()) is not None


def _string_list(value: Any, field_name: str, fail, default: tuple[str, ...]) -> tuple[str, ...]:
    if value in (None, ""):
        return tuple(default)
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        fail(field_name, "A list of strings (each one argument; no shell parsing is done).")
        return ()
    if len(value) > MAX_LIST_ITEMS:
        fail(field_name, f"At most {MAX_LIST_ITEMS} items.")
    for item in value:
        if len(item) > MAX_ITEM_CHARS:
            fail(field_name, f"Each item may be at most {MAX_ITEM_CHARS} characters.")
            break
        if "\x00" in item:
            fail(field_name, "Items may not contain NUL characters.")
            break
    return tuple(value)


def _env(value: Any, fail) -> tuple[tuple[str, str], ...]:
    if value in (None, "", [], {}):
        return ()
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, list | tuple) and all(isinstance(v, Mapping) for v in value):
        pairs = [(v.get("name"), v.get("value", "")) for v in value]
    else:
        fail("env", 'A mapping of NAME to value, or a list of {"name": ..., "value": ...}.')
        return ()
    if len(pairs) > MAX_ENV_VARS:
        fail("env", f"At most {MAX_ENV_VARS} variables.")
        return ()
    seen: set[str] = set()
    total = 0
    clean: list[tuple[str, str]] = []
    for name, val in pairs:
        if not isinstance(name, str) or not ENV_NAME_RE.match(name) or len(name) > MAX_ENV_NAME:
            fail(
                "env",
                f"{str(name)[:40]!r} is not a valid variable name (letters, digits, '_'; not starting with a digit).",
            )
            continue
        if name in RESERVED_ENV or name.startswith(RESERVED_ENV_PREFIXES):
            fail("env", f"{name} is set by the portal and cannot be overridden.")
            continue
        if name in seen:
            fail("env", f"{name} is given twice.")
            continue
        if not isinstance(val, str):
            if isinstance(val, bool) or not isinstance(val, int | float):
                fail("env", f"The value of {name} must be text.")
                continue
            val = str(val)
        if len(val) > MAX_ENV_VALUE:
            fail("env", f"The value of {name} is longer than {MAX_ENV_VALUE // 1024} KiB.")
            continue
        if "\x00" in val:
            fail("env", f"The value of {name} contains a NUL character.")
            continue
        total += len(name) + len(val)
        seen.add(name)
        clean.append((name, val))
    if total > MAX_ENV_TOTAL:
        fail("env", f"All variables together may be at most {MAX_ENV_TOTAL // 1024} KiB.")
    return tuple(clean)


def _duration(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} day(s)"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} hour(s)"
    if seconds % 60 == 0:
        return f"{seconds // 60} minute(s)"
    return f"{seconds} s"
