"""Child runs on real ``celery worker``s (issue 28's acceptance, its first
part): a lead hands work to two child agents in one step; they run side by
side on a two-worker cluster while the lead waits holding no worker; the lead
completes with both results. A worker SIGKILLed while the children run: every
run completes, and exactly two children exist. Real Postgres, Redis and
workers; the agents are tests/agents_children.py."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest

import tests.agents_children  # noqa: F401  (this process starts the runs by name)
from store.models import RunStatus, StepKind
from tests.e2e.cluster import Cluster, settled, wait_until

AGENTS = "tests.agents,tests.agents_children"


def lead_results(cluster: Cluster, run_id: str) -> dict[str, Any]:
    checkpoint = cluster.engine().checkpoint(run_id)
    assert checkpoint is not None
    return {m["tool_call_id"]: m["content"] for m in checkpoint.messages if m.get("role") == "tool"}


def test_a_lead_hands_two_tasks_to_children_that_run_side_by_side(cluster: Cluster) -> None:
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=2)
    cluster.worker("w2", RUNWRIGHT_AGENTS=AGENTS, concurrency=2)
    engine = cluster.engine()
    run = engine.start("kids_lead")
    wait_until(lambda: len(engine.children(run.id)) == 2, 60, "the lead to start its children")
    # While they run (3 s each), the lead waits and holds no claim. The
    # children exist a moment before the lead's step commits its wait.
    waiting = wait_until(
        lambda: (r := engine.get_run(run.id)).status is RunStatus.WAITING and r,
        2,
        "the lead to wait",
        interval=0.02,
    )
    assert waiting.claim is None
    assert any(not c.status.ended for c in engine.children(run.id))
    done = settled(cluster, run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    children = engine.children(run.id)
    assert sorted(c.agent for c in children) == ["kids_draft", "kids_research"]
    assert all(c.status is RunStatus.COMPLETED for c in children)
    # Side by side: each started before the other finished (each takes 3 s).
    first, second = children
    assert first.started_at is not None and second.started_at is not None
    assert first.finished_at is not None and second.finished_at is not None
    assert first.started_at < second.finished_at and second.started_at < first.finished_at
    results = lead_results(cluster, run.id)
    assert json.loads(results["c_research"]) == {"topic": "tides", "sources": 4}
    assert results["c_draft"] == "a draft about tides"
    # The children's usage is in the lead's totals: its own two replies and
    # theirs, each reporting 10 tokens in and 5 out.
    assert sum(c.usage.input_tokens for c in children) == 20
    assert (done.usage.input_tokens, done.usage.output_tokens) == (40, 20)


@pytest.mark.timeout(240)
def test_a_worker_killed_while_the_children_run_leaves_every_run_complete_and_two_children(
    cluster: Cluster,
) -> None:
    doomed = cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    engine = cluster.engine()
    run = engine.start("kids_lead")
    wait_until(
        lambda: sum(c.status is RunStatus.RUNNING for c in engine.children(run.id)) == 2,
        60,
        "both children to run on the one worker",
        interval=0.1,
    )
    doomed.signal(signal.SIGKILL)  # mid-step for both children
    doomed.wait(10)
    cluster.worker("w2", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    cluster.beat()  # recovers the children whose claims lapsed
    done = settled(cluster, run.id, timeout=180)
    assert done.status is RunStatus.COMPLETED, done.error
    children = engine.children(run.id)
    assert len(children) == 2 and all(c.status is RunStatus.COMPLETED for c in children)
    assert all(c.takeovers == 0 for c in children)  # progress since the takeover reset it
    results = lead_results(cluster, run.id)
    assert set(results) == {"c_research", "c_draft"}


def test_cancelling_the_parent_while_its_children_run_cancels_them_mid_call(
    cluster: Cluster,
) -> None:
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    cluster.worker("w2", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    engine = cluster.engine()
    run = engine.start("kids_cancel_lead")

    def running() -> bool:
        by_call = {c.parent_call_id: c for c in engine.children(run.id)}
        return len(by_call) == 3 and all(
            by_call[k].status is RunStatus.RUNNING for k in ("c_one", "c_two")
        )

    wait_until(running, 60, "the two slow children to run", interval=0.1)
    engine.cancel(run.id, by="ops")
    by_call = {c.parent_call_id: c for c in engine.children(run.id)}
    wait_until(
        lambda: all(
            engine.get_run(by_call[k].id).status is RunStatus.CANCELLED for k in ("c_one", "c_two")
        ),
        60,
        "both children to be cancelled",
        interval=0.05,
    )
    assert engine.get_run(run.id).status is RunStatus.CANCELLED
    # Their model calls (30 s each) were cut off, not waited out.
    for k in ("c_one", "c_two"):
        assert not [s for s in engine.steps(by_call[k].id) if s.kind is StepKind.LLM], k
    assert engine.get_run(by_call["c_one"].id).cancelled_by == "ops"
    # The detached child runs on to its end.
    detached = settled(cluster, by_call["c_detached"].id)
    assert detached.status is RunStatus.COMPLETED


def test_a_childs_approval_shows_with_its_parent_and_approving_completes_both(
    cluster: Cluster,
) -> None:
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    engine = cluster.engine()
    run = engine.start("kids_approval_lead")
    [item] = wait_until(
        lambda: [i for i in engine.inbox() if i.run.agent == "kids_refunder" and
                 i.parents and i.parents[0].id == run.id],
        60,
        "the child's approval in the inbox",
    )  # fmt: skip
    assert engine.get_run(run.id).status is RunStatus.WAITING
    engine.decide(item.approval.approval_id, True, trusted=True, by="ops")
    done = settled(cluster, run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    assert engine.get_run(item.run.id).status is RunStatus.COMPLETED
    assert lead_results(cluster, run.id) == {"c_refunder": "refunded A1"}


def test_a_shared_cost_budget_stops_the_tree_on_workers(cluster: Cluster) -> None:
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    cluster.worker("w2", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    engine = cluster.engine()
    run = engine.start("kids_budget_lead")
    done = settled(cluster, run.id, timeout=120)
    assert done.status is RunStatus.FAILED and done.error is not None
    assert done.error.code == "budget_exceeded", done.error
    children = engine.children(run.id)
    assert len(children) == 2 and all(c.status.ended for c in children)
    # Side by side, each stopped once the tree's cost reached $0.006, or
    # finished its four steps: never more than the budget and a step each.
    assert done.cost_usd <= 0.006 + 2 * 0.001 + 1e-9, done.cost_usd
    assert any(c.status is RunStatus.FAILED for c in children)
    assert sum(c.cost_usd for c in children) == pytest.approx(done.cost_usd)


def test_a_redelivered_parent_task_and_a_stray_resume_start_no_third_child(
    cluster: Cluster,
) -> None:
    from celery import Celery

    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    engine = cluster.engine()
    run = engine.start("kids_lead")
    wait_until(lambda: len(engine.children(run.id)) == 2, 60, "the lead's children")
    # The broker delivers the lead's task again, and again, while it waits.
    client = Celery("redeliver", broker=cluster.broker_url)
    client.conf.task_default_queue = cluster.queue
    for _ in range(3):
        client.send_task("runwright.execute", args=[run.id])
    done = settled(cluster, run.id)
    assert done.status is RunStatus.COMPLETED, done.error
    for _ in range(2):
        client.send_task("runwright.execute", args=[run.id])
    time.sleep(2)
    assert len(engine.children(run.id)) == 2
    assert set(lead_results(cluster, run.id)) == {"c_research", "c_draft"}


def test_the_parents_process_killed_after_starting_its_children_leaves_exactly_two(
    cluster: Cluster,
) -> None:
    import subprocess
    import sys

    engine = cluster.engine()
    run = engine.start("kids_lead")
    killed = subprocess.run(
        [sys.executable, "-m", "tests.proc", run.id],
        env={**cluster.env(), "RUNWRIGHT_TEST_FAULTS": "after_children_start=kill"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]  # died before the step's commit
    assert len(engine.children(run.id)) == 2  # created, never sent
    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=4)
    cluster.beat()  # recovers the lead once its lease lapses
    done = settled(cluster, run.id, timeout=120)
    assert done.status is RunStatus.COMPLETED, done.error
    children = engine.children(run.id)
    assert len(children) == 2 and all(c.status is RunStatus.COMPLETED for c in children)
    assert set(lead_results(cluster, run.id)) == {"c_research", "c_draft"}


@pytest.mark.timeout(240)
def test_eight_children_side_by_side_overshoot_a_shared_token_budget_by_one_call_at_most(
    cluster: Cluster,
) -> None:
    from tests.agents_children import FANOUT, FANOUT_BUDGET

    cluster.worker("w1", RUNWRIGHT_AGENTS=AGENTS, concurrency=8)
    cluster.worker("w2", RUNWRIGHT_AGENTS=AGENTS, concurrency=8)
    engine = cluster.engine()
    run = engine.start("kids_fanout_lead")
    done = settled(cluster, run.id, timeout=180)
    assert done.status is RunStatus.FAILED and done.error is not None
    assert done.error.code == "budget_exceeded", done.error
    children = engine.children(run.id)
    assert len(children) == FANOUT and all(c.status.ended for c in children)
    calls = [
        s.usage.total
        for child in children
        for s in engine.steps(child.id)
        if s.kind.value == "llm" and s.usage is not None
    ]
    # The lead's totals hold the tree's spend, and the tree went past the
    # budget by less than one call's reservation: its request and the
    # 50-token cap of its reply (docs/children.md).
    spent = done.usage.total
    lead_own = sum(s.usage.total for s in engine.steps(run.id) if s.kind.value == "llm" and s.usage)
    assert spent == lead_own + sum(calls)
    assert FANOUT_BUDGET <= spent < FANOUT_BUDGET + max(calls) + 50, (spent, sorted(calls))
    # The children did run side by side: some of their calls overlapped.
    starts = sorted(c.started_at for c in children if c.started_at is not None)
    assert starts[1] < min(c.finished_at for c in children if c.finished_at is not None)
