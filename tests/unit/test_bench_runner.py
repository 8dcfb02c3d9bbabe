"""`make bench` never loses a figure: a failing module or part prints its figures as ERROR lines and fails."""

from __future__ import annotations

import sys
import types

import pytest

from benchmarks import __main__ as runner


class FakeContext:
    closed = False

    def close(self) -> None:
        self.closed = True


def install(monkeypatch: pytest.MonkeyPatch, name: str, run, figures: tuple[str, ...]) -> None:
    module = types.ModuleType(f"benchmarks.{name}")
    module.FIGURES = figures
    module.run = run
    monkeypatch.setitem(sys.modules, f"benchmarks.{name}", module)


def test_a_module_failing_midway_prints_its_missing_figures_as_errors(monkeypatch, capsys):
    def run(ctx):
        yield "first_ms", 1.5
        raise RuntimeError("No ready Tesla P100 node is in the cluster right now.")

    install(monkeypatch, "bench_fake", run, ("first_ms", "second_ms", "third_ratio"))
    assert runner.run_module("bench_fake", FakeContext()) is False
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "first_ms: 1.5"
    assert lines[1].startswith("second_ms: ERROR (bench_fake failed: RuntimeError: No ready Tesla P100 node")
    assert lines[2].startswith("third_ratio: ERROR (")


def test_a_module_that_ends_without_a_figure_fails(monkeypatch, capsys):
    def run(ctx):
        yield "first_ms", 2

    install(monkeypatch, "bench_fake", run, ("first_ms", "forgotten_ms"))
    assert runner.run_module("bench_fake", FakeContext()) is False
    assert "forgotten_ms: ERROR (bench_fake ended without printing it)" in capsys.readouterr().out


def test_the_run_exits_non_zero_and_still_runs_later_modules(monkeypatch, capsys):
    def broken(ctx):
        raise RuntimeError("duplicate key value violates unique constraint")
        yield  # pragma: no cover - a generator

    def fine(ctx):
        yield "later_ms", 3

    install(monkeypatch, "bench_aaa", broken, ("early_ms",))
    install(monkeypatch, "bench_zzz", fine, ("later_ms",))
    monkeypatch.setattr(
        runner.pkgutil,
        "iter_modules",
        lambda path: [types.SimpleNamespace(name="bench_aaa"), types.SimpleNamespace(name="bench_zzz")],
    )
    monkeypatch.setattr(runner, "BenchContext", FakeContext)
    assert runner.main([]) == 1
    out = capsys.readouterr().out
    assert "early_ms: ERROR (bench_aaa failed: RuntimeError: duplicate key" in out
    assert "later_ms: 3" in out
    assert "# failed: bench_aaa" in out


def test_every_engine_part_names_its_figures(monkeypatch):
    from benchmarks import bench_engine

    monkeypatch.setenv("BENCH_ENGINE_PARTS", "lag,usage")
    figures = bench_engine.expected()
    assert "tracking_lag_staggered_running_p95_ms" in figures
    assert "usage_report_1m_current_month_ms" in figures
    assert "submit_throughput_ratio" not in figures
    monkeypatch.setenv("BENCH_ENGINE_PARTS", "lag,nonsense")
    with pytest.raises(ValueError, match="nonsense"):
        bench_engine.expected()
