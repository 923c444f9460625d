"""Busy workers keep consuming after their RabbitMQ node restarts.

Two workers of 16 threads each execute long runs when the node stops; each
holds unacknowledged messages on a channel that dies with it. After the node
is back, runs started one after another must each start within seconds, and
both workers must take their share. There is no beat: a message that a
worker took and never executed would leave its run queued for good, instead
of being covered by tick()'s re-enqueue.
"""

from __future__ import annotations

import time

import pytest

from runner import Engine
from store.models import RunStatus
from tasks.consumer import RECONNECT_MAX_SECONDS
from tests.e2e.cluster import Cluster, Proc, completed_by, wait_until
from tests.rabbitmq import RabbitNode

RESTARTS = 2
FRESH = 30
# A run started after the restart waits for nothing but a free thread.
FIRST_EXECUTION_BOUND = 10.0


def first_execution_waits(engine: Engine, run_ids: list[str]) -> list[float]:
    waits = []
    for run_id in run_ids:
        run = engine.get_run(run_id)
        if run.started_at is None:
            waits.append(float("inf"))
        else:
            waits.append((run.started_at - run.created_at).total_seconds())
    return waits


def assert_alive(workers: list[Proc]) -> None:
    for worker in workers:
        assert worker.popen.poll() is None, f"{worker.name} exited:\n{worker.log()[-3000:]}"


# Each restart of the node takes 10-15 s on a loaded machine.
@pytest.mark.timeout(360)
def test_busy_workers_keep_consuming_after_rabbitmq_restarts(
    own_rabbitmq_cluster: Cluster, rabbitmq_node: RabbitNode
) -> None:
    cluster = own_rabbitmq_cluster
    workers = [cluster.worker("w1", concurrency=16), cluster.worker("w2", concurrency=16)]
    engine = cluster.engine()
    busy_ids: list[str] = []
    for restart in range(1, RESTARTS + 1):
        # Long runs on both workers: each holds unacked messages when the node stops.
        busy = [
            engine.start("paced", {"steps": 50, "latency": 0.5, "restart": restart, "n": i})
            for i in range(8)
        ]
        running = [r.id for r in busy]
        busy_ids += running
        wait_until(
            lambda ids=running: all(engine.get_run(r).status is RunStatus.RUNNING for r in ids),
            60,
            f"busy runs before restart {restart}",
        )
        rabbitmq_node.restart()
        fresh: list[str] = []
        for i in range(FRESH):
            fresh.append(
                engine.start("paced", {"steps": 2, "latency": 0.2, "r": restart, "i": i}).id
            )
            time.sleep(0.5)
        try:
            wait_until(
                lambda ids=fresh: all(engine.get_run(r).status is RunStatus.COMPLETED for r in ids),
                60,
                f"the runs started after restart {restart} to complete",
                0.2,
            )
        finally:
            assert_alive(workers)
        waits = first_execution_waits(engine, fresh)
        assert max(waits) <= FIRST_EXECUTION_BOUND, sorted(waits)[-5:]
        # Both workers took their share: neither stopped consuming.
        shares = {w.name: len(completed_by(w) & set(fresh)) for w in workers}
        assert min(shares.values()) >= FRESH // 5, shares
    wait_until(
        lambda: all(engine.get_run(r).status is RunStatus.COMPLETED for r in busy_ids),
        120,
        "the busy runs to complete",
        0.5,
    )
    assert_alive(workers)
    # The premise held: each worker lost its connection at every restart.
    for worker in workers:
        assert worker.log().count("Connection to broker lost") >= RESTARTS, worker.name


@pytest.mark.timeout(180)
def test_a_worker_reconnects_within_seconds_of_its_broker_coming_back(
    own_rabbitmq_cluster: Cluster, rabbitmq_node: RabbitNode
) -> None:
    """Celery's back-off between tries grows by 2 s up to 30 s: after a 15 s
    outage a worker could idle 5 s more, after a minute's 30 s. Runwright's
    consumer tries every RECONNECT_MAX_SECONDS at most."""
    cluster = own_rabbitmq_cluster
    worker = cluster.worker("w1", concurrency=4)
    engine = cluster.engine()
    rabbitmq_node.stop()
    time.sleep(15)
    rabbitmq_node.start()
    worker.wait_for("Connected to", 30)  # the first connect was at startup
    wait_until(lambda: worker.log().count("Connected to ") >= 2, 60, "the worker to reconnect", 0.1)
    tries = [
        float(line.split("Trying again in ")[1].split()[0])
        for line in worker.log().splitlines()
        if "Trying again in " in line
    ]
    assert len(tries) >= 5, tries
    # One try every RECONNECT_MAX_SECONDS at most, not Celery's 30 s.
    assert max(tries) <= RECONNECT_MAX_SECONDS, tries
    run = engine.start("paced", {"steps": 2, "latency": 0.1})
    wait_until(lambda: engine.get_run(run.id).status is RunStatus.COMPLETED, 30, "a run after")
