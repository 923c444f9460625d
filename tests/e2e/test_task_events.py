"""Celery's task events from a real worker: sent while a monitor asks for
them, as Flower does, or always with ``RUNWRIGHT_TASK_EVENTS=true``; with
neither, none, and the broker is spared three messages a run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery

from runner import Engine
from store.models import RunStatus
from tests.e2e.cluster import Cluster, wait_until

TASK_EVENTS = {"task-received", "task-started", "task-succeeded"}


class Listener:
    """Every event the cluster's workers send, as a monitor receives them."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._receiver: Any = None

    def _keep(self, event: dict[str, Any]) -> None:
        with self._lock:
            self.events.append(event)

    def listen(self) -> None:
        with self.app.connection_for_read() as conn:
            self._receiver = self.app.events.Receiver(conn, handlers={"*": self._keep})
            self._receiver.capture(limit=None, timeout=None, wakeup=False)

    def stop(self) -> None:
        if self._receiver is not None:
            self._receiver.should_stop = True

    def of_run(self, run_id: str) -> set[str]:
        """The task events of the executions of ``run_id``: its task-received
        event names the run, the others only the task's id."""
        with self._lock:
            ids = {
                e["uuid"]
                for e in self.events
                if e["type"] == "task-received" and run_id in str(e.get("args"))
            }
            return {e["type"] for e in self.events if e.get("uuid") in ids}

    def task_events(self) -> list[str]:
        """Every task event heard, of any task."""
        with self._lock:
            return [e["type"] for e in self.events if e["type"].startswith("task-")]

    def heartbeats(self) -> int:
        with self._lock:
            return sum(e["type"] == "worker-heartbeat" for e in self.events)


@pytest.fixture
def monitor(cluster: Cluster) -> Iterator[tuple[Celery, Listener]]:
    app = Celery("runwright-test-monitor", broker=cluster.broker_url)
    listener = Listener(app)
    thread = threading.Thread(target=listener.listen, daemon=True)
    thread.start()
    yield app, listener
    listener.stop()
    thread.join(timeout=10)
    app.close()


def _completed(engine: Engine, payload: dict[str, Any]) -> str:
    run = engine.start("steady", {"steps": 1, "latency": 0.0, **payload})
    wait_until(
        lambda: engine.get_run(run.id).status is RunStatus.COMPLETED, 60, "the run to complete"
    )
    return run.id


def test_a_worker_sends_task_events_while_a_monitor_asks_for_them(
    cluster: Cluster, monitor: tuple[Celery, Listener]
) -> None:
    app, listener = monitor
    cluster.worker("quiet")
    engine = cluster.engine()
    # The listener hears the worker: its heartbeats come every two seconds.
    wait_until(lambda: listener.heartbeats() >= 1, 30, "a worker-heartbeat event")
    unasked = _completed(engine, {"n": 1})
    heard = listener.heartbeats()
    wait_until(lambda: listener.heartbeats() > heard, 30, "a later worker-heartbeat event")
    # The run completed, and no task event said so, of it or of any task.
    assert listener.of_run(unasked) == set()
    assert listener.task_events() == []

    # What Flower does every few seconds (its --enable_events).
    replies = app.control.enable_events(reply=True, timeout=5)
    assert replies and all("ok" in next(iter(r.values())) for r in replies), replies
    asked = _completed(engine, {"n": 2})
    wait_until(lambda: listener.of_run(asked) >= TASK_EVENTS, 30, "the run's task events")


def test_runwright_task_events_sends_them_with_no_monitor_asking(
    cluster: Cluster, monitor: tuple[Celery, Listener]
) -> None:
    _, listener = monitor
    cluster.worker("loud", RUNWRIGHT_TASK_EVENTS="true")
    engine = cluster.engine()
    wait_until(lambda: listener.heartbeats() >= 1, 30, "a worker-heartbeat event")
    run_id = _completed(engine, {"n": 3})
    wait_until(lambda: listener.of_run(run_id) >= TASK_EVENTS, 30, "the run's task events")
