"""`runwright retry` and `runwright fork` against real workers (issue 12's
acceptance 3 and 4): a run whose retry policy was exhausted completes after
the provider is back, a cancelled run resumes from its checkpoint, and two
racing retries execute it once."""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tests.agents_outage  # noqa: F401  (the agents the workers run, known here too)
from store.models import RunStatus, StepKind
from tests.agents import read_effect_log
from tests.e2e.clirun import refused, rw
from tests.e2e.cluster import Cluster, wait_until
from tests.provider import Provider, answer, tool_calls

AGENTS = "tests.agents,tests.agents_outage"


@pytest.fixture
def provider() -> Iterator[Provider]:
    holder: dict[str, Provider] = {}

    def script(step: int, body: dict[str, Any]) -> dict[str, Any]:
        if step == 1:
            holder["p"].fail(503)  # answered; everything after fails until recover()
            return tool_calls(("call_1", "lookup", {"q": "crash"}))
        return answer("done")

    with Provider(script) as server:
        holder["p"] = server
        yield server


def test_an_exhausted_run_is_retried_once_the_provider_is_back(
    cluster: Cluster, provider: Provider
) -> None:
    env = cluster.env(RUNWRIGHT_AGENTS=AGENTS, RUNWRIGHT_TEST_PROVIDER_URL=provider.base_url)
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, RUNWRIGHT_TEST_PROVIDER_URL=provider.base_url)
    engine = cluster.engine()
    run_id = engine.start("outage-brief", {"n": 1}).id
    wait_until(lambda: engine.get_run(run_id).status.ended, 60, "the run to give up")
    failed = engine.get_run(run_id)
    assert failed.status is RunStatus.FAILED and failed.error is not None
    assert failed.error.code == "model_error"
    assert "gave up after 3 attempt(s)" in failed.error.message
    assert failed.retry is not None and failed.retry.attempts == 3
    assert [r.step for r in provider.answered(503)] == [2, 2, 2]

    provider.recover()
    out = rw(env, "retry", run_id).stdout
    assert run_id in out
    wait_until(lambda: engine.get_run(run_id).status is RunStatus.COMPLETED, 60, "the retried run")
    # Step 1 was not sent to the model again, nor its tool run again.
    assert Counter(r.step for r in provider.answered(200)) == {1: 1, 2: 1}
    lookups = [
        e
        for e in read_effect_log(str(cluster.workdir / "effects.jsonl"))
        if e.get("run_id") == run_id
    ]
    assert len(lookups) == 1
    attempts = engine.attempts(run_id)
    assert [(a.attempt, a.status) for a in attempts] == [(1, RunStatus.FAILED)]
    engine.close()


def _journal(path: Path, run_id_payload: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    entries = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [e for e in entries if e.get("model") == "slow" and run_id_payload in str(e["trigger"])]


def test_a_cancelled_run_retried_from_two_processes_executes_once(cluster: Cluster) -> None:
    env = cluster.env()
    cluster.worker("w1")
    engine = cluster.engine()
    marker = f"cancel-retry-{time.time_ns()}"
    run_id = engine.start("slow", {"marker": marker}).id
    wait_until(
        lambda: len([s for s in engine.steps(run_id) if s.kind is StepKind.LLM]) >= 3,
        60,
        "three steps",
    )
    engine.cancel(run_id)
    wait_until(lambda: engine.get_run(run_id).status is RunStatus.CANCELLED, 30, "the cancel")
    steps = engine.steps(run_id)
    done_before = {s.index for s in steps if s.kind is StepKind.LLM}
    tools_done = {f"step {s.index}" for s in steps if s.kind is StepKind.TOOL}

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: rw(env, "retry", run_id).stdout, range(2)))
    retried = [out for out in results if "retried" in out.lower() and "not" not in out.lower()]
    assert len(retried) == 1, results
    wait_until(lambda: engine.get_run(run_id).status is RunStatus.COMPLETED, 120, "the retried run")
    journal = _journal(cluster.workdir / "journal.jsonl", marker)
    calls = Counter(e["step"] for e in journal)
    # Completed steps were not sent to the model again; every step ran.
    assert all(calls[k] == 1 for k in done_before), (done_before, calls)
    assert set(calls) == set(range(1, 21))
    lookups = Counter(
        e["q"]
        for e in read_effect_log(str(cluster.workdir / "effects.jsonl"))
        if e.get("run_id") == run_id
    )
    assert tools_done and all(lookups[q] == 1 for q in tools_done), (tools_done, lookups)
    assert [a.status for a in engine.attempts(run_id)] == [RunStatus.CANCELLED]

    line = refused(env, "retry", run_id)
    assert "completed" in line
    engine.close()
