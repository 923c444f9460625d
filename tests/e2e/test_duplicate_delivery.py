"""A message delivered twice, against a real worker and a real Flower.

The second delivery of a run (a redelivery after a broker reconnect or a
visibility timeout, or tick()'s re-enqueue while an execution still has the
run) cannot claim it. Its task must read as what it is: IGNORED in Flower,
with the reason as its result (who holds the run, or that it has settled), and
one INFO line in the worker's log; never a SUCCESS that did nothing, nor an
error. The run is not touched: its owner carries it on and completes it once,
its effects once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tests.agents_failing  # noqa: F401  (the failing agent, known here too)
from runner import Engine
from runner.celery import IGNORED
from store.models import Claim, RunStatus
from tests.agents import read_effect_log
from tests.e2e.cluster import Cluster, Proc, wait_until
from tests.e2e.flower import Flower, running_flower


@pytest.fixture
def flower(cluster: Cluster) -> Iterator[Flower]:
    with running_flower(cluster) as running:
        yield running


def effects_of(cluster: Cluster, run_id: str) -> list[dict[str, Any]]:
    """What the run's tools really did (a charge's key starts with its run id)."""
    log = read_effect_log(str(cluster.workdir / "effects.jsonl"))
    return [e for e in log if e.get("run_id") == run_id or e.get("key", "").startswith(run_id)]


def ignored_tasks(flower: Flower, run_id: str) -> list[dict[str, Any]]:
    return [t for t in flower.executions(run_id) if t.get("state") == IGNORED]


def deliver_again(engine: Engine, run_id: str) -> None:
    """Send the run's execute message once more: the message enqueue sends."""
    engine.deps.send([run_id])


def assert_one_info_line(worker: Proc, reason: str) -> None:
    log = worker.log()
    lines = [line for line in log.splitlines() if reason in line]
    assert len(lines) == 1, log[-3000:]
    assert "INFO/" in lines[0], lines[0]
    assert "Traceback" not in log and "raised unexpected" not in log, log[-3000:]
    # Celery's own line for an ignored task would say less, a second time.
    assert "] ignored" not in log, log[-3000:]


def test_a_delivery_of_a_run_held_by_another_execution_is_ignored(
    cluster: Cluster, flower: Flower
) -> None:
    worker = cluster.worker("w1")
    engine = cluster.engine()
    flower.follow(engine)
    run = engine.start("steady", {"steps": 10, "latency": 0.5})

    def claimed() -> Claim | None:
        now = engine.get_run(run.id)
        return now.claim if now.status is RunStatus.RUNNING else None

    claim: Claim = wait_until(claimed, 30, "the run to be claimed")
    deliver_again(engine, run.id)

    ignored = wait_until(lambda: ignored_tasks(flower, run.id), 30, "the duplicate in Flower")
    reason = (
        f"run {run.id} is held by {claim.owner} (epoch {claim.epoch}); "
        "this delivery is a duplicate and was ignored"
    )
    assert [t["result"] for t in ignored] == [reason]
    assert ignored[0]["worker"].startswith("w1@")
    assert ignored[0]["uuid"] in flower.tasks(f"?state={IGNORED}")  # Flower's state filter
    # The duplicate left the run to its owner, which still has it.
    still = engine.get_run(run.id)
    assert still.status is RunStatus.RUNNING, still.status
    assert still.claim is not None and (still.claim.owner, still.claim.epoch) == (
        claim.owner,
        claim.epoch,
    )

    wait_until(lambda: engine.get_run(run.id).ended, 60, "the run to settle")
    done = engine.get_run(run.id)
    assert done.status is RunStatus.COMPLETED
    assert done.takeovers == 0 and done.claim is None
    # One execution did the work: one SUCCESS next to the IGNORED, each charge once.
    task = wait_until(lambda: flower.finished_execution(run.id), 30, "the execution in Flower")
    assert task["state"] == "SUCCESS" and task["result"] == "'completed'", task
    states = sorted(t["state"] for t in flower.executions(run.id))
    assert states == [IGNORED, "SUCCESS"]
    keys = [e["key"] for e in effects_of(cluster, run.id)]
    assert len(keys) == 9 and len(set(keys)) == 9, keys
    assert worker.log().count("'completed' [run=" + run.id) == 1
    assert_one_info_line(worker, reason)
    assert "ERROR/" not in worker.log()


@pytest.mark.parametrize(
    ("agent", "payload", "status"),
    [
        ("steady", {"steps": 2, "latency": 0.0}, RunStatus.COMPLETED),
        ("refused", {}, RunStatus.FAILED),
    ],
)
def test_a_delivery_of_a_settled_run_is_ignored(
    cluster: Cluster, flower: Flower, agent: str, payload: dict[str, Any], status: RunStatus
) -> None:
    cluster.overrides["RUNWRIGHT_AGENTS"] = "tests.agents,tests.agents_failing"
    worker = cluster.worker("w1")
    engine = cluster.engine()
    flower.follow(engine)
    run = engine.start(agent, payload)
    first = wait_until(lambda: flower.finished_execution(run.id), 60, "the run's execution")
    settled = engine.get_run(run.id)
    assert settled.status is status
    effects = effects_of(cluster, run.id)
    assert effects

    deliver_again(engine, run.id)
    ignored = wait_until(lambda: ignored_tasks(flower, run.id), 30, "the duplicate in Flower")
    reason = f"run {run.id} is already {status.value}; this delivery is a duplicate and was ignored"
    assert [t["result"] for t in ignored] == [reason]
    assert ignored[0]["uuid"] != first["uuid"]
    # The first execution's task keeps its state; the run stays as it settled.
    again = flower.finished_execution(run.id)
    assert again is not None and (again["uuid"], again["state"]) == (first["uuid"], first["state"])
    assert engine.get_run(run.id) == settled
    assert effects_of(cluster, run.id) == effects
    assert_one_info_line(worker, reason)
