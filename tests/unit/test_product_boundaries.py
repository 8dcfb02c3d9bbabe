"""The product ships no development code: no module of the packages the image runs imports devtools/ or
localcluster/ (at the top or inside a function), and the image's build context leaves both out.

The walk reads every module's import statements with `ast`, so an import added anywhere (even a lazy one
inside a function) fails here before it fails in the image, where those packages are absent."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ["agent", "api", "cli", "identity", "jobs", "notifications", "portal", "proxy", "spec_rules", "telemetry"]
DEV_ONLY = ("devtools", "localcluster")


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in {
            "import_module",
            "__import__",
        }:
            names |= {arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)}
    return names


def product_modules() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (REPO / package).rglob("*.py"))


def test_the_walk_sees_the_product():
    modules = product_modules()
    assert len(modules) > 100
    assert REPO / "jobs" / "policy.py" in modules
    # The walk finds lazy imports too (what devtools/run.py itself does).
    assert "localcluster" in imported_modules(REPO / "devtools" / "run.py")


@pytest.mark.parametrize("package", PRODUCT)
def test_no_product_module_imports_development_code(package):
    offending = {
        str(path.relative_to(REPO)): sorted(name for name in imported_modules(path) if name.split(".")[0] in DEV_ONLY)
        for path in sorted((REPO / package).rglob("*.py"))
    }
    assert {path: names for path, names in offending.items() if names} == {}


def test_dev_only_code_is_where_it_belongs():
    assert not (REPO / "jobs" / "kube" / "rbac.py").exists()
    assert not (REPO / "telemetry" / "services" / "local_cluster.py").exists()
    assert not list(REPO.glob("*/management/commands/telemetry_local_cluster.py"))
    assert (REPO / "devtools" / "rbac.py").exists()
    assert (REPO / "devtools" / "local_telemetry.py").exists()


def test_the_image_build_context_leaves_development_code_out():
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    assert "devtools" in lines
    assert "localcluster" in lines
    # The one exception the assets stage needs, and the build stage deletes it before the code is installed.
    assert [line for line in lines if line.startswith("!devtools")] == ["!devtools/vendor.sh"]
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "rm -rf /app/devtools" in dockerfile
    assert dockerfile.index("rm -rf /app/devtools") < dockerfile.index("pip install --no-deps -e .")
