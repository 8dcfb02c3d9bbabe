"""The Helm chart rendered offline with Helm's own Go code (`helm template`), for the chart tests and the
manifest scan in `make lint`.

No registry we reach ships a helm binary; the helm-python-sdk wheel ships Helm's SDK compiled into a C
library and binds it with ctypes: Chart.render is `helm template`, Config.install is `helm install`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
CHART_DIR = REPO_ROOT / "helm"
CI_VALUES = sorted((CHART_DIR / "ci").glob("*.yaml"))
HOOK_ANNOTATION = "helm.sh/hook"
# The chart requires a seal key pair (seal.*); offline renders without one use this pair, made for
# rendering only (`python -m portal.sealing`) and never for an installation.
TEST_SEAL = {
    "publicKey": "xt9xbzVOipRPteK7OLad7sXqHXNTShgfSS9/vlQeagI=",
    "privateKey": "20YPWyO2PK9IVY7f+yniYpoc/F1hkpZimS74AA55Ytw=",
}


def with_seal(values: dict[str, Any] | None) -> dict[str, Any]:
    """The values, with the rendering-only key pair unless they say something about `seal` themselves."""
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
    import helm_python  # a dev dependency: imported only where the chart is rendered

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
