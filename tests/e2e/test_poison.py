"""A run whose tool kills its worker is settled failed/crashed after
RUNWRIGHT_MAX_TAKEOVERS takeovers, instead of crashing workers forever."""

from __future__ import annotations

import time

import sqlalchemy as sa

import tests.agents_poison  # noqa: F401  (the poison agent, known here too)
from runner import Engine
from store.models import RunStatus
from tests.agents import read_effect_log
from tests.e2e.cluster import Cluster, Proc

LIMIT = 3


def _epoch(engine: Engine, run_id: str) -> int:
    with engine.store.engine.connect() as conn:  # type: ignore[attr-defined]
        epoch: int = conn.execute(
            sa.text("SELECT claim_epoch FROM runs WHERE id = :id"), {"id": run_id}
        ).scalar_one()
    return epoch


def test_poison_run_settles_crashed_and_healthy_runs_complete(cluster: Cluster) -> None:
    cluster.overrides.update(
        RUNWRIGHT_AGENTS="tests.agents,tests.agents_poison",
        RUNWRIGHT_MAX_TAKEOVERS=str(LIMIT),
    )
    cluster.beat()
    worker = cluster.worker("w0")
    engine = cluster.engine()
    # Each needs several worker lives (12 s of steps, 3 s fuse): they go down
    # with every worker the poison run kills, and move on each time.
    healthy = [engine.start("paced", {"steps": 40, "latency": 0.3}) for _ in range(4)]
    poison = engine.start("poison", {"customer": "acme"})
    # Queued behind the poison run on its concurrency key: it can only run once
    # the poison run has settled and handed the key on.
    behind = engine.start("steady", {"customer": "acme", "steps": 2, "latency": 0.05})
    everyone = [*healthy, poison, behind]

    # The supervisor: restart the worker whenever it dies, until all settle.
    deaths = 0
    deadline = time.monotonic() + 95
    current: Proc = worker
    while time.monotonic() < deadline:
        runs = [engine.get_run(r.id) for r in everyone]
        if all(r.ended for r in runs):
            break
        if current.popen.poll() is not None:
            deaths += 1
            current = cluster.worker(f"w{deaths}", wait=False)
        time.sleep(0.2)
    else:
        states = {r.id: engine.get_run(r.id).status.value for r in everyone}
        raise AssertionError(f"runs did not settle after {deaths} worker deaths: {states}")

    crashed = engine.get_run(poison.id)
    assert crashed.status is RunStatus.FAILED, crashed
    assert crashed.error is not None and crashed.error.code == "crashed"
    assert f"last epoch {LIMIT}" in crashed.error.message
    detonations = [
        e
        for e in read_effect_log(str(cluster.workdir / "effects.jsonl"))
        if e["tool"] == "detonate" and e["run_id"] == poison.id
    ]
    # One execution per epoch, then the claim that hit the limit settled it.
    assert len(detonations) == LIMIT, detonations
    assert len({e["pid"] for e in detonations}) == LIMIT
    assert deaths == LIMIT  # only the poison run killed workers
    for run in [*healthy, behind]:
        done = engine.get_run(run.id)
        assert done.status is RunStatus.COMPLETED, done
    # Healthy runs died as often as the poison run did, but each execution made
    # progress, which reset their count: none was crashed.
    epochs = [_epoch(engine, r.id) for r in healthy]
    assert max(epochs) >= LIMIT + 1, epochs
    assert engine.get_run(behind.id).output == "steady done"
    # Settled means out of recovery: no worker dies any more.
    time.sleep(3)
    assert current.popen.poll() is None
    assert engine.tick().lapsed == []
