"""``runwright eval`` on worker processes (issue 55 item 3): a dataset of 200
recorded runs evaluated by two worker processes against an OpenAI-compatible
server on loopback, for two versions of an agent, the second against the
first; one of its workers killed with SIGKILL mid-evaluation. No case is
lost and none is scored twice; no effect runs; the summary compares the
versions."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from runner.core.engine.engine import Engine
from runner.evals.recording import Case
from store.models import EvaluationCaseStatus, RunStatus
from tests.agents_evals import V1, V2, refunds_agent, script
from tests.e2e.cluster import Cluster, Proc, wait_until
from tests.helpers import unique
from tests.provider import Provider, Served

CASES = 200
OVER = [n for n in range(CASES) if n % 4 == 0]  # the refunds over 100


def _amount(n: int) -> int:
    return 150 + n if n in OVER else 10 + n % 90


def _dataset(engine: Engine, provider: Provider) -> str:
    """200 runs of version 1, recorded in the cluster's database, as a dataset."""
    name = unique("refunds")
    refunds_agent(V1, api_base=provider.base_url, name=name, register=True)
    cases = []
    for n in range(CASES):
        run = engine.start(name, {"order": f"A-{n}", "amount": _amount(n)})
        done = engine.execute(run.id)
        assert done is not None and done.status is RunStatus.COMPLETED, done and done.error
        cases.append(Case.of_run(engine, run.id).to_json())
    dataset = unique("refund-cases")
    engine.store.save_dataset(dataset, cases)
    return dataset


def _eval(cluster: Cluster, provider: Provider, name: str, *args: str) -> Proc:
    env = cluster.env(
        RUNWRIGHT_TEST_EVAL_API_BASE=provider.base_url,
        RUNWRIGHT_AGENTS="tests.agents_evals",
    )
    proc = Proc(
        name,
        [sys.executable, "-m", "runner.cli", "eval", *args, "--workers", "2", "--json"],
        env,
        cluster.workdir,
    )
    cluster.procs.append(proc)  # stopped, and its log closed, with the cluster
    return proc


def _result(proc: Proc, timeout: float) -> dict[str, Any]:
    """The evaluation the command printed: its last line of JSON."""
    code = proc.wait(timeout)
    log = proc.log()
    assert code == 0, log[-3000:]
    line = next(line for line in reversed(log.splitlines()) if line.startswith("{"))
    found: dict[str, Any] = json.loads(line)
    return found


def _order(served: Served) -> str:
    said = served.body["messages"][1]["content"]
    return str(json.loads(said.removeprefix("```json\n").removesuffix("\n```"))["payload"]["order"])


def test_200_cases_on_two_workers_lose_none_and_repeat_none_when_one_is_killed(
    cluster: Cluster, tmp_path: Path
) -> None:
    calls = tmp_path / "tool-calls.jsonl"
    engine = cluster.engine()
    try:
        with Provider(script) as provider:
            dataset = _dataset(engine, provider)
            recorded = len(provider.answered())
            cluster.overrides["RUNWRIGHT_TEST_EFFECT_LOG"] = str(calls)

            first = _eval(
                cluster,
                provider,
                "eval-v1",
                dataset,
                "--agent",
                "tests.agents_evals:refunds_v1",
                "--against",
                "runs",
                "--label",
                "v1",
            )
            v1 = _result(first, 600)
            assert v1["done"] == CASES and v1["status"] == "completed"

            second = _eval(
                cluster,
                provider,
                "eval-v2",
                dataset,
                "--agent",
                "tests.agents_evals:refunds_v2",
                "--against",
                "v1",
                "--label",
                "v2",
            )
            store = engine.store
            evaluation_id = wait_until(
                lambda: next(
                    (e.id for e in store.evaluations(dataset=dataset) if e.label == "v2"), None
                ),
                120,
                "the second evaluation to start",
            )

            def holder() -> int | None:
                if store.evaluation(evaluation_id, cases=False).info.done < 40:
                    return None
                for case in store.evaluation(evaluation_id).cases:
                    if case.status is EvaluationCaseStatus.RUNNING and case.claimed_by:
                        return int(case.claimed_by.rpartition(":")[2])
                return None

            victim = wait_until(holder, 300, "a worker holding a case after 40 cases")
            os.kill(victim, signal.SIGKILL)
            v2 = _result(second, 600)
            with pytest.raises(ProcessLookupError):  # it died, and its runner reaped it
                os.kill(victim, 0)
            v2_requests = provider.answered()[recorded:]
    finally:
        engine.close()  # its cancel listener, before the cluster's Redis goes

    # Every case done once; only the case the killed worker held was claimed twice.
    cases = v2["cases"]
    assert sorted(c["position"] for c in cases) == list(range(CASES))
    assert all(c["status"] == "done" for c in cases)
    attempts = Counter(c["attempts"] for c in cases)
    assert attempts[1] >= CASES - 1 and set(attempts) <= {1, 2}, attempts
    # No case was replayed again once scored: its first model request, per attempt.
    firsts = Counter(
        _order(r)
        for r in v2_requests
        if V2 in r.body["messages"][0]["content"] and len(r.body["messages"]) == 2
    )
    by_order = {f"A-{c['position']}": c["attempts"] for c in cases}
    assert all(1 <= firsts[o] <= by_order[o] for o in by_order), firsts
    # No effect ran in either evaluation; the read-only lookups ran again.
    called = [json.loads(line)["tool"] for line in calls.read_text().splitlines()]
    assert "refund" not in called and called.count("find_order") >= 2 * CASES
    # The summary compares the versions: the escalations fail "output".
    summary = {s["name"]: s for s in v2["summary"]["scorers"]}
    assert summary["output"]["passed"] == CASES - len(OVER)
    assert summary["output"]["baseline_pass_rate"] == 1.0
    assert summary["output"]["difference"] == pytest.approx(-len(OVER) / CASES)
    assert summary["output"]["high"] < 0
    assert summary["no_would_have_run"]["passed"] == CASES
    assert {s["name"]: s["passed"] for s in v1["summary"]["scorers"]}["output"] == CASES
