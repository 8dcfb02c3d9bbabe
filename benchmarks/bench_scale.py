"""Scale (issue 41): how cost grows with the work, and whether replicas help on this machine.

Parts (BENCH_SCALE_PARTS=curve,web,worker selects some; all three when the module is named, `make bench
BENCH=scale`; a plain `make bench` runs the curve to 10k and the web, as the worker part starts an engine):
curve   scale_{admission,resync,queue_page,api_list}_{1k,10k,100k}_*: the admission pass, the tracker's
        resync, a team's queue page and the API list at 1k, 10k and 100k live workloads (queued plus 30 %
        more running on simulated nodes), each point in this run, and the CPU ratio between points
        (scale_curve.py); no cluster. 100k only when the module is named; BENCH_SCALE_SIZES picks points.
web     web_scaling_2x: REST submissions per second with 1 and 2 gunicorn processes, sides alternating;
        no cluster (scale_replicas.py)
worker  worker_scaling_2x: Jobs created per second with 1 and 2 worker processes (the engine, the cluster)
benchmarks/README.md says what each figure measures and what could make it lie.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Iterator

from benchmarks import scale_curve, scale_replicas
from benchmarks.context import BenchContext

PARTS = ("curve", "web", "worker")


def selected_parts() -> list[str]:
    wanted = set(filter(None, os.environ.get("BENCH_SCALE_PARTS", "").split(",")))
    unknown = wanted - set(PARTS)
    if unknown:
        raise ValueError(f"unknown BENCH_SCALE_PARTS {sorted(unknown)}; have {list(PARTS)}")
    if not wanted:
        wanted = set(PARTS) if scale_curve.asked_by_name() else {"curve", "web"}
    return [p for p in PARTS if p in wanted]


def expected() -> list[str]:
    figures: list[str] = []
    parts = selected_parts()
    if "curve" in parts:
        figures += scale_curve.figures()
    if "web" in parts:
        figures += list(scale_replicas.WEB_FIGURES)
    if "worker" in parts:
        figures += list(scale_replicas.WORKER_FIGURES)
    return figures


def run(ctx: BenchContext) -> Iterator[tuple[str, float]]:
    ctx.django()
    failures: list[str] = []
    for part in selected_parts():
        try:
            if part == "curve":
                yield from scale_curve.curve()
            elif part == "web":
                yield from scale_replicas.web_scaling(ctx)
            else:
                from benchmarks.engine import Engine

                engine = Engine(ctx)
                try:
                    yield from scale_replicas.worker_scaling(engine)
                finally:
                    engine.close()
        except Exception as exc:
            failures.append(f"{part}: {type(exc).__name__}: {exc}")
            print(f"# scale part {part} failed:", file=sys.stderr)
            traceback.print_exc()
    if failures:
        raise RuntimeError("; ".join(f.splitlines()[0] for f in failures))
