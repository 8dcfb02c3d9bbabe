"""The datasets mounted read-only into a workload."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jobs.services.spec_fields import MAX_DATASETS
from jobs.services.validation.outcome import Checked, refused


def check_datasets(value: Any, allowed: Mapping[str, bool]) -> Checked[tuple[str, ...]]:
    """`datasets`: names of datasets the team may use (each mounted read-only at /datasets/<name>)."""
    if value in (None, "", []):
        return Checked(())
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        return refused((), "datasets", "A list of dataset names.")
    if len(value) > MAX_DATASETS:
        return refused((), "datasets", f"At most {MAX_DATASETS} datasets.")
    messages: list[str] = []
    clean: list[str] = []
    for name in value:
        if name not in allowed:
            messages.append(f"No dataset named {name[:40]!r}. {_yours(allowed)}")
        elif not allowed[name]:
            messages.append(f"Your team may not use the dataset {name}; ask an admin.")
        elif name in clean:
            messages.append(f"{name} is given twice.")
        else:
            clean.append(name)
    return refused(tuple(clean), "datasets", *messages)


def _yours(allowed: Mapping[str, bool]) -> str:
    """The names this team may give instead (also listed by `GET /api/v1/datasets/` and `gpuportal datasets`)."""
    names = sorted(name for name, may in allowed.items() if may)
    return f"Your team may use: {', '.join(names)}." if names else "Your team may use none; ask an admin."
