"""The budgets benchmark's CPU per thread of the tracker (benchmarks.cpu.threads, threads_spent): the tracker's
watch threads are named as the operating system sees them (watch_loop.name_os_thread), so a window's CPU
splits into the loop's, the watches' and that of threads that ended."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from benchmarks import cpu
from jobs.services.cluster.watch_loop import name_os_thread

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _busy(seconds: float) -> None:
    until = time.process_time() + seconds
    while time.process_time() < until:
        sum(range(1000))


@linux_only
def test_a_named_thread_shows_under_its_name_then_its_cpu_moves_to_ended_once_it_ends():
    # A name no tracker thread takes: in the whole suite, other tests' watch loops (watch-Pod, watch-Job) live on.
    named, release = threading.Event(), threading.Event()

    def watch() -> None:
        assert name_os_thread("watch-Probe")
        _busy(0.2)
        named.set()
        release.wait(10)

    thread = threading.Thread(target=watch)
    before = cpu.threads(os.getpid())
    thread.start()
    assert named.wait(10)
    during = cpu.threads(os.getpid())
    with open(f"/proc/self/task/{thread.native_id}/comm") as comm:
        assert comm.read().strip() == "watch-Probe"
    release.set()
    thread.join(10)
    after = cpu.threads(os.getpid())

    assert "main" in during
    assert "ended" in during
    assert sum(cpu.threads_spent(before, during)["watch-Probe"]) > 0
    assert "watch-Probe" not in after
    assert sum(after["ended"]) >= sum(during["watch-Probe"]) - 0.05  # its time stays in the process's total


def test_a_name_is_cut_to_what_the_system_keeps_and_a_failed_naming_changes_nothing(monkeypatch):
    if sys.platform.startswith("linux"):
        out: list[str] = []

        def target() -> None:
            name_os_thread("watch-PersistentVolumeClaim")
            with open(f"/proc/self/task/{threading.get_native_id()}/comm") as comm:
                out.append(comm.read().strip())

        thread = threading.Thread(target=target)
        thread.start()
        thread.join(10)
        assert out == ["watch-Persisten"]
    monkeypatch.setattr(threading, "get_native_id", lambda: 0)  # no such task
    assert name_os_thread("watch-Job") is False


def test_threads_spent_counts_a_new_thread_from_zero_and_nothing_once_the_process_was_replaced():
    before = {"main": (1.0, 0.5), "watch-Pod": (0.2, 0.1), "ended": (0.0, 0.0)}
    after = {"main": (1.5, 0.75), "watch-Pod": (0.2, 0.1), "watch-Job": (0.05, 0.0), "ended": (0.25, 0.0)}
    assert cpu.threads_spent(before, after) == {
        "main": (0.5, 0.25),
        "watch-Pod": (0.0, 0.0),
        "watch-Job": (0.05, 0.0),
        "ended": (0.25, 0.0),
    }
    assert cpu.threads_spent({}, after) == {}
    assert cpu.threads_spent(before, {}) == {}
    assert cpu.per_thread({"main": (0.25, 0.05), "watch-Pod": (0.5, 0.0)}, 100) == (
        "watch-Pod 5.00 (user 5.00, system 0.00), main 3.00 (user 2.50, system 0.50)"
    )
