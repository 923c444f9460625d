"""Start-up time of ``runwright runs``: a listing must not pay for litellm.

    python -m bench.cli_startup          # or: make bench

Runs the real console script 15 times against a fresh database on the
configured server (the local stack if none) and reports the median wall time.
Target: < 0.5 s.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import bench_database, report, settings

RUNWRIGHT = str(Path(sys.executable).with_name("runwright"))


def run(samples: int = 15) -> dict[str, Any]:
    with bench_database() as url:
        return _measure(samples, url)


def _measure(samples: int, url: str) -> dict[str, Any]:
    resolved = settings()
    assert resolved.redis_url
    env = {**os.environ, "RUNWRIGHT_DATABASE_URL": url, "RUNWRIGHT_REDIS_URL": resolved.redis_url}
    timings: dict[str, list[float]] = {"runs": [], "--help": []}
    for _ in range(samples):
        for args in (["runs", "--limit", "20"], ["--help"]):
            started = time.perf_counter()
            subprocess.run([RUNWRIGHT, *args], env=env, check=True, capture_output=True)
            timings[args[0]].append(time.perf_counter() - started)
    check = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "runner.cli", "runs", "--limit", "1"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return {
        "median_seconds": {k: round(statistics.median(v), 3) for k, v in timings.items()},
        "max_seconds": {k: round(max(v), 3) for k, v in timings.items()},
        "samples": samples,
        "imports_litellm": "litellm" in check.stderr,
        "target_seconds": 0.5,
    }


def main() -> None:
    result = run()
    ok = result["median_seconds"]["runs"] < 0.5 and not result["imports_litellm"]
    report("cli_startup", result, ok)


if __name__ == "__main__":
    main()
