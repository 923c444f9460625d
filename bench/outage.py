"""From a provider's recovery to the run's next step, with a real worker.

    python -m bench.outage [--rounds 8]

Each round: the loopback OpenAI-compatible server answers 503; a run starts
and goes back to the queue to retry (durable backoff: 1 s, 2 s, 3 s, 3 s, ...
apart, ``tests/agents_outage.py``); at a random moment the server recovers.
Measured: the wall time from recovery to the run's next model request being
answered, and the backoff in effect at that moment (from the run's last
failed attempt to its scheduled retry). Target: every round's wait at most
that backoff + 2 s.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import tests.agents_outage  # noqa: F401  (the agents the worker runs)
from bench.common import report
from bench.workers import cluster
from store.models import RunStatus
from tests.e2e.cluster import wait_until
from tests.provider import Provider, answer

SLACK = 2.0


def one_round(engine: Any, provider: Provider, i: int, pause: float) -> tuple[float, float]:
    """(wait from recovery to the next answered request, backoff in effect)."""
    provider.fail(503)
    run_id = engine.start("outage", {"round": i}).id
    wait_until(lambda: engine.get_run(run_id).retry_at is not None, 30, "a retry wait")
    time.sleep(pause)
    served = len(provider.answered(200))
    current = engine.get_run(run_id)
    assert current.retry_at is not None
    provider.recover()
    recovered = time.time()
    wait_until(lambda: len(provider.answered(200)) > served, 30, "the next step")
    answered = provider.answered(200)[served].at
    wait_until(lambda: engine.get_run(run_id).status is RunStatus.COMPLETED, 30, "completion")
    # The backoff in effect: from the attempt that failed last (the wait was
    # written right after it) to the retry it scheduled.
    backoff = (current.retry_at - current.updated_at).total_seconds()
    return answered - recovered, backoff


def run(rounds: int) -> dict[str, Any]:
    waits: list[float] = []
    backoffs: list[float] = []
    rng = random.Random(12)
    with Provider(lambda step, body: answer("done")) as provider, cluster() as c:
        c.worker(
            "w1",
            RUNWRIGHT_AGENTS="tests.agents,tests.agents_outage",
            RUNWRIGHT_TEST_PROVIDER_URL=provider.base_url,
        )
        engine = c.engine()
        for i in range(rounds):
            wait, backoff = one_round(engine, provider, i, rng.uniform(0.0, 5.0))
            waits.append(wait)
            backoffs.append(backoff)
        engine.close()
    over = [w - b for w, b in zip(waits, backoffs, strict=True)]
    return {
        "rounds": rounds,
        "recovery_to_next_step_s": {
            "median": round(statistics.median(waits), 3),
            "max": round(max(waits), 3),
        },
        "backoff_in_effect_s": {
            "median": round(statistics.median(backoffs), 3),
            "max": round(max(backoffs), 3),
        },
        "wait_minus_backoff_s": {
            "median": round(statistics.median(over), 3),
            "max": round(max(over), 3),
        },
        "target": f"every round's wait <= its backoff + {SLACK} s",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    result = run(args.rounds)
    report("outage", result, result["wait_minus_backoff_s"]["max"] <= SLACK)


if __name__ == "__main__":
    main()
