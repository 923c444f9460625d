"""Run every benchmark: ``python -m bench`` (what ``make bench`` does)."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = [
    "bench.checkpoint",
    "bench.step_overhead",
    "bench.hot_path",
    "bench.cli_startup",
    "bench.workers",
    "bench.outage",
    "bench.observe",
    "bench.events",
    "bench.console",
    "bench.mcp_call",
    "bench.children",
    "bench.throughput",
    "bench.store_ceiling",
    "bench.flow",
    "bench.encryption",
    "bench.replay",
]


def main() -> None:
    only = sys.argv[1:]
    for name in BENCHMARKS:
        if only and name.rsplit(".", 1)[-1] not in only:
            continue
        module = importlib.import_module(name)
        sys.argv = [name]
        module.main()


if __name__ == "__main__":
    main()
