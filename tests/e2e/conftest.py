from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.core.settings import Settings
from store.local import LocalRedis, free_port
from tests.e2e.clirun import make_cli_env
from tests.e2e.cluster import Cluster
from tests.rabbitmq import RabbitNode, rabbitmq_missing
from tests.services import Services


def _make_cluster(
    services: Services, workdir: Path, broker_url: str | None = None
) -> tuple[Cluster, LocalRedis, str]:
    # Each cluster gets a Redis server of its own (leases in db 0, the broker in
    # db 1 unless another broker is given), so tests may restart it and never
    # touch the machine's shared one.
    redis_server = LocalRedis(workdir / "redis", free_port())
    redis_server.start()
    name = services.new_database()
    cluster = Cluster(
        database_url=services.database_url(name),
        redis_url=redis_server.url(0),
        broker_url=broker_url or redis_server.url(1),
        workdir=workdir,
    )
    return cluster, redis_server, name


@pytest.fixture
def cluster(services: Services, tmp_path: Path) -> Iterator[Cluster]:
    made, redis_server, name = _make_cluster(services, tmp_path)
    yield made
    made.stop()
    redis_server.kill()
    services.drop_database(name)


@pytest.fixture
def rabbitmq_node(tmp_path: Path) -> Iterator[RabbitNode]:
    """A RabbitMQ node of the test's own, which it may stop and start again."""
    missing = rabbitmq_missing()
    if missing is not None:
        pytest.skip(missing)
    node = RabbitNode(tmp_path / "rabbitmq")
    try:
        node.start()
        yield node
    finally:
        node.close()


@pytest.fixture
def own_rabbitmq_cluster(
    services: Services, tmp_path: Path, rabbitmq_node: RabbitNode
) -> Iterator[Cluster]:
    """A cluster whose broker is the test's own RabbitMQ node (leases on its own Redis)."""
    made, redis_server, name = _make_cluster(services, tmp_path, rabbitmq_node.url)
    yield made
    made.stop()
    redis_server.kill()
    services.drop_database(name)


@pytest.fixture(scope="module")
def shared_cluster(
    services: Services, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """Two workers and beat, shared by the tests of a module that do not break them."""
    made, redis_server, name = _make_cluster(services, tmp_path_factory.mktemp("cluster"))
    made.worker("w1")
    made.worker("w2")
    made.beat()
    yield made
    made.stop()
    redis_server.kill()
    services.drop_database(name)


@pytest.fixture
def cli_env(
    database_url: str, redis_url: str, tmp_path: Path, settings: Settings
) -> dict[str, str]:
    """The environment of a ``runwright`` command run against this test's services."""
    return make_cli_env(database_url, redis_url, tmp_path, settings)
