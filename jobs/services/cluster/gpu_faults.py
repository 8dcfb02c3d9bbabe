"""Is a GPU failing? Judged from one agent report of it and what earlier reports left (pure).

Failing means one of: a fatal Xid error new since the last report (the agent counts them since it
started; the kinds that mean the GPU or its memory is broken, not the application), an uncorrectable ECC
error, the GPU lost (off the bus), or a temperature at or over the limit for a sustained period.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

# Xid codes that mean the hardware (or its driver state) is broken rather than the application: double
# bit ECC (48), page retirement failures (63, 64), row remapping failure (95), GPU off the bus (79),
# internal micro-controller / GSP errors (62, 119, 120), NVLink (74), fallen-over engines (92, 94 is
# contained, 95 uncontained). Application faults such as 13, 31, 43 are left to the job's own exit.
FATAL_XIDS = frozenset({48, 62, 63, 64, 74, 79, 92, 95, 119, 120})


@dataclass(frozen=True)
class GpuSeen:
    """The parts of a report's GPU that health needs."""

    index: int
    uuid: str
    lost: bool = False
    ecc_uncorrected: int | None = None
    xid_errors: int | None = None
    last_xid: int | None = None
    temperature_celsius: int | None = None


@dataclass(frozen=True)
class Watch:
    hot_since: datetime | None = None
    xid_errors_seen: int = 0


@dataclass(frozen=True)
class Verdict:
    faults: tuple[tuple[str, str], ...]  # (cause, detail) with cause one of GpuHealthMark.Cause's values
    watch: Watch

    @property
    def healthy(self) -> bool:
        return not self.faults


def _hot_since(gpu: GpuSeen, watch: Watch, *, at: datetime, hot_celsius: int) -> datetime | None:
    """Since when the GPU has been hot (None: it is not); a GPU with no temperature keeps what was seen."""
    if gpu.temperature_celsius is None:
        return watch.hot_since
    if gpu.temperature_celsius >= hot_celsius:
        return watch.hot_since or at
    return None


def judge(gpu: GpuSeen, watch: Watch, *, at: datetime, hot_celsius: int, hot_seconds: int) -> Verdict:
    faults: list[tuple[str, str]] = []
    if gpu.lost:
        faults.append(("lost", "The GPU fell off the bus (NVML: GPU is lost)."))
    if gpu.ecc_uncorrected:
        faults.append(("ecc", f"{gpu.ecc_uncorrected} uncorrectable ECC error(s) since the driver loaded."))
    xid_count = gpu.xid_errors or 0
    # A count below the one seen: the agent restarted, and its count began again.
    seen = 0 if xid_count < watch.xid_errors_seen else watch.xid_errors_seen
    if xid_count > seen and gpu.last_xid in FATAL_XIDS:
        faults.append(("xid", f"Xid {gpu.last_xid} ({xid_count - seen} new critical error(s))."))
    hot_since = _hot_since(gpu, watch, at=at, hot_celsius=hot_celsius)
    hot = gpu.temperature_celsius is not None and gpu.temperature_celsius >= hot_celsius
    if hot and at - hot_since >= timedelta(seconds=hot_seconds):
        faults.append(
            (
                "thermal",
                f"{gpu.temperature_celsius} °C, at or over {hot_celsius} °C for {int((at - hot_since).total_seconds())} s.",
            )
        )
    return Verdict(tuple(faults), Watch(hot_since=hot_since, xid_errors_seen=xid_count))
