"""A fake NVML reading source: the sampler protocol, fed by a script of readings or failures.

No GPU exists on the machines these tests run on; this stands in for agent.nvml.NvmlSampler at the
protocol boundary so the loop, report and metrics code runs for real.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.readings import RawGpu, RawProcess, RawSample

GIB = 1024**3


def p100(index: int, *, util: int = 97, processes: Iterable[RawProcess] = (), **overrides: object) -> RawGpu:
    """A plausible reading of one busy Tesla P100, in NVML's units."""
    values: dict[str, object] = {
        "index": index,
        "uuid": f"GPU-0000000{index}-1111-2222-3333-444444444444",
        "name": "Tesla P100-PCIE-16GB",
        "utilization_gpu_percent": util,
        "utilization_memory_percent": 41,
        "memory_used_bytes": 12 * GIB,
        "memory_total_bytes": 16 * GIB,
        "temperature_celsius": 71,
        "power_draw_milliwatts": 211_500,
        "power_limit_milliwatts": 250_000,
        "sm_clock_mhz": 1328,
        "ecc_uncorrected_volatile": 0,
        "xid_errors": 0,
        "processes": tuple(processes),
    }
    values.update(overrides)
    return RawGpu(**values)  # type: ignore[arg-type]


class ScriptedSampler:
    """Returns (or raises) the scripted items in order, repeating the last one forever."""

    simulated = False

    def __init__(self, *script: RawSample | BaseException) -> None:
        self._script = list(script)
        self.calls = 0
        self.closed = False

    def sample(self) -> RawSample:
        item = self._script[min(self.calls, len(self._script) - 1)]
        self.calls += 1
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self.closed = True
