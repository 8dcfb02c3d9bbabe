"""`make bench`: measurements printed as `name: value` lines.

Each module `benchmarks/bench_<area>.py` defines `run(ctx: BenchContext) -> Iterator[tuple[str, float]]`.
Ratios are taken against a baseline measured in the same run; nothing here asserts a wall-clock time.
"""
