from __future__ import annotations


class WorkloadStateError(Exception):
    """The workload is not in a state that allows this (e.g. cancelling a finished job)."""
