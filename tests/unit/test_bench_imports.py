"""Every benchmark module imports: ``make bench`` and the closing notes' rerun
commands name them, and a benchmark that fails at import only shows when
someone reruns it (three did, after a name left ``runner.testing``)."""

from __future__ import annotations

import importlib

import pytest

from tests.services import ROOT

MODULES = sorted(
    f"bench.{path.stem}" for path in (ROOT / "bench").glob("*.py") if path.stem != "__main__"
)


def test_the_benchmarks_are_found() -> None:
    assert {"bench.floors", "bench.flow", "bench.hot_path", "bench.step_overhead"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_a_benchmark_module_imports(module: str) -> None:
    importlib.import_module(module)
