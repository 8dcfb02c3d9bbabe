"""Checking a submission: a pure function of what was asked and the facts it is judged against.

`validate_submission` gathers no data itself; `jobs.services.submission.intake` looks the facts up (GPU types,
quotas, node sizes, registries, budget) and passes them in. That keeps every rule testable without a
database, and lets a property test feed it generated specs.

Each field has its own small check (`check_kind`, `check_image`, `check_gpu_count`, ...): a pure
function from the raw value (and what it depends on) to `Checked(value, problems)`, where each problem
names its field. `validate_submission` only composes them. The limits themselves (lengths, ranges,
choices) are described once in jobs.services.spec_fields, which the launch form and the API's schema
read too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from jobs.services.spec_fields import (
    CHECKPOINT_WORKSPACES,
    FIELDS,
    MAX_COMMAND_TOTAL,
    MAX_DATASETS,
    MAX_ENV_NAME,
    MAX_ENV_TOTAL,
    MAX_ENV_VALUE,
    MAX_ENV_VARS,
    MAX_IMAGE,
    MAX_ITEM_CHARS,
    MAX_LIST_ITEMS,
    MAX_NAME,
    MAX_NODES,
    MAX_PORT,
    MAX_PRIORITY,
    MAX_RETRY_LIMIT,
    MAX_RETRYABLE_EXIT_CODES,
    MAX_SECRET_REFS,
    MIN_PORT,
    MIN_PRIORITY,
    TOPOLOGY_CHOICES,
)

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
# Under the portal's prefix but the submitter's to set: a sweep member's number and the sweep's size
# (`gpuportal submit --array N` sets them; the portal sets nothing under these names).
SUBMITTER_ENV = {"GPUPORTAL_ARRAY_INDEX", "GPUPORTAL_ARRAY_SIZE"}


def env_reserved(name: str) -> bool:
    """Whether the portal sets this variable itself, so a submission may not."""
    return name in RESERVED_ENV or (name.startswith(RESERVED_ENV_PREFIXES) and name not in SUBMITTER_ENV)


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
    per_container: int | None = None  # most devices one container may take (slices: 1 unless allowed more)
    unit: str = "whole"  # whole | mig | time_sliced (jobs.gpu_shares): how a refusal names one device
    nodes: int = 0  # ready, schedulable nodes of this type: the most ranks a gang job may have


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
    retry_limit: int | None = None  # None: the team's default
    retryable_exit_codes: tuple[int, ...] = ()
    checkpoint_workspace: str = "home"
    nodes: int = 1  # a gang job's ranks; gpu_count is then GPUs per node
    topology: str = ""


class SubmissionInvalid(Exception):
    """The submission breaks one or more rules; `errors` maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{f}: {' '.join(m)}" for f, m in errors.items()))
        self.errors = errors


# --- one check per field --------------------------------------------------------------------------
T = TypeVar("T")
Problem = tuple[str, str]  # (field, message)


@dataclass(frozen=True)
class Checked(Generic[T]):
    """A field's clean value (a stand-in when it is wrong, so later checks can go on) and its problems."""

    value: T
    problems: tuple[Problem, ...] = ()


def _refused(value: T, field_name: str, *messages: str) -> Checked[T]:
    return Checked(value, tuple((field_name, m) for m in messages))


CHOOSE_KIND = "Choose 'batch' or 'service'."
CHOOSE_IMAGE = "Choose an image from the catalog or give an image reference."
NOT_A_REFERENCE = "Not a valid image reference (expected [registry/]name[:tag][@sha256:digest])."
NAME_RULE = "Lowercase letters, digits and '-', starting with a letter and not ending with '-'."
CHOOSE_GPU_TYPE = "Choose a GPU type."
AT_LEAST_ONE_GPU = "At least 1 GPU."
WHOLE_NUMBER = "Must be a whole number."
PORT_RANGE = f"A port number between {MIN_PORT} and {MAX_PORT}."
BATCH_HAS_NO_PORT = "Only services listen on a port; leave it empty for a batch job."
SERVICE_NEEDS_PORT = "A service needs the port it listens on."
PRIORITY_RANGE = f"A whole number between {MIN_PRIORITY} and {MAX_PRIORITY}."
MANAGERS_SET_PRIORITY = "Only team managers can set a priority."
RESTARTABLE_SERVICE = "Only batch jobs can be restarted after preemption; a preempted service ends."
BUDGET_USED = "Your team has used its GPU-hour budget for this month."


def check_unknown_fields(raw: Mapping[str, Any]) -> Checked[None]:
    return Checked(None, tuple((name, "Unknown field.") for name in sorted(set(raw) - set(FIELDS))))


def check_kind(value: Any) -> Checked[str]:
    kind = value or "batch"
    if kind not in ("batch", "service"):
        return _refused("batch", "kind", CHOOSE_KIND)
    return Checked(kind)


@dataclass(frozen=True)
class ImageChoice:
    image: str
    catalog: CatalogFacts | None  # the catalog entry chosen, or the one a custom reference names


def check_image(catalog_id: Any, image: Any, *, kind: str, facts: Facts) -> Checked[ImageChoice]:
    """A catalog entry (by id), or a custom reference from an allowed registry (which may name a
    catalog entry, whose defaults then apply)."""
    if catalog_id not in (None, ""):
        return _catalog_image(catalog_id, image, kind=kind, facts=facts)
    if not isinstance(image, str) or not image:
        return _refused(ImageChoice("", None), "image", CHOOSE_IMAGE)
    return _custom_image(image, facts)


def _catalog_image(catalog_id: Any, image: Any, *, kind: str, facts: Facts) -> Checked[ImageChoice]:
    if not _is_int(catalog_id) or int(catalog_id) not in facts.catalog:
        # A custom image given beside it is still judged on its own.
        custom = _custom_image(image, facts) if isinstance(image, str) and image else Checked(ImageChoice("", None))
        return Checked(custom.value, (("catalog_image", "No such image in the catalog."), *custom.problems))
    entry = facts.catalog[int(catalog_id)]
    problems: list[Problem] = []
    if not entry.enabled:
        problems.append(("catalog_image", "This catalog image is no longer offered."))
    elif entry.suits not in ("any", kind):
        problems.append(("catalog_image", f"This image is meant for {entry.suits} workloads, not {kind}."))
    if image and image != entry.reference:
        problems.append(("image", "Give either a catalog image or a custom image reference, not both."))
    return Checked(ImageChoice(entry.reference, entry), tuple(problems))


def _custom_image(image: str, facts: Facts) -> Checked[ImageChoice]:
    reference = parse_image_reference(image)
    if reference is None:
        return _refused(ImageChoice(image, None), "image", NOT_A_REFERENCE)
    named = next((c for c in facts.catalog.values() if c.reference == image and c.enabled), None)
    if named is not None:
        return Checked(ImageChoice(image, named))
    if reference.registry not in facts.allowed_registries:
        allowed = ", ".join(sorted(facts.allowed_registries)) or "none"
        message = f"Images from {reference.registry} are not allowed here (allowed registries: {allowed})."
        return _refused(ImageChoice(image, None), "image", message)
    return Checked(ImageChoice(image, None))


def check_root(catalog: CatalogFacts | None) -> Checked[None]:
    """An image that needs root runs only once an admin allowed its catalog entry; every other workload
    runs as a fixed non-root uid (jobs/kube/objects.py), so there is nothing to check for it."""
    if catalog is not None and catalog.needs_root and not catalog.root_allowed:
        return _refused(
            None,
            "image",
            "This image needs to run as root, and an administrator has not allowed that for it. "
            "Choose another image or ask a portal administrator.",
        )
    return Checked(None)


def default_name(image: str) -> str:
    """A DNS label made from the image's last path component (`pytorch` for nvcr.io/nvidia/pytorch:24)."""
    base = image.rsplit("/", 1)[-1].split("@")[0].split(":")[0] if image else "workload"
    name = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[:MAX_NAME].rstrip("-") or "workload"
    if not name[0].isalpha():
        name = f"w-{name}"[:MAX_NAME].rstrip("-")
    return name


def check_name(value: Any, *, image: str) -> Checked[str]:
    if not isinstance(value, str):
        return _refused(default_name(image), "name", "Must be text.")
    if not value:
        return Checked(default_name(image))
    if len(value) > MAX_NAME:
        return _refused(value, "name", f"At most {MAX_NAME} characters.")
    if not NAME_RE.match(value):
        return _refused(value, "name", NAME_RULE)
    return Checked(value)


def check_gpu_type(slug: Any, gpu_types: Mapping[str, GpuTypeFacts]) -> Checked[GpuTypeFacts | None]:
    """The type's facts when the slug is known (even if it may not be used, so that later checks can
    still name it); None when it is not."""
    if not slug:
        return _refused(None, "gpu_type", CHOOSE_GPU_TYPE)
    gpu = gpu_types.get(slug) if isinstance(slug, str) else None
    if gpu is None:
        return _refused(None, "gpu_type", f"Unknown GPU type {slug!r}.")
    if not gpu.enabled:
        return _refused(gpu, "gpu_type", f"{gpu.display_name} GPUs are currently disabled.")
    if gpu.quota is None:
        return _refused(gpu, "gpu_type", f"Your team has no quota for {gpu.display_name} GPUs.")
    return Checked(gpu)


def check_gpu_count(value: Any, gpu: GpuTypeFacts | None) -> Checked[int]:
    """At least one; within the team's quota and the largest ready node of a usable type."""
    if not _is_int(value):
        return _refused(0, "gpu_count", WHOLE_NUMBER, AT_LEAST_ONE_GPU)
    count = int(value)
    if count < 1:
        return _refused(count, "gpu_count", AT_LEAST_ONE_GPU)
    if gpu is None or not gpu.enabled or gpu.quota is None:
        return Checked(count)  # the type is already wrong; its limits cannot be judged
    if gpu.per_container is not None and count > gpu.per_container:
        return _refused(count, "gpu_count", per_container_message(gpu))
    if count > gpu.quota:
        return _refused(count, "gpu_count", f"Your team's quota for {gpu.display_name} is {gpu.quota} GPUs.")
    if gpu.largest_node == 0:
        return _refused(count, "gpu_count", f"No ready {gpu.display_name} node is in the cluster right now.")
    if count > gpu.largest_node:
        return _refused(count, "gpu_count", f"The largest {gpu.display_name} node has {gpu.largest_node} GPUs.")
    return Checked(count)


def per_container_message(gpu: GpuTypeFacts) -> str:
    what = {"mig": "MIG slice", "time_sliced": "time-sliced share"}.get(gpu.unit, "GPU")
    if gpu.per_container == 1:
        return f"{gpu.display_name} is a {what}: one per container. For more, choose a larger slice or a whole GPU."
    return f"{gpu.display_name} allows at most {gpu.per_container} per container."


def check_nodes(value: Any, *, kind: str, gpu: GpuTypeFacts | None, per_node: int) -> Checked[int]:
    """A batch job's ranks, one per node: at most the ready nodes of its type, the whole gang within
    the team's quota (nodes times GPUs per node is what it holds)."""
    if value in (None, ""):
        return Checked(1)
    if not _is_int(value) or int(value) < 1:
        return _refused(1, "nodes", "A whole number, at least 1.")
    nodes = int(value)
    if nodes == 1:
        return Checked(1)
    if kind != "batch":
        return _refused(1, "nodes", "Only a batch job can span several nodes.")
    if nodes > MAX_NODES:
        return _refused(nodes, "nodes", f"At most {MAX_NODES} nodes.")
    if gpu is None or not gpu.enabled or gpu.quota is None or per_node < 1:
        return Checked(nodes)
    if nodes > gpu.nodes:
        return _refused(nodes, "nodes", f"The cluster has {gpu.nodes} ready {gpu.display_name} node(s).")
    if nodes * per_node > gpu.quota:
        return _refused(
            nodes,
            "nodes",
            f"{nodes} nodes × {per_node} {gpu.display_name} = {nodes * per_node} GPUs, above your team's quota "
            f"of {gpu.quota}.",
        )
    return Checked(nodes)


def check_topology(value: Any, *, nodes: int) -> Checked[str]:
    choices = {choice for choice, _ in TOPOLOGY_CHOICES}
    if value in (None, ""):
        return Checked("")
    if not isinstance(value, str) or value not in choices:
        return _refused("", "topology", "Choose '', 'preferred' or 'required'.")
    if nodes == 1:
        return Checked("")  # one rank shares everything with itself
    return Checked(value)


def check_gang_command(command: tuple[str, ...], *, nodes: int) -> Checked[None]:
    """A gang's ranks start the command through the portal's wrapper (it hands them rank 0's address),
    so the command must be given, not left to the image's entrypoint."""
    if nodes > 1 and not command:
        return _refused(None, "command", "A job on several nodes needs a command (for example torchrun ...).")
    return Checked(None)


def check_cuda_fit(
    catalog: CatalogFacts | None, gpu: GpuTypeFacts | None, gpu_types: Mapping[str, GpuTypeFacts]
) -> Checked[None]:
    """A catalog image's CUDA version must run on the type's drivers; the message names the types it
    would run on."""
    if catalog is None or not catalog.cuda_version or gpu is None or not gpu.max_cuda:
        return Checked(None)
    needed = cuda_tuple(catalog.cuda_version)
    if needed <= cuda_tuple(gpu.max_cuda):
        return Checked(None)
    fitting = sorted(
        g.display_name
        for g in gpu_types.values()
        if g.enabled and g.quota and g.max_cuda and cuda_tuple(g.max_cuda) >= needed
    )
    hint = f" It runs on: {', '.join(fitting)}." if fitting else " No GPU type here runs it."
    return _refused(
        None,
        "image",
        f"This image needs CUDA {catalog.cuda_version}, but {gpu.display_name} drivers support "
        f"up to CUDA {gpu.max_cuda}.{hint}",
    )


def check_arguments(value: Any, field_name: str, default: tuple[str, ...]) -> Checked[tuple[str, ...]]:
    """`command` or `args`: a list of strings, each one argument (no shell parsing); empty: the default."""
    if value in (None, ""):
        return Checked(tuple(default))
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        return _refused((), field_name, "A list of strings (each one argument; no shell parsing is done).")
    messages = []
    if len(value) > MAX_LIST_ITEMS:
        messages.append(f"At most {MAX_LIST_ITEMS} items.")
    for item in value:  # the first bad item is named; one message is enough
        if len(item) > MAX_ITEM_CHARS:
            messages.append(f"Each item may be at most {MAX_ITEM_CHARS} characters.")
            break
        if "\x00" in item:
            messages.append("Items may not contain NUL characters.")
            break
    return _refused(tuple(value), field_name, *messages)


def check_command_total(command: tuple[str, ...], args: tuple[str, ...]) -> Checked[None]:
    if sum(len(x) for x in command + args) > MAX_COMMAND_TOTAL:
        return _refused(None, "args", f"Command and arguments together may be at most {MAX_COMMAND_TOTAL // 1024} KiB.")
    return Checked(None)


def _env_pairs(value: Any) -> list[tuple[Any, Any]] | None:
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, list | tuple) and all(isinstance(v, Mapping) for v in value):
        return [(v.get("name"), v.get("value", "")) for v in value]
    return None


def _env_problem(name: Any, value: Any, seen: set[str]) -> str | None:
    """What is wrong with one variable, or None."""
    if not isinstance(name, str) or not ENV_NAME_RE.match(name) or len(name) > MAX_ENV_NAME:
        return f"{str(name)[:40]!r} is not a valid variable name (letters, digits, '_'; not starting with a digit)."
    if env_reserved(name):
        return f"{name} is set by the portal and cannot be overridden."
    if name in seen:
        return f"{name} is given twice."
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return f"The value of {name} must be text."
    if len(str(value)) > MAX_ENV_VALUE:
        return f"The value of {name} is longer than {MAX_ENV_VALUE // 1024} KiB."
    if "\x00" in str(value):
        return f"The value of {name} contains a NUL character."
    return None


def check_env(value: Any) -> Checked[tuple[tuple[str, str], ...]]:
    """`env`: {NAME: value} or [{"name": ..., "value": ...}]; names valid, not the portal's, not twice;
    values text (numbers are turned into text) within the size caps."""
    if value in (None, "", [], {}):
        return Checked(())
    pairs = _env_pairs(value)
    if pairs is None:
        return _refused((), "env", 'A mapping of NAME to value, or a list of {"name": ..., "value": ...}.')
    if len(pairs) > MAX_ENV_VARS:
        return _refused((), "env", f"At most {MAX_ENV_VARS} variables.")
    messages: list[str] = []
    clean: list[tuple[str, str]] = []
    for name, val in pairs:
        problem = _env_problem(name, val, {n for n, _ in clean})
        if problem:
            messages.append(problem)
        else:
            clean.append((name, str(val)))
    if sum(len(n) + len(v) for n, v in clean) > MAX_ENV_TOTAL:
        messages.append(f"All variables together may be at most {MAX_ENV_TOTAL // 1024} KiB.")
    return _refused(tuple(clean), "env", *messages)


def check_secret_refs(
    value: Any, available: Mapping[str, str], env_names: set[str]
) -> Checked[tuple[tuple[str, str, str], ...]]:
    """`secrets`: [{"name": <stored secret>, "env": <variable, optional>}] or a list of names.

    Each must be a secret the user may use; no secret twice; an env variable neither reserved nor
    clashing with a plain variable or another secret's. The value: (name, Kubernetes name, variable)."""
    if value in (None, "", []):
        return Checked(())
    if not isinstance(value, list | tuple):
        return _refused((), "secrets", 'A list of {"name": <secret>, "env": <VARIABLE>} (env optional).')
    if len(value) > MAX_SECRET_REFS:
        return _refused((), "secrets", f"At most {MAX_SECRET_REFS} secrets.")
    messages: list[str] = []
    clean: list[tuple[str, str, str]] = []
    used_env = set(env_names)
    for item in value:
        ref = {"name": item} if isinstance(item, str) else item
        problem = _secret_ref_problem(ref, available, {n for n, _, _ in clean}, used_env)
        if problem:
            messages.append(problem)
            continue
        env_name = ref.get("env") or ""
        if env_name:
            used_env.add(env_name)
        clean.append((ref["name"], available[ref["name"]], env_name))
    return _refused(tuple(clean), "secrets", *messages)


def _secret_ref_problem(ref: Any, available: Mapping[str, str], seen: set[str], used_env: set[str]) -> str | None:
    if not isinstance(ref, Mapping) or not isinstance(ref.get("name"), str) or set(ref) - {"name", "env"}:
        return 'Each item is a secret name or {"name": <secret>, "env": <VARIABLE>}.'
    name, env_name = ref["name"], ref.get("env") or ""
    if name not in available:
        return f"No secret named {name[:40]!r} is available to you (store it first)."
    if name in seen:
        return f"{name} is given twice."
    if not env_name:
        return None
    if not isinstance(env_name, str) or not ENV_NAME_RE.match(env_name) or len(env_name) > MAX_ENV_NAME:
        return f"{str(env_name)[:40]!r} is not a valid variable name."
    if env_reserved(env_name):
        return f"{env_name} is set by the portal and cannot be overridden."
    if env_name in used_env:
        return f"{env_name} clashes with another variable of the same name."
    return None


def check_datasets(value: Any, allowed: Mapping[str, bool]) -> Checked[tuple[str, ...]]:
    """`datasets`: names of datasets the team may use (each mounted read-only at /datasets/<name>)."""
    if value in (None, "", []):
        return Checked(())
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        return _refused((), "datasets", "A list of dataset names.")
    if len(value) > MAX_DATASETS:
        return _refused((), "datasets", f"At most {MAX_DATASETS} datasets.")
    messages: list[str] = []
    clean: list[str] = []
    for name in value:
        if name not in allowed:
            messages.append(f"No dataset named {name[:40]!r}.")
        elif not allowed[name]:
            messages.append(f"Your team may not use the dataset {name}; ask an admin.")
        elif name in clean:
            messages.append(f"{name} is given twice.")
        else:
            clean.append(name)
    return _refused(tuple(clean), "datasets", *messages)


def check_pod_size(
    raw: Mapping[str, Any], gpu: GpuTypeFacts | None, gpu_count: int
) -> Checked[tuple[int | None, int | None]]:
    """`cpu_millicores` / `memory_mib` for the whole pod: from the type's default per GPU up to its limit per
    GPU (times the GPUs asked for). Empty: the default. `gpu` None: the type is wrong or disabled."""
    sizes: list[int | None] = []
    problems: list[Problem] = []
    for name, default, limit, unit in (
        ("cpu_millicores", gpu.cpu_per_gpu if gpu else 0, gpu.max_cpu_per_gpu if gpu else None, "millicores"),
        ("memory_mib", gpu.memory_per_gpu if gpu else 0, gpu.max_memory_per_gpu if gpu else None, "MiB"),
    ):
        value = raw.get(name)
        if value in (None, ""):
            sizes.append(None)
            continue
        if not _is_int(value):
            problems.append((name, WHOLE_NUMBER))
            sizes.append(None)
            continue
        value = int(value)
        sizes.append(value)
        if gpu is None or gpu_count < 1:
            continue  # the GPU type or count is already wrong; its limit cannot be judged
        low, high = default * gpu_count, (limit or default) * gpu_count
        if not low <= value <= high:
            problems.append((name, f"Between {low} and {high} {unit} for {gpu_count} {gpu.display_name} GPU(s)."))
    return Checked((sizes[0], sizes[1]), tuple(problems))


def check_port(value: Any, *, kind: str, catalog: CatalogFacts | None) -> Checked[int | None]:
    """A service listens on a port (the catalog's default when left empty); a batch job on none."""
    given = value not in (None, "")
    if not given:
        value = catalog.default_port if catalog and kind == "service" else None
    if value is None:
        return _refused(None, "port", SERVICE_NEEDS_PORT) if kind == "service" else Checked(None)
    if not _is_int(value) or not MIN_PORT <= int(value) <= MAX_PORT:
        return _refused(None, "port", PORT_RANGE)
    if kind == "batch":
        return _refused(None, "port", BATCH_HAS_NO_PORT) if given else Checked(None)
    return Checked(int(value))


def check_time_limit(value: Any, *, kind: str, facts: Facts) -> Checked[int]:
    """Seconds, between the portal's minimum and maximum; empty: the default for the kind."""
    if value in (None, ""):
        value = facts.default_time_limit[kind]
    if not _is_int(value):
        return _refused(0, "time_limit_seconds", "Must be a whole number of seconds.")
    limit = int(value)
    if not facts.min_time_limit <= limit <= facts.max_time_limit:
        message = f"Between {_duration(facts.min_time_limit)} and {_duration(facts.max_time_limit)}."
        return _refused(limit, "time_limit_seconds", message)
    return Checked(limit)


def check_priority(value: Any, *, may_set_priority: bool) -> Checked[int]:
    if value in (None, ""):
        value = 0
    if not _is_int(value) or not MIN_PRIORITY <= int(value) <= MAX_PRIORITY:
        return _refused(0, "priority", PRIORITY_RANGE)
    if int(value) != 0 and not may_set_priority:
        return _refused(int(value), "priority", MANAGERS_SET_PRIORITY)
    return Checked(int(value))


def check_restartable(value: Any, *, kind: str) -> Checked[bool]:
    """A preempted batch job is requeued instead of failed when restartable; a service always ends."""
    if value in (None, ""):
        return Checked(False)
    if not isinstance(value, bool):
        return _refused(False, "restartable", "true or false.")
    if value and kind == "service":
        return _refused(True, "restartable", RESTARTABLE_SERVICE)
    return Checked(value)


RETRY_BATCH_ONLY = "Only restartable batch jobs are retried; leave it empty for a service."


def check_retry(raw: Mapping[str, Any], *, kind: str) -> Checked[tuple[int | None, tuple[int, ...], str]]:
    """The retry limit (0..MAX_RETRY_LIMIT or empty for the team's default), the exit codes of its own that
    are retried (1..255, at most MAX_RETRYABLE_EXIT_CODES) and where its checkpoint directory lies."""
    limit, codes, workspace = raw.get("retry_limit"), raw.get("retryable_exit_codes"), raw.get("checkpoint_workspace")
    problems: list[Problem] = []
    if limit in (None, ""):
        limit = None
    elif not _is_int(limit) or not 0 <= int(limit) <= MAX_RETRY_LIMIT:
        problems.append(
            ("retry_limit", f"a whole number from 0 to {MAX_RETRY_LIMIT}, or empty for the team's default.")
        )
        limit = None
    else:
        limit = int(limit)
    if codes in (None, "", []):
        codes = ()
    elif (
        not isinstance(codes, list | tuple)
        or len(codes) > MAX_RETRYABLE_EXIT_CODES
        or not all(_is_int(c) and 1 <= int(c) <= 255 for c in codes)
    ):
        problems.append(
            ("retryable_exit_codes", f"a list of at most {MAX_RETRYABLE_EXIT_CODES} exit codes from 1 to 255.")
        )
        codes = ()
    else:
        codes = tuple(sorted({int(c) for c in codes}))
    if workspace in (None, ""):
        workspace = "home"
    elif workspace not in dict(CHECKPOINT_WORKSPACES):
        problems.append(("checkpoint_workspace", '"home" (your home, the default) or "team" (the shared space).'))
        workspace = "home"
    if kind == "service":
        problems += [(f, RETRY_BATCH_ONLY) for f, v in (("retry_limit", limit), ("retryable_exit_codes", codes)) if v]
    return Checked((limit, codes, workspace), tuple(problems))


def check_budget(facts: Facts) -> Checked[None]:
    if facts.budget_exhausted:
        return _refused(None, "team", facts.budget_message or BUDGET_USED)
    return Checked(None)


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
    nodes = take(check_nodes(raw.get("nodes", 1), kind=kind, gpu=gpu, per_node=gpu_count))
    topology = take(check_topology(raw.get("topology", ""), nodes=nodes))
    take(check_cuda_fit(catalog, gpu, facts.gpu_types))
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


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and re.fullmatch(r"-?\d{1,9}", value.strip()) is not None


def _duration(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400} day(s)"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} hour(s)"
    if seconds % 60 == 0:
        return f"{seconds // 60} minute(s)"
    return f"{seconds} s"
