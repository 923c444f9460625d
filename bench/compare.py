"""Compare this checkout with another one, alternating them in one session.

    python -m bench.compare /path/to/other/checkout [--rounds 3] [checkpoint step_overhead]

A machine's speed drifts from minute to minute, so figures from two sessions do
not compare. Here each round runs every named benchmark once in each checkout,
in alternating order; the report gives, per figure, the median over the rounds
for both and their ratio (this / other). Both checkouts use this virtualenv.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
# The figures worth comparing, by benchmark: a path into its result JSON.
FIGURES = {
    "checkpoint": [("median_ms", "10"), ("median_ms", "100"), ("median_ms", "1000")],
    "step_overhead": [
        ("per_step_ms", "durable", "10"),
        ("per_step_ms", "durable", "50"),
        ("per_step_ms", "durable", "200"),
        ("overhead_ms", "10"),
        ("overhead_ms", "50"),
        ("overhead_ms", "200"),
    ],
    "hot_path": [
        ("wall_ms_per_step",),
        ("cpu_ms_per_step",),
        ("floor_two_commits_ms",),
        ("adapter_overhead_ms", "history_0_steps"),
        ("adapter_overhead_ms", "history_100_steps"),
        ("flatness_last10_vs_first10",),
        ("flatness_fitted_last10_vs_first10",),
        ("commits_per_step",),
        ("bytes_per_step",),
        ("http_step_vs_floor",),
        ("floors", "engine without litellm (Engine.from_env), wall ms per step"),
        ("floors", "engine without litellm (Engine.from_env), CPU ms per step"),
    ],
}
# The many-run cases of hot_path take minutes a round and have their own
# alternating rounds inside one run (bench.hot_path); compare leaves them out.
QUICK = {
    "checkpoint": ["--rounds", "4"],
    "step_overhead": ["--repeats", "2"],
    "hot_path": ["--repeats", "2", "--skip-concurrency"],
}


def _run(checkout: Path, name: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *QUICK[name]],
        cwd=checkout,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    data: dict[str, Any] = json.loads((checkout / "bench" / "results" / f"{name}.json").read_text())
    return data


def _dig(data: dict[str, Any], path: tuple[str, ...]) -> float | None:
    """The figure at ``path``, or None where that checkout's benchmark does
    not measure it (an older one)."""
    value: Any = data
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return float(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("other", type=Path, help="the checkout to compare with")
    parser.add_argument("benchmarks", nargs="*", default=list(FIGURES))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_intermixed_args()
    sides = {"this": HERE, "other": args.other.resolve()}
    samples: dict[str, dict[str, list[float]]] = {"this": {}, "other": {}}
    for round_no in range(args.rounds):
        order = ["this", "other"] if round_no % 2 == 0 else ["other", "this"]
        for name in args.benchmarks:
            for side in order:
                result = _run(sides[side], name)
                for path in FIGURES[name]:
                    key = f"{name}:{'.'.join(path)}"
                    figure = _dig(result, path)
                    if figure is not None:
                        samples[side].setdefault(key, []).append(figure)
    report: dict[str, Any] = {"rounds": args.rounds, "other": str(sides["other"]), "figures": {}}
    for key in samples["this"]:
        if key not in samples["other"]:
            report["figures"][key] = {"this": round(statistics.median(samples["this"][key]), 3)}
            continue
        this = statistics.median(samples["this"][key])
        other = statistics.median(samples["other"][key])
        report["figures"][key] = {
            "this": round(this, 3),
            "other": round(other, 3),
            "this_vs_other": round(this / other, 3) if other else None,
        }
    results = HERE / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "compare.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
