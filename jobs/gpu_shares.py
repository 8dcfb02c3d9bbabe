"""How much of a physical GPU one device of a GPU type is, and how to say it (issue 40).

A GPU type is a whole GPU, a MIG profile (NVIDIA's `nvidia.com/mig-1g.10gb`: a hardware partition with
its own memory and a seventh of the compute of an A100) or a time-sliced share (a resource the device
plugin advertises N times per GPU, `nvidia.com/gpu.shared`: N containers take turns on one GPU, with no
memory of their own). Quotas count devices of the type; budgets, billing and usage reports count
GPU-equivalents, a device times its share. Pure functions: no database, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

WHOLE, MIG, TIME_SLICED = "whole", "mig", "time_sliced"
KIND_CHOICES = [
    (WHOLE, "Whole GPU"),
    (MIG, "MIG slice (a hardware partition of a GPU)"),
    (TIME_SLICED, "Time-sliced share (several containers take turns on one GPU)"),
]
# Letters whose English name begins with a vowel sound: "an A100", "an H100", "an L4", but "a T4".
_VOWEL_SOUND_LETTERS = set("AEFHILMNORSX")


@dataclass(frozen=True)
class GpuShare:
    """One device of a GPU type: its kind, `parts` of a GPU cut in `of`, on a `physical` GPU."""

    kind: str = WHOLE
    parts: int = 1
    of: int = 1
    physical: str = ""
    memory_mib: int | None = None
    most_per_container: int | None = None  # as the admin set it; None: the kind's default

    @property
    def fraction(self) -> Fraction:
        """The share of one physical GPU (1 for a whole GPU, 1/7 for a 1g.10gb slice)."""
        if self.kind == WHOLE or self.of <= 0:
            return Fraction(1)
        return Fraction(self.parts, self.of)

    @property
    def is_slice(self) -> bool:
        return self.kind != WHOLE

    @property
    def per_container_limit(self) -> int | None:
        """Most devices one container may ask for: slices one unless the type allows more; whole GPUs
        only what a node holds (None here)."""
        if self.most_per_container:
            return self.most_per_container
        return 1 if self.is_slice else None


def share_problems(share: GpuShare) -> dict[str, str]:
    """What is inconsistent in an admin's settings, by field (empty when they make sense)."""
    problems: dict[str, str] = {}
    if share.kind == WHOLE:
        if (share.parts, share.of) != (1, 1):
            problems["share_of"] = "A whole GPU is 1 of 1; choose MIG slice or time-sliced share to cut it."
    elif share.of < 2:
        problems["share_of"] = "How many parts the GPU is cut into: 7 for A100 MIG slices, N for N-way time slicing."
    elif share.parts > share.of:
        problems["share_parts"] = f"A slice cannot be more than the whole GPU ({share.of} parts)."
    elif share.kind == TIME_SLICED and share.parts != 1:
        problems["share_parts"] = "A time-sliced share is one turn of N: 1."
    if share.is_slice and not share.physical:
        problems["physical_gpu"] = "Name the physical GPU the slices are cut from (e.g. A100 80GB)."
    return problems


def article(name: str) -> str:
    """'a' or 'an' for a GPU name as people say it: an A100, an H100, a T4, a Tesla P100."""
    if not name:
        return "a"
    first = name[0]
    spelled = first.isupper() and (len(name) == 1 or not name[1].islower())  # A100, RTX, H100: letter names
    if spelled:
        return "an" if first in _VOWEL_SOUND_LETTERS else "a"
    return "an" if first.lower() in "aeiou" else "a"


def memory_words(mib: int) -> str:
    gb = mib / 1024
    return f"{gb:.0f} GB" if abs(gb - round(gb)) < 0.05 else f"{gb:.1f} GB"


def describe(share: GpuShare, *, display_name: str = "") -> str:
    """The type in words for the Launch page: "1/7 of an A100, 10 GB"."""
    physical = share.physical or display_name
    if not share.is_slice:
        words = f"A whole {physical}" if physical else "A whole GPU"
        return f"{words}, {memory_words(share.memory_mib)}" if share.memory_mib else words
    fraction = share.fraction
    cut = f"{fraction.numerator}/{fraction.denominator} of {article(physical)} {physical}"
    if share.kind == MIG:
        memory = f", {memory_words(share.memory_mib)}" if share.memory_mib else ""
        return f"{cut}{memory}"
    others = share.of - 1
    memory = f"its {memory_words(share.memory_mib)}" if share.memory_mib else "its memory"
    return f"{cut}, time-sliced: takes turns with up to {others} others and shares {memory}"


def equivalents(gpu_seconds: float, share: GpuShare) -> float:
    """GPU-seconds of this type as whole-GPU seconds."""
    return gpu_seconds * float(share.fraction)
