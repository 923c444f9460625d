"""A run whose message the broker refused is sent by the next tick(), not
RUNWRIGHT_REENQUEUE_SECONDS later: a run started during a broker outage starts
as soon as the broker and a tick are back."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runner import Engine
from runner.core.coordination.leases import Leases
from runner.core.settings import Settings
from store.models import RunStatus
from store.postgres import PostgresStore


class Broker:
    def __init__(self) -> None:
        self.up = False
        self.sent: list[str] = []

    def enqueue(self, run_id: str) -> None:
        if not self.up:
            raise ConnectionRefusedError(111, "Connection refused")
        self.sent.append(run_id)


@pytest.fixture
def broker() -> Broker:
    return Broker()


@pytest.fixture
def engine(
    pg_store: PostgresStore, leases: Leases, settings: Settings, broker: Broker
) -> Iterator[Engine]:
    import tests.agents  # noqa: F401  (registers the shared agents)

    made = Engine(pg_store, leases=leases, settings=settings, enqueue=broker.enqueue)
    yield made
    made.close()


def test_a_run_started_while_the_broker_is_down_is_sent_by_the_next_tick(
    engine: Engine, broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    assert engine.settings.reenqueue_seconds == 30
    run = engine.start("five", {"n": 1})
    assert "could not enqueue run" in caplog.text
    # The broker is still down: the tick's send fails too, and stays marked.
    assert engine.tick().reenqueued == [run.id]
    assert broker.sent == []
    broker.up = True
    assert engine.tick().reenqueued == [run.id]
    assert broker.sent == [run.id]
    # Sent: the next tick leaves it to the re-enqueue window.
    assert engine.tick().reenqueued == []
    assert engine.get_run(run.id).status is RunStatus.QUEUED


def test_a_sent_run_waits_for_the_reenqueue_window(engine: Engine, broker: Broker) -> None:
    broker.up = True
    run = engine.start("five", {"n": 2})
    assert broker.sent == [run.id]
    assert engine.tick().reenqueued == []
