"""The real nodes' images (localcluster/images.py) once they are built: what a second `make images` costs.

Lines printed:
  image_build_cached_s   `python -m localcluster.images` (what `make images` runs) when the cache holds every
                         image, process start to exit, median of 5 runs (nothing is rebuilt: goal ≤ 2 s)
The images are built first if the cache lacks them (minutes, once; shown as [images] lines on stderr).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from localcluster import images

FIGURES = ("image_build_cached_s",)


def run(ctx):
    images.ensure(progress=lambda line: print(line, file=sys.stderr, flush=True))
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "localcluster.images"], capture_output=True, text=True, check=False
        )
        samples.append(time.perf_counter() - started)
        if proc.returncode != 0 or "building" in proc.stderr:
            raise RuntimeError(f"a cached `make images` built or failed: {proc.stderr.strip()[-300:]}")
    yield "image_build_cached_s", statistics.median(samples)
