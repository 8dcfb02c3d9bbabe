"""Aging (issue 38): where a GPU type turns it on, a team's queue goes, after priority, a requeue and the
person's fair-share usage, by how much a workload has waited weighted by its size (GPUs x seconds waited,
most first) instead of by submission time. A large workload thus overtakes smaller ones submitted before
it once it has waited a fraction of their wait (an 8-GPU job that has waited 30 min passes a 1-GPU job
that has waited 3 h), so it becomes the head a reservation is made for instead of waiting behind a stream
of small ones. Off (the default): first come, first served within those keys, as before.

Pure: the weight and its place in the order are `jobs.queue_order`'s (`aged_weight`, `TEAM_ORDER`), which
every reading of the queue renders; here is the queue page's explanation of what aging did.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from jobs.queue_order import POSITION_ORDER, aged_weight, sort_key


@dataclass(frozen=True)
class Overtaken:
    """What aging did for one queued workload: how long it has waited, and how many of its team's queued
    workloads submitted before it it now goes ahead of (smaller ones that have waited less in GPU-seconds)."""

    waited_s: float
    passed: int

    def sentence(self) -> str:
        hours = self.waited_s / 3600
        waited = f"{hours:.1f} h" if hours >= 1 else f"{self.waited_s / 60:.0f} min"
        if not self.passed:
            return f"Waiting {waited}: aging (GPUs × time waited) has not moved it ahead of anything yet."
        plural = "s" if self.passed != 1 else ""
        return (
            f"Waiting {waited}: moved ahead of {self.passed} smaller workload{plural} submitted before it "
            "(this GPU type's queue ages: GPUs × time waited, after priority and fair share)."
        )


def overtaken(
    mine: tuple[int, int, float, int],
    others: Iterable[tuple[int, int, float, int]],
    *,
    now: float,
) -> Overtaken:
    """For `mine` as (id, GPUs, created, priority): how many of `others` (the team's other queued workloads
    of the GPU type, same shape) submitted before it of the same priority it goes ahead of by aging."""
    w_id, gpus, created, priority = mine

    def aged_order(i: int, g: int, c: float) -> tuple:  # the team's order within one priority, aged to `now`
        return sort_key({"aged": aged_weight(g, c, now), "created": c, "id": i}, POSITION_ORDER[1:])

    mine_aged = aged_order(w_id, gpus, created)
    passed = sum(
        1
        for o_id, o_gpus, o_created, o_priority in others
        if o_id != w_id
        and o_priority == priority
        and (o_created, o_id) < (created, w_id)
        and mine_aged < aged_order(o_id, o_gpus, o_created)
    )
    return Overtaken(waited_s=max(0.0, now - created), passed=passed)
