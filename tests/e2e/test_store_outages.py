"""Executions delivered while Redis (the leases) or Postgres is unreachable.

The broker stays up (a Redis server of its own), so messages keep arriving
while the workers cannot claim. Each delivered execution must wait for the
store and then run, or hand its message back to the broker, never fail: its
task is no error in Flower and no worker logs "raised unexpected". There is no
beat, so a run whose delivered execution gave up would stay queued: tick()'s
re-enqueue is not there to cover it.

Postgres goes away behind a proxy of the test's own (``tests/tcpproxy.py``)
between the workers and the test's database, so the machine's Postgres is
never touched and the test's own engine, connected directly, can start runs
during the outage.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from runner import Engine
from store.local import LocalRedis, free_port
from store.models import RunStatus
from tests.e2e.cluster import Cluster, Proc, wait_until
from tests.e2e.flower import running_flower
from tests.services import Services
from tests.tcpproxy import TcpProxy

RUNS = 6


@dataclass
class Outages:
    cluster: Cluster
    leases: LocalRedis  # the leases' Redis, which a test may stop
    postgres: TcpProxy  # the workers' way to Postgres, which a test may cut


@pytest.fixture
def outages(services: Services, tmp_path: Path) -> Iterator[Outages]:
    leases = LocalRedis(tmp_path / "leases", free_port())
    broker = LocalRedis(tmp_path / "broker", free_port())
    leases.start()
    broker.start()
    name = services.new_database()
    direct = make_url(services.database_url(name))
    proxy = TcpProxy(direct.host or "127.0.0.1", direct.port or 5432).start()
    cluster = Cluster(
        database_url=direct.set(host="127.0.0.1", port=proxy.port).render_as_string(False),
        engine_database_url=direct.render_as_string(False),
        redis_url=leases.url(0),
        broker_url=broker.url(0),
        workdir=tmp_path,
    )
    try:
        yield Outages(cluster, leases, proxy)
    finally:
        cluster.stop()
        proxy.close()
        leases.kill()
        broker.kill()
        services.drop_database(name)


def received(workers: list[Proc], run_ids: list[str]) -> bool:
    """Whether every run's execution has been delivered to a worker."""
    logs = "".join(w.log() for w in workers)
    return all(f"received [run={run_id}]" in logs for run_id in run_ids)


def start_runs_during_the_outage(
    engine: Engine, workers: list[Proc], tag: str, lasting: float
) -> list[str]:
    """Runs started, and their executions delivered, while the store is away;
    it stays away ``lasting`` seconds after the last delivery."""
    ids = [engine.start("steady", {"steps": 3, "latency": 0.1, tag: i}).id for i in range(RUNS)]
    wait_until(lambda: received(workers, ids), 30, "the executions to be delivered")
    time.sleep(lasting)
    return ids


def wait_completed(engine: Engine, run_ids: list[str], within: float) -> None:
    wait_until(
        lambda: all(engine.get_run(r).status is RunStatus.COMPLETED for r in run_ids),
        within,
        "the runs delivered during the outage to complete",
        0.1,
    )


def assert_no_failed_task(workers: list[Proc]) -> None:
    for worker in workers:
        log = worker.log()
        assert "raised unexpected" not in log, log[-3000:]
        assert "ERROR/" not in log, log[-3000:]


def claim_epochs(engine: Engine, run_ids: list[str]) -> list[int]:
    with engine.store.engine.connect() as conn:  # type: ignore[attr-defined]
        return list(
            conn.execute(
                sa.text("SELECT claim_epoch FROM runs WHERE id = ANY(CAST(:ids AS uuid[]))"),
                {"ids": run_ids},
            ).scalars()
        )


def waiting_warnings(workers: list[Proc], run_ids: list[str]) -> dict[str, int]:
    logs = "".join(w.log() for w in workers)
    return {r: len(re.findall(rf"WARNING/.*run {r}: .*unavailable", logs)) for r in run_ids}


def test_executions_delivered_while_redis_is_down_wait_for_it(outages: Outages) -> None:
    cluster = outages.cluster
    workers = [cluster.worker("w1", concurrency=8), cluster.worker("w2", concurrency=8)]
    engine = cluster.engine()
    outages.leases.kill()
    # Longer than redis-py's own retries within one command (10 tries, up to ~5 s).
    ids = start_runs_during_the_outage(engine, workers, "redis", 8.0)
    outages.leases.start()
    wait_completed(engine, ids, 20)
    assert_no_failed_task(workers)
    # Each waited in its one execution and claimed the run once.
    assert claim_epochs(engine, ids) == [1] * RUNS
    assert set(waiting_warnings(workers, ids).values()) == {1}


def test_executions_delivered_while_postgres_is_unreachable_wait_for_it(
    outages: Outages,
) -> None:
    cluster = outages.cluster
    workers = [cluster.worker("w1", concurrency=8), cluster.worker("w2", concurrency=8)]
    engine = cluster.engine()
    with running_flower(cluster) as flower:
        flower.follow(engine)
        outages.postgres.cut()
        ids = start_runs_during_the_outage(engine, workers, "postgres", 3.0)
        outages.postgres.restore()
        wait_completed(engine, ids, 30)
        assert_no_failed_task(workers)
        assert claim_epochs(engine, ids) == [1] * RUNS
        assert set(waiting_warnings(workers, ids).values()) == {1}
        for run_id in ids:
            task = wait_until(lambda r=run_id: flower.finished_execution(r), 30, "Flower")
            assert task["state"] == "SUCCESS", task


def test_an_outage_longer_than_the_wait_hands_the_messages_back(outages: Outages) -> None:
    cluster = outages.cluster
    cluster.overrides["RUNWRIGHT_STORE_WAIT_SECONDS"] = "1"
    workers = [cluster.worker("w1", concurrency=8), cluster.worker("w2", concurrency=8)]
    engine = cluster.engine()
    with running_flower(cluster) as flower:
        flower.follow(engine)
        outages.postgres.cut()
        # Several waits of 1 s each hand their message back.
        ids = start_runs_during_the_outage(engine, workers, "long", 4.0)
        outages.postgres.restore()
        wait_completed(engine, ids, 30)
        assert_no_failed_task(workers)
        logs = "".join(w.log() for w in workers)
        handed_back = [r for r in ids if logs.count(f"received [run={r}]") > 1]
        assert handed_back, "no message was handed back and delivered again"
        # Celery's one WARNING line per hand-back, without a traceback.
        assert "Traceback" not in logs, logs[-3000:]
        for run_id in ids:
            wait_until(lambda r=run_id: flower.finished_execution(r), 30, "Flower")
            states = {t.get("state") for t in flower.executions(run_id)}
            assert "FAILURE" not in states, states
