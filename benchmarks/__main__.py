"""Run every benchmark module (or those named on the command line) and print `name: value` lines."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import traceback

import benchmarks
from benchmarks.context import BenchContext


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
    ctx = BenchContext()
    failed = 0
    try:
        for name in names:
            module = importlib.import_module(f"benchmarks.{name}")
            try:
                for metric, value in module.run(ctx):
                    print(
                        f"{metric}: {value:.6g}" if isinstance(value, float) else f"{metric}: {value}",
                        flush=True,
                    )
            except Exception:
                failed += 1
                print(f"# {name} failed:", file=sys.stderr)
                traceback.print_exc()
    finally:
        ctx.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
