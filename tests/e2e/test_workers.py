"""Real workers and beat, no faults: throughput with approvals, duplicates,
cross-process cancel, concurrency keys, lost broker messages."""

from __future__ import annotations

import collections
import itertools
import time
from typing import Any

from celery import Celery

from runner import Engine
from store.models import EffectStatus, RunStatus, StepKind
from tests.agents import read_effect_log
from tests.e2e.cluster import Cluster, wait_until
from tests.helpers import journaled_effect

ENDED = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}


def effects_by_key(cluster: Cluster, tool: str) -> collections.Counter[str]:
    log = read_effect_log(str(cluster.workdir / "effects.jsonl"))
    return collections.Counter(e["key"] for e in log if e["tool"] == tool)


def test_forty_runs_with_approvals_on_two_workers(shared_cluster: Cluster) -> None:
    engine = shared_cluster.engine()
    runs = [engine.start("fleet", {"amount": 150 if i % 4 == 0 else 20, "n": i}) for i in range(40)]
    needs_approval = {r.id for i, r in enumerate(runs) if i % 4 == 0}
    approved: set[str] = set()

    def all_settled() -> bool:
        states = {r.id: engine.get_run(r.id) for r in runs}
        for run_id, run in states.items():
            if run.status is RunStatus.WAITING and run_id not in approved:
                assert run.waiting is not None
                token = engine.token(run.waiting.approval_id)
                engine.decide(run.waiting.approval_id, True, "ok", token=token)
                approved.add(run_id)
        return all(run.status in ENDED for run in states.values())

    wait_until(all_settled, 180, "40 runs to settle", interval=0.2)
    assert approved == needs_approval
    charges = effects_by_key(shared_cluster, "charge")
    refunds = effects_by_key(shared_cluster, "refund")
    for run in runs:
        done = engine.get_run(run.id)
        assert done.status is RunStatus.COMPLETED, done.error
        steps = engine.steps(run.id)
        assert [s.index for s in steps if s.kind is StepKind.LLM] == [1, 2, 3, 4, 5]
        tool_steps = [(s.index, s.tool_call_id) for s in steps if s.kind is StepKind.TOOL]
        assert len(tool_steps) == len(set(tool_steps)) == 4
        run_charges = [k for k in charges if k.startswith(run.id)]
        run_refunds = [k for k in refunds if k.startswith(run.id)]
        assert len(run_charges) == 1 and charges[run_charges[0]] == 1
        assert len(run_refunds) == 1 and refunds[run_refunds[0]] == 1
        effects = [journaled_effect(engine.store, run.id, k) for k in run_charges + run_refunds]
        assert all(e is not None and e.status is EffectStatus.COMPLETED for e in effects)


def test_five_copies_of_one_task_execute_once(shared_cluster: Cluster) -> None:
    creator = Engine(shared_cluster.engine().store, settings=shared_cluster.engine().settings)
    run = creator.start("fleet", {"amount": 5, "copies": 5})  # not enqueued
    client = Celery("copies", broker=shared_cluster.broker_url)
    for _ in range(5):
        client.send_task("runwright.execute", args=[run.id], queue="runwright")
    engine = shared_cluster.engine()
    wait_until(lambda: engine.get_run(run.id).status is RunStatus.COMPLETED, 60, "the run")
    steps = engine.steps(run.id)
    assert [s.index for s in steps if s.kind is StepKind.LLM] == [1, 2, 3, 4, 5]
    assert len([s for s in steps if s.kind is StepKind.TOOL]) == 4
    run_row = engine.get_run(run.id)
    assert run_row.usage.input_tokens == 5 * 10  # five model calls, not more
    charges = effects_by_key(shared_cluster, "charge")
    assert [charges[k] for k in charges if k.startswith(run.id)] == [1]


def test_cancel_from_another_process_interrupts_the_model_call(shared_cluster: Cluster) -> None:
    engine = shared_cluster.engine()
    run = engine.start("hang")  # its model answers in an hour
    wait_until(lambda: engine.get_run(run.id).status is RunStatus.RUNNING, 30, "it to run")
    time.sleep(0.5)  # the model call is in flight now
    assert engine.cancel(run.id).action == "requested"
    wait_until(lambda: engine.get_run(run.id).status is RunStatus.CANCELLED, 60, "the cancel")
    assert not [s for s in engine.steps(run.id) if s.kind is StepKind.LLM]  # never answered


def test_runs_sharing_a_key_run_one_at_a_time_in_order(shared_cluster: Cluster) -> None:
    engine = shared_cluster.engine()
    runs = [
        engine.start("steady", {"customer": "acme", "steps": 3, "latency": 0.2, "n": i})
        for i in range(3)
    ]
    wait_until(
        lambda: all(engine.get_run(r.id).status is RunStatus.COMPLETED for r in runs),
        60,
        "the three runs",
        0.1,
    )
    done = [engine.get_run(r.id) for r in runs]
    for earlier, later in itertools.pairwise(done):
        assert earlier.finished_at is not None and later.started_at is not None
        assert earlier.finished_at <= later.started_at  # one at a time, oldest first


def test_lost_broker_message_is_recovered_by_tick(shared_cluster: Cluster) -> None:
    engine = shared_cluster.engine()
    silent = Engine(engine.store, leases=engine.leases, settings=engine.settings)  # no enqueue
    run = silent.start("fleet", {"amount": 1, "lost": True})
    assert engine.get_run(run.id).status is RunStatus.QUEUED
    done: Any = wait_until(
        lambda: engine.get_run(run.id).status is RunStatus.COMPLETED, 30, "tick to re-enqueue"
    )
    assert done
