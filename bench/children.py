"""How fast a parent resumes once its child settles, on real workers.

    python -m bench.children          # or: make bench

A lead agent hands one task to a child agent that answers at once; both run
on two ``celery worker`` processes with Redis as broker. Measured per run:
from the child's settle (its ``finished_at``) to the start of the lead's next
model step (its step 2 ``started_at``): the store's resume, the broker's
delivery, the claim and the execution's start. Reports the median and p95.
Target: median <= 100 ms on this machine with Redis up.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import tests.agents_children  # noqa: F401  (the agents the workers run)
from bench.common import report
from bench.workers import cluster, percentile
from store.models import RunStatus, StepKind
from tests.e2e.cluster import wait_until

TARGET_MS = 100.0
AGENTS = "tests.agents,tests.agents_children"


def bench_resume(runs: int) -> dict[str, Any]:
    latencies: list[float] = []
    with cluster(RUNWRIGHT_AGENTS=AGENTS) as c:
        c.worker("k0", concurrency=4)
        c.worker("k1", concurrency=4)
        engine = c.engine()
        for i in range(runs + 2):
            run = engine.start("kids_quick_lead", {"trial": i})
            wait_until(
                lambda r=run: engine.get_run(r.id).status is RunStatus.COMPLETED,
                60,
                "the lead to complete",
                0.01,
            )
            [child] = engine.children(run.id)
            second = next(
                s for s in engine.steps(run.id) if s.kind is StepKind.LLM and s.index == 2
            )
            assert child.finished_at is not None and second.started_at is not None
            if i >= 2:  # the first two warm the workers
                latencies.append((second.started_at - child.finished_at).total_seconds() * 1000)
            time.sleep(0.05)
    median = statistics.median(latencies)
    return {
        "runs": len(latencies),
        "median_ms": round(median, 1),
        "p95_ms": round(percentile(latencies, 0.95), 1),
        "max_ms": round(max(latencies), 1),
        "target_median_ms": TARGET_MS,
        "meets_target": median <= TARGET_MS,
    }


def main() -> None:
    result = bench_resume(40)
    report("children_resume", result, result["meets_target"])


if __name__ == "__main__":
    main()
