"""A notifier's own log lines name the run, as a tool's do (issue 26): on the
first send, from the execution, and on tick()'s re-sends; a sync notifier
(on the tool executor's threads) and an async one (on the event loop)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from runner import Agent, ApprovalRequest, Engine, effect
from runner.core.coordination.leases import Leases
from runner.core.observe.logs import install
from runner.core.settings import Settings
from runner.testing import Request, ScriptedModel, call, text, tools
from store.models import RunStatus, utcnow
from store.postgres import PostgresStore
from tests.helpers import unique

NOTIFIER = "tests.notifier"


@effect
def refund(amount: int, idempotency_key: str) -> dict[str, Any]:
    """Refund money."""
    return {"refunded": amount}


def script(request: Request) -> Any:
    if request.step == 1:
        return tools(call("refund", {"amount": 30}))
    return text("done")


class SyncNotifier:
    """Logs each attempt and refuses the first, so that tick() sends it again."""

    def __init__(self) -> None:
        self.threads: list[str] = []

    def __call__(self, request: ApprovalRequest) -> None:
        self.threads.append(threading.current_thread().name)
        logging.getLogger(NOTIFIER).info("notifying about %s", request.approval_id)
        if len(self.threads) == 1:
            raise ConnectionError("notification service is down")


class AsyncNotifier:
    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, request: ApprovalRequest) -> None:
        self.calls += 1
        logging.getLogger(NOTIFIER).info("notifying about %s", request.approval_id)
        if self.calls == 1:
            raise ConnectionError("notification service is down")


@pytest.fixture(autouse=True)
def _run_context(caplog: pytest.LogCaptureFixture) -> None:
    """What a worker does to its handlers (runner/celery.py)."""
    install([caplog.handler], "text")


@pytest.fixture
def engine(pg_store: PostgresStore, leases: Leases, settings: Settings) -> Iterator[Engine]:
    made = Engine(pg_store, leases=leases, settings=settings, enqueue=lambda run_id: None)
    yield made
    made.close()


def notifier_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == NOTIFIER]


@pytest.mark.parametrize("kind", [SyncNotifier, AsyncNotifier])
def test_a_notifiers_lines_carry_the_run_on_the_first_send_and_on_ticks_resend(
    engine: Engine, caplog: pytest.LogCaptureFixture, kind: type[Any]
) -> None:
    name = unique("notifying")
    notifier = kind()
    model = ScriptedModel(name, script)
    Agent(
        name=name,
        model=model.model,
        tools=[refund],
        approvals={"refund": True},
        notifier=notifier,
    )
    run = engine.start(name)
    caplog.set_level(logging.INFO)
    waiting = engine.execute(run.id)  # the first send, refused
    assert waiting is not None and waiting.status is RunStatus.WAITING
    [first] = notifier_lines(caplog)
    assert (first.run_id, first.agent, first.step) == (run.id, name, 1)  # type: ignore[attr-defined]
    assert first.epoch == 1 and first.worker  # type: ignore[attr-defined]

    report = engine.tick(now=utcnow() + timedelta(seconds=60))  # past the backoff
    assert report.notified == 1
    [_, resent] = notifier_lines(caplog)
    assert (resent.run_id, resent.agent, resent.step) == (run.id, name, 1)  # type: ignore[attr-defined]
    if isinstance(notifier, SyncNotifier):
        # Both on the executor's threads, not the caller's.
        assert threading.current_thread().name not in notifier.threads
