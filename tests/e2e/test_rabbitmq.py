"""RabbitMQ works as the broker, too (leases and pub/sub stay on Redis)."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from kombu import Connection

from store.local import LocalRedis, free_port
from store.models import RunStatus, StepKind
from tests.e2e.cluster import Cluster, wait_until
from tests.services import Services

RABBITMQ_URL = os.environ.get("RUNWRIGHT_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 5672), 1):
            return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(
    not _reachable(RABBITMQ_URL), reason=f"no RabbitMQ at {RABBITMQ_URL} (CI provides one)"
)


@pytest.fixture
def rabbit_cluster(services: Services, tmp_path: Path) -> Iterator[Cluster]:
    redis_server = LocalRedis(tmp_path / "redis", free_port())
    redis_server.start()
    name = services.new_database()
    queue = f"runwright-test-{uuid.uuid4().hex[:8]}"
    made = Cluster(
        database_url=services.database_url(name),
        redis_url=redis_server.url(0),
        broker_url=RABBITMQ_URL,
        workdir=tmp_path,
        queue=queue,
    )
    yield made
    made.stop()
    redis_server.kill()
    services.drop_database(name)
    with Connection(RABBITMQ_URL) as conn:
        conn.default_channel.queue_delete(queue)


def test_runs_complete_with_rabbitmq_as_broker(rabbit_cluster: Cluster) -> None:
    rabbit_cluster.worker("rabbit")
    rabbit_cluster.beat()
    engine = rabbit_cluster.engine()
    runs = [engine.start("fleet", {"amount": 5, "n": i}) for i in range(5)]
    wait_until(
        lambda: all(engine.get_run(r.id).status is RunStatus.COMPLETED for r in runs),
        90,
        "runs over RabbitMQ",
        0.1,
    )
    for run in runs:
        llm = [s.index for s in engine.steps(run.id) if s.kind is StepKind.LLM]
        assert llm == [1, 2, 3, 4, 5]
    hang = engine.start("hang")
    wait_until(lambda: engine.get_run(hang.id).status is RunStatus.RUNNING, 30, "hang to run")
    engine.cancel(hang.id)
    wait_until(lambda: engine.get_run(hang.id).status is RunStatus.CANCELLED, 5, "cancel")
