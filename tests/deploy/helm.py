"""The Helm chart as the tests see it: rendering lives in devtools/chart.py (shared with `make lint`'s
manifest scan); here are the tests' helpers around it."""

from __future__ import annotations

from typing import Any

import helm_python

from devtools.chart import (
    CHART_DIR,
    CI_VALUES,
    HOOK_ANNOTATION,
    REPO_ROOT,
    TEST_SEAL,
    Manifest,
    load_values,
    render,
    with_seal,
)

__all__ = ["CHART_DIR", "CI_VALUES", "HOOK_ANNOTATION", "REPO_ROOT", "TEST_SEAL", "Manifest", "find", "load_values",
           "render", "render_error", "with_seal"]  # fmt: skip


def find(manifests: list[Manifest], kind: str, name: str) -> dict[str, Any]:
    matches = [m.obj for m in manifests if m.kind == kind and m.name == name]
    assert len(matches) == 1, f"expected one {kind} {name}, found {len(matches)}"
    return matches[0]


def render_error(values: dict[str, Any]) -> str:
    """The message Helm refuses these values with (schema or template `fail`); fails if it accepts them."""
    try:
        render(values)
    except helm_python.HelmError as exc:
        return str(exc)
    raise AssertionError(f"the chart accepted values it should refuse: {values}")
