"""Rendering the chart with Helm's own Go code (Helm v4 SDK, from the helm-python-sdk wheel).

No registry we reach ships a helm binary; helm-python-sdk ships Helm's SDK compiled into a C library and
binds it with ctypes. Chart.render is `helm template`; Config.install is `helm install`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "helm"
CI_VALUES = sorted((CHART_DIR / "ci").glob("*.yaml"))
HOOK_ANNOTATION = "helm.sh/hook"
# A seal key pair for rendering and installing only (the chart requires one; `manage.py seal_keypair`).
TEST_SEAL = {
    "publicKey": "xt9xbzVOipRPteK7OLad7sXqHXNTShgfSS9/vlQeagI=",
    "privateKey": "20YPWyO2PK9IVY7f+yniYpoc/F1hkpZimS74AA55Ytw=",
}


def with_seal(values: dict[str, Any] | None) -> dict[str, Any]:
    """The values, with the test key pair unless they say something about `seal` themselves."""
    values = dict(values or {})
    values.setdefault("seal", TEST_SEAL)
    return values


@dataclass(frozen=True)
class Manifest:
    """One object of a rendered chart, with the template that made it."""

    template: str
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.obj["kind"]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def hooks(self) -> list[str]:
        annotations = self.obj["metadata"].get("annotations") or {}
        return [h for h in annotations.get(HOOK_ANNOTATION, "").split(",") if h]


def load_values(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def render(values: dict[str, Any] | None = None, *, release: str = "gp", namespace: str = "portal") -> list[Manifest]:
    """`helm template` of the chart: every object of every template, hooks included."""
    with helm_python.Chart.load(CHART_DIR) as chart:
        rendered = chart.render(with_seal(values), name=release, namespace=namespace, is_install=True)
    manifests = []
    for template, text in sorted(rendered.items()):
        if template.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                manifests.append(Manifest(template, doc))
    return manifests


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
