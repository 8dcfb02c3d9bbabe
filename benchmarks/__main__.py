"""Run every benchmark module (or those named on the command line) and print `name: value` lines.

Every module names the figures it is meant to print (`FIGURES`, or `expected()` where the set depends on
what was asked for). A figure that was not printed — its module or part failed — is printed anyway as
`name: ERROR (why)`, and the run exits non-zero: no figure ever disappears silently.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import traceback
from types import ModuleType

import benchmarks
from benchmarks.context import BenchContext


def expected_figures(module: ModuleType) -> list[str]:
    if hasattr(module, "expected"):
        return list(module.expected())
    return list(getattr(module, "FIGURES", ()))


def format_line(metric: str, value: object) -> str:
    return f"{metric}: {value:.6g}" if isinstance(value, float) else f"{metric}: {value}"


def run_module(name: str, ctx: BenchContext) -> bool:
    """Run one module, printing its figures; returns whether every expected figure came out."""
    printed: set[str] = set()
    why = ""
    expected: list[str] = []
    try:
        module = importlib.import_module(f"benchmarks.{name}")
        expected = expected_figures(module)
        for metric, value in module.run(ctx):
            print(format_line(metric, value), flush=True)
            printed.add(metric)
    except Exception as exc:
        why = f"{name} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
        print(f"# {name} failed:", file=sys.stderr)
        traceback.print_exc()
    missing = [m for m in expected if m not in printed]
    for metric in missing:
        print(f"{metric}: ERROR ({why or f'{name} ended without printing it'})", flush=True)
    if why and not expected:
        print(f"{name}: ERROR ({why})", flush=True)
    return not why and not missing


def main(argv: list[str]) -> int:
    names = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))
    if argv:
        wanted = {a if a.startswith("bench_") else f"bench_{a}" for a in argv}
        unknown = wanted - set(names)
        if unknown:
            print(
                f"unknown benchmark(s): {', '.join(sorted(unknown))}; have: {', '.join(names)}",
                file=sys.stderr,
            )
            return 2
        names = [n for n in names if n in wanted]
    print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    ctx = BenchContext()
    failed: list[str] = []
    try:
        for name in names:
            if not run_module(name, ctx):
                failed.append(name)
    finally:
        ctx.close()
    print(f"# load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    if failed:
        print(f"# failed: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
