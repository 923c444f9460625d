"""A frozen worker does not keep the runs RabbitMQ pushed to it.

RabbitMQ pushes messages to each consumer until its prefetch window is full,
whether or not the process reads them: a worker stopped by SIGSTOP (a long
pause, a frozen VM) keeps receiving its share. Those runs wait until the node
takes the messages back, which it does when it closes the silent worker's
connection: two to three heartbeat intervals (RUNWRIGHT_BROKER_HEARTBEAT_SECONDS)
after it last heard from it. With Celery's own default of 120 s they stayed
there for minutes. tick()'s re-enqueue is pushed out of reach here, and there
is no beat: only the heartbeat can hand the messages to the other worker.
"""

from __future__ import annotations

import signal
import time

import pytest

from runner import Engine
from store.models import RunStatus
from tests.e2e.cluster import Cluster, completed_by, wait_until
from tests.e2e.test_rabbitmq_restart import first_execution_waits

RUNS = 16
HEARTBEAT = 4
# The node declares the worker gone two to three heartbeats after its last frame.
FIRST_EXECUTION_BOUND = 3 * HEARTBEAT + 3.0
FROZEN = FIRST_EXECUTION_BOUND + 15


@pytest.mark.timeout(240)
def test_runs_pushed_to_a_frozen_worker_go_to_another_within_the_heartbeat(
    own_rabbitmq_cluster: Cluster,
) -> None:
    cluster = own_rabbitmq_cluster
    cluster.overrides["RUNWRIGHT_REENQUEUE_SECONDS"] = "600"
    cluster.overrides["RUNWRIGHT_BROKER_HEARTBEAT_SECONDS"] = str(HEARTBEAT)
    frozen = cluster.worker("frozen", concurrency=4)
    live = cluster.worker("live", concurrency=4)
    engine: Engine = cluster.engine()
    frozen.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        ids = []
        for i in range(RUNS):
            ids.append(engine.start("paced", {"steps": 2, "latency": 0.1, "i": i}).id)
            time.sleep(0.25)
        wait_until(
            lambda: all(engine.get_run(r).status is RunStatus.COMPLETED for r in ids),
            FROZEN - (time.monotonic() - stopped_at),
            "every run to complete while a worker is frozen",
            0.2,
        )
        waits = first_execution_waits(engine, ids)
    finally:
        frozen.signal(signal.SIGCONT)
    assert max(waits) <= FIRST_EXECUTION_BOUND, sorted(waits)[-5:]
    # The premise: the frozen worker was handed some of them (they waited for
    # the heartbeat, not a free thread), and all ran on the live one.
    assert sorted(waits)[-1] > HEARTBEAT, sorted(waits)
    assert completed_by(live) >= set(ids)
    frozen.wait_for("Connection to broker lost", 30)
