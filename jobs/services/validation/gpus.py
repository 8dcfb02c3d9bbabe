"""The GPUs asked for: the type, how many per node, how many nodes (a gang job), kept together how, and
the pod's CPU and memory that go with them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.services.spec_fields import MAX_NODES, TOPOLOGY_CHOICES
from jobs.services.validation.facts import GpuTypeFacts
from jobs.services.validation.outcome import WHOLE_NUMBER, Checked, Problem, is_int, refused
from spec_rules import topology_problem

CHOOSE_GPU_TYPE = "Choose a GPU type."
AT_LEAST_ONE_GPU = "At least 1 GPU."


def check_gpu_type(slug: Any, gpu_types: Mapping[str, GpuTypeFacts]) -> Checked[GpuTypeFacts | None]:
    """The type's facts when the slug is known (even if it may not be used, so that later checks can
    still name it); None when it is not."""
    if not slug:
        return refused(None, "gpu_type", CHOOSE_GPU_TYPE)
    gpu = gpu_types.get(slug) if isinstance(slug, str) else None
    if gpu is None:
        return refused(None, "gpu_type", f"Unknown GPU type {slug!r}.")
    if not gpu.enabled:
        return refused(gpu, "gpu_type", f"{gpu.display_name} GPUs are currently disabled.")
    if gpu.quota is None:
        return refused(gpu, "gpu_type", f"Your team has no quota for {gpu.display_name} GPUs.")
    return Checked(gpu)


def check_gpu_count(value: Any, gpu: GpuTypeFacts | None) -> Checked[int]:
    """At least one; within the team's quota and the largest ready node of a usable type."""
    if not is_int(value):
        return refused(0, "gpu_count", WHOLE_NUMBER, AT_LEAST_ONE_GPU)
    count = int(value)
    if count < 1:
        return refused(count, "gpu_count", AT_LEAST_ONE_GPU)
    if gpu is None or not gpu.enabled or gpu.quota is None:
        return Checked(count)  # the type is already wrong; its limits cannot be judged
    if gpu.per_container is not None and count > gpu.per_container:
        return refused(count, "gpu_count", per_container_message(gpu))
    if count > gpu.quota:
        return refused(count, "gpu_count", f"Your team's quota for {gpu.display_name} is {gpu.quota} GPUs.")
    if gpu.largest_node == 0:
        return refused(count, "gpu_count", f"No ready {gpu.display_name} node is in the cluster right now.")
    if count > gpu.largest_node:
        return refused(count, "gpu_count", f"The largest {gpu.display_name} node has {gpu.largest_node} GPUs.")
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
    if not is_int(value) or int(value) < 1:
        return refused(1, "nodes", "A whole number, at least 1.")
    nodes = int(value)
    if nodes == 1:
        return Checked(1)
    if kind != "batch":
        return refused(1, "nodes", "Only a batch job can span several nodes.")
    if nodes > MAX_NODES:
        return refused(nodes, "nodes", f"At most {MAX_NODES} nodes.")
    if gpu is None or not gpu.enabled or gpu.quota is None or per_node < 1:
        return Checked(nodes)
    if nodes > gpu.nodes:
        return refused(nodes, "nodes", f"The cluster has {gpu.nodes} ready {gpu.display_name} node(s).")
    if nodes * per_node > gpu.quota:
        return refused(
            nodes,
            "nodes",
            f"{nodes} nodes × {per_node} {gpu.display_name} = {nodes * per_node} GPUs, above your team's quota "
            f"of {gpu.quota}.",
        )
    return Checked(nodes)


def check_topology(value: Any, *, nodes: int | None) -> Checked[str]:
    """`nodes` None: the nodes asked for were refused themselves, so whether they fit a topology is not judged."""
    choices = {choice for choice, _ in TOPOLOGY_CHOICES}
    if value in (None, ""):
        return Checked("")
    if not isinstance(value, str) or value not in choices:
        return refused("", "topology", "Choose '', 'preferred' or 'required'.")
    if nodes is None:
        return Checked("")
    problem = topology_problem(value, nodes)
    if problem:
        return refused("", "topology", problem)
    return Checked(value)


def check_gang_command(command: tuple[str, ...], *, nodes: int) -> Checked[None]:
    """A gang's ranks start the command through the portal's wrapper (it hands them rank 0's address),
    so the command must be given, not left to the image's entrypoint."""
    if nodes > 1 and not command:
        return refused(None, "command", "A job on several nodes needs a command (for example torchrun ...).")
    return Checked(None)


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
        if not is_int(value):
            problems.append((name, WHOLE_NUMBER))
            sizes.append(None)
            continue
        value = int(value)
        sizes.append(value)
        if gpu is None or gpu_count < 1:
            continue  # the GPU type or count is already wrong; its limit cannot be judged
        low, high = default * gpu_count, (limit or default) * gpu_count
        if low == high != value:
            exactly = f"Exactly {low} {unit} for {gpu_count} {gpu.display_name} GPU(s)"
            problems.append((name, f"{exactly}, or leave it empty: this GPU type has one size."))
        elif not low <= value <= high:
            problems.append((name, f"Between {low} and {high} {unit} for {gpu_count} {gpu.display_name} GPU(s)."))
    return Checked((sizes[0], sizes[1]), tuple(problems))
