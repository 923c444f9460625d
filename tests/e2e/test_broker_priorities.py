"""A run's priority on the broker (RUNWRIGHT_BROKER_PRIORITIES,
docs/flow-control.md): with the preset's options, Redis (kombu's priority
steps) and RabbitMQ (a queue with x-max-priority) hand out the messages of
higher-priority runs first, whatever order they were sent in."""

from __future__ import annotations

import socket
import uuid
from typing import Any
from urllib.parse import urlparse

import pytest
from kombu import Connection, Exchange, Queue

from runner import celery as runner_celery
from runner.celery import MAX_BROKER_PRIORITY, broker_priority, broker_priority_options
from tests.e2e.test_rabbitmq import RABBITMQ_URL

SENT = [("low", 0), ("urgent", 9), ("middle", 5), ("also-low", 0), ("high", 7)]
EXPECTED = ["urgent", "high", "middle", "low", "also-low"]


def _reachable(url: str) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 5672), 1):
            return True
    except OSError:
        return False


def _round_trip(url: str, queue: Queue, **connection: Any) -> list[str]:
    """Send SENT in order, each with its run's priority as the broker counts
    it, then read the queue: the run names in the order the broker gave them."""
    got: list[str] = []
    with Connection(url, **connection) as conn:
        bound = queue(conn.default_channel)
        bound.declare()
        try:
            with conn.Producer() as producer:
                for name, priority in SENT:
                    producer.publish(
                        {"run": name},
                        exchange=queue.exchange,
                        routing_key=queue.routing_key,
                        priority=broker_priority(priority, url),
                        declare=[queue],
                    )
            for _ in SENT:
                message = bound.get(no_ack=True)
                assert message is not None
                got.append(message.payload["run"])
        finally:
            bound.delete()
    return got


def test_redis_hands_out_higher_priority_runs_first(redis_url: str) -> None:
    name = f"prio-{uuid.uuid4().hex[:8]}"
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name)
    got = _round_trip(redis_url, queue, transport_options=broker_priority_options())
    assert got == EXPECTED


@pytest.mark.skipif(not _reachable(RABBITMQ_URL), reason=f"no RabbitMQ at {RABBITMQ_URL}")
def test_rabbitmq_hands_out_higher_priority_runs_first() -> None:
    name = f"prio-{uuid.uuid4().hex[:8]}"
    queue = Queue(
        name,
        Exchange(name, type="direct"),
        routing_key=name,
        queue_arguments={"x-max-priority": MAX_BROKER_PRIORITY},
    )
    assert _round_trip(RABBITMQ_URL, queue) == EXPECTED


def test_enqueue_sends_the_run_s_priority_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []

    class Task:
        class app:
            class conf:
                broker_url = "redis://127.0.0.1:6379/0"

        @staticmethod
        def apply_async(**options: Any) -> None:
            sent.append(options)

    monkeypatch.setattr(runner_celery, "_execute_task", Task)
    monkeypatch.setattr(runner_celery, "_broker_priorities", False)
    runner_celery.enqueue("r1", priority=7)
    monkeypatch.setattr(runner_celery, "_broker_priorities", True)
    runner_celery.enqueue("r2", priority=7)
    runner_celery.enqueue("r3")
    assert sent == [
        {"args": ["r1"], "eta": None},
        {"args": ["r2"], "eta": None, "priority": 2},  # Redis counts the other way
        {"args": ["r3"], "eta": None, "priority": 9},  # priority 0: the last step
    ]
