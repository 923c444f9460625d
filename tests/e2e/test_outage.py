"""Provider outages with real ``celery worker`` processes and a loopback
OpenAI-compatible server the test controls (issue 12's acceptance 1)."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import tests.agents_outage  # noqa: F401  (the agents the workers run, known here too)
from store.models import RunStatus
from tests.e2e.cluster import Cluster, wait_until
from tests.provider import Provider, answer, tool_calls

AGENTS = "tests.agents,tests.agents_outage"


def _script(step: int, body: dict[str, Any]) -> dict[str, Any]:
    if step == 1:
        return tool_calls((f"call_{_payload(body)['n']}", "lookup", {"q": "crash"}))
    return answer("done")


def _payload(body: dict[str, Any]) -> dict[str, Any]:
    first = next(m["content"] for m in body["messages"] if m["role"] == "user")
    payload: dict[str, Any] = json.loads(first.removeprefix("```json\n").removesuffix("\n```"))[
        "payload"
    ]
    return payload


@pytest.fixture
def provider() -> Iterator[Provider]:
    with Provider(_script) as server:
        yield server


def test_runs_outlast_a_provider_outage(cluster: Cluster, provider: Provider) -> None:
    """503 for 20 s, then recovery: twenty runs started during the outage all
    complete, each step's request answered once; meanwhile another agent's
    runs on the same worker keep completing (the waiting runs hold no threads)."""
    provider.fail(503)
    outage_began = time.monotonic()
    cluster.worker(
        "w1", concurrency=4, RUNWRIGHT_AGENTS=AGENTS, RUNWRIGHT_TEST_PROVIDER_URL=provider.base_url
    )
    engine = cluster.engine()
    runs = [engine.start("outage", {"n": i}).id for i in range(20)]

    # While the provider is down, the runs wait in the queue, and steady runs
    # (a scripted model) go through the same four threads.
    waiting = wait_until(
        lambda: sum(1 for r in runs if engine.get_run(r).retry_at is not None) >= 10,
        20,
        "runs waiting to retry",
    )
    assert waiting
    # Five steady runs at least, and the outage held for 20 s at least: on a slow
    # machine the worker's start and the first retries can take most of those 20 s,
    # and the steady runs are counted, not fitted into what is left of them.
    steady_latencies: list[float] = []
    while len(steady_latencies) < 5 or time.monotonic() - outage_began < 20:
        started = time.monotonic()
        steady = engine.start("outage-steady").id
        wait_until(
            lambda steady=steady: engine.get_run(steady).status is RunStatus.COMPLETED,
            10,
            "a steady run to complete during the outage",
        )
        steady_latencies.append(time.monotonic() - started)
        time.sleep(1)
    statuses = Counter(engine.get_run(r).status for r in runs)
    assert statuses[RunStatus.COMPLETED] == 0 and statuses[RunStatus.FAILED] == 0
    assert provider.answered(503), "the outage was seen"

    provider.recover()
    wait_until(
        lambda: all(engine.get_run(r).status.ended for r in runs),
        60,
        "the outage runs to settle after recovery",
        interval=0.5,
    )
    for run_id in runs:
        run = engine.get_run(run_id)
        assert run.status is RunStatus.COMPLETED, (run.status, run.error)
        assert run.retry is None
    answered = Counter((_payload(r.body)["n"], r.step) for r in provider.answered(200))
    assert answered == {(n, step): 1 for n in range(20) for step in (1, 2)}
    engine.close()


def test_a_rate_limit_is_waited_out_as_asked(cluster: Cluster, provider: Provider) -> None:
    """429 with Retry-After: 3: the next attempt comes no sooner than 3 s later."""
    provider.fail(429, retry_after=3)
    cluster.worker(
        "w1", concurrency=4, RUNWRIGHT_AGENTS=AGENTS, RUNWRIGHT_TEST_PROVIDER_URL=provider.base_url
    )
    engine = cluster.engine()
    run_id = engine.start("outage", {"n": 0}).id
    wait_until(lambda: provider.answered(429), 30, "the first 429")
    provider.recover()
    wait_until(
        lambda: engine.get_run(run_id).status is RunStatus.COMPLETED, 60, "completion", interval=0.2
    )
    attempts = [r.at for r in provider.requests if r.step == 1]
    assert len(attempts) >= 2
    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    assert min(gaps) >= 3.0, gaps
    engine.close()
