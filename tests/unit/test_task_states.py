"""What the Celery tasks report, without a worker: a failed run fails its task
with an exception Celery can carry, every other outcome succeeds, a delivery
that could not claim its run is IGNORED with the reason, and a tick logs only
when it did something. With real workers and Flower: tests/e2e/test_flower.py
and tests/e2e/test_duplicate_delivery.py."""

from __future__ import annotations

import logging
import pickle
from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery
from celery.backends.base import BaseBackend
from celery.events.state import State
from celery.exceptions import Ignore

from runner.celery import (
    IGNORED,
    QuietIgnores,
    QuietTicks,
    RunFailed,
    execute_result,
    ignore,
    ignored_because,
    tick_result,
)
from runner.core.coordination.claims import NotClaimed, Refusal
from runner.core.engine.engine import TickReport
from store.models import RetryWait, Run, RunError, RunStatus, TriggerEnvelope, Usage

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)


def make_run(status: RunStatus, error: RunError | None = None, **fields: Any) -> Run:
    now = datetime.now(UTC)
    trigger: Any = TriggerEnvelope.model_construct()
    return Run("r1", "a", status, trigger, Usage(), now, now, error=error, **fields)


def test_run_failed_survives_pickle_and_json_result_backends() -> None:
    failed = RunFailed("model_error", "scripted/refused: AuthenticationError")
    assert str(failed) == "model_error: scripted/refused: AuthenticationError"
    assert failed.code == "model_error"
    assert failed.message == "scripted/refused: AuthenticationError"
    copies = [pickle.loads(pickle.dumps(failed))]
    backend = BaseBackend(Celery("outcomes", set_as_current=False), serializer="json")
    copies.append(backend.exception_to_python(backend.prepare_exception(failed, "json")))
    for copy in copies:
        assert type(copy) is RunFailed
        assert copy.args == failed.args == ("model_error", failed.message)
        assert str(copy) == str(failed)


@pytest.mark.parametrize("status", [s for s in RunStatus if s is not RunStatus.FAILED])
def test_every_other_outcome_is_a_success(status: RunStatus) -> None:
    assert execute_result(make_run(status)) == status.value


def test_an_execution_that_let_its_run_go_is_a_success() -> None:
    # It lost its claim, or its worker was draining: another execution goes on.
    assert execute_result(None) is None


DUPLICATE = "this delivery is a duplicate and was ignored"


@pytest.mark.parametrize(
    ("not_claimed", "why", "reason"),
    [
        (
            NotClaimed(make_run(RunStatus.RUNNING), "host-b:42:abc", 3),
            Refusal.HELD,
            f"run r1 is held by host-b:42:abc (epoch 3); {DUPLICATE}",
        ),
        (
            NotClaimed(make_run(RunStatus.QUEUED), "host-b:42:abc", 0),
            Refusal.HELD,
            f"run r1 is held by host-b:42:abc (its claim pending); {DUPLICATE}",
        ),
        (
            NotClaimed(make_run(RunStatus.COMPLETED)),
            Refusal.ENDED,
            f"run r1 is already completed; {DUPLICATE}",
        ),
        (
            NotClaimed(make_run(RunStatus.FAILED)),
            Refusal.ENDED,
            f"run r1 is already failed; {DUPLICATE}",
        ),
        (
            NotClaimed(make_run(RunStatus.CANCELLED)),
            Refusal.ENDED,
            f"run r1 is already cancelled; {DUPLICATE}",
        ),
        (
            NotClaimed(make_run(RunStatus.WAITING)),
            Refusal.NOT_CLAIMABLE,
            "run r1 is waiting and not claimable now; this delivery was ignored",
        ),
        (
            NotClaimed(make_run(RunStatus.QUEUED, retry=RetryWait(1, NOW, "503", at=NOW))),
            Refusal.NOT_CLAIMABLE,
            "run r1 is queued and not claimable now (its retry is due at "
            "2026-05-04T12:00:00+00:00); this delivery was ignored",
        ),
        (
            NotClaimed(make_run(RunStatus.QUEUED, concurrency_key="customer:7")),
            Refusal.NOT_CLAIMABLE,
            "run r1 is queued and not claimable now (it waits for its concurrency key); "
            "this delivery was ignored",
        ),
    ],
)
def test_a_delivery_that_could_not_claim_says_why(
    not_claimed: NotClaimed, why: Refusal, reason: str
) -> None:
    assert not_claimed.why is why
    assert ignored_because(not_claimed) == reason
    assert "customer:7" not in reason  # a key may be the project's data: never shown


class FakeTask:
    """What :func:`ignore` uses of a bound task: its send_event."""

    def __init__(self, fails: bool = False) -> None:
        self.fails = fails
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send_event(self, type_: str, **fields: Any) -> None:
        if self.fails:
            raise ConnectionError("the broker went away")
        self.sent.append((type_, fields))


def test_an_ignored_delivery_tells_flower_logs_one_line_and_raises_ignore(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="runner.celery")
    held = NotClaimed(make_run(RunStatus.RUNNING), "host-b:42:abc", 3)
    task = FakeTask()
    with pytest.raises(Ignore) as raised:
        ignore(task, held)  # type: ignore[arg-type]
    reason = ignored_because(held)
    assert str(raised.value) == reason
    assert task.sent == [("task-ignored", {"result": reason})]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [(logging.INFO, reason)]

    # The event is only for monitoring: a broker that refuses it leaves the
    # delivery ignored all the same, with a warning.
    caplog.clear()
    with pytest.raises(Ignore):
        ignore(FakeTask(fails=True), held)  # type: ignore[arg-type]
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.WARNING]


def test_flower_records_the_ignored_event_as_the_tasks_state_in_any_order() -> None:
    """Flower keeps Celery's ``events.State``: a ``task-ignored`` event makes the
    state IGNORED with the reason as the result, whether it comes after the
    worker's ``task-started`` or (sent on a connection of its own) before it."""
    reason = ignored_because(NotClaimed(make_run(RunStatus.COMPLETED)))

    def task(events: list[str]) -> Any:
        state = State()
        for clock, kind in enumerate(events, 1):
            fields: dict[str, Any] = {"result": reason} if kind == "ignored" else {}
            if kind == "received":
                fields = {"name": "runwright.execute", "args": "['r1']"}
            state.event(
                {
                    "type": f"task-{kind}",
                    "uuid": "t1",
                    "hostname": "w1@host",
                    "timestamp": 1000.0 + clock,
                    "local_received": 1000.0 + clock,
                    "clock": clock,
                    **fields,
                }
            )
        return state.tasks["t1"]

    for order in (["received", "started", "ignored"], ["received", "ignored", "started"]):
        found = task(order)
        assert found.state == IGNORED == "IGNORED", order
        assert found.result == reason
        assert found.name == "runwright.execute"


def test_a_failed_run_raises_its_error() -> None:
    with pytest.raises(RunFailed) as raised:
        execute_result(make_run(RunStatus.FAILED, RunError("budget_exceeded", "10 steps")))
    assert str(raised.value) == "budget_exceeded: 10 steps"
    with pytest.raises(RunFailed, match=r"^failed: the run failed$"):
        execute_result(make_run(RunStatus.FAILED))


def test_a_tick_logs_one_line_only_when_it_did_something(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="runner.celery")
    assert not any(tick_result(TickReport()).values())
    assert not any(tick_result(TickReport(skipped=True)).values())
    assert caplog.records == []
    busy = TickReport(expired=2, reenqueued=["r1"], key_heads=["r2", "r3"])
    assert tick_result(busy)["started"] == 2
    assert tick_result(TickReport(resumed=["a"]))["resumed"] == 1
    assert tick_result(TickReport(firings=3, fired=["r4"]))["fired"] == 1
    assert [r.getMessage() for r in caplog.records] == [
        "tick: expired 2, reenqueued 1, started 2",
        "tick: resumed 1",
        "tick: firings 3, fired 1",
    ]


def test_celerys_info_lines_about_ticks_are_dropped_and_nothing_else() -> None:
    quiet = QuietTicks()

    def record(level: int, name: str) -> logging.LogRecord:
        made = logging.LogRecord("celery.app.trace", level, __file__, 1, "Task", (), None)
        made.data = {"name": name, "id": "t1"}
        return made

    assert not quiet.filter(record(logging.INFO, "runwright.tick"))
    assert quiet.filter(record(logging.ERROR, "runwright.tick"))
    assert quiet.filter(record(logging.INFO, "runwright.execute"))
    assert quiet.filter(logging.LogRecord("celery", logging.INFO, __file__, 1, "x", (), None))


def test_celerys_line_about_an_ignored_execution_is_dropped_and_nothing_else() -> None:
    quiet = QuietIgnores()

    def record(name: str, description: str) -> logging.LogRecord:
        made = logging.LogRecord("celery.app.trace", logging.INFO, __file__, 1, "Task", (), None)
        made.data = {"name": name, "id": "t1", "description": description}
        return made

    assert not quiet.filter(record("runwright.execute", "ignored"))
    assert quiet.filter(record("runwright.execute", "raised expected"))
    assert quiet.filter(record("proj.add", "ignored"))  # the project's own tasks keep theirs
    assert quiet.filter(logging.LogRecord("celery", logging.INFO, __file__, 1, "x", (), None))
