"""What the Celery tasks report, without a worker: a failed run fails its task
with an exception Celery can carry, every other outcome succeeds, and a tick
logs only when it did something. With real workers and Flower:
tests/e2e/test_flower.py."""

from __future__ import annotations

import logging
import pickle
from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery
from celery.backends.base import BaseBackend

from runner.celery import QuietTicks, RunFailed, execute_result, tick_result
from runner.engine.engine import TickReport
from store.models import Run, RunError, RunStatus, TriggerEnvelope, Usage


def make_run(status: RunStatus, error: RunError | None = None) -> Run:
    now = datetime.now(UTC)
    trigger: Any = TriggerEnvelope.model_construct()
    return Run("r1", "a", status, trigger, Usage(), now, now, error=error)


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


def test_a_run_no_one_could_claim_is_a_success() -> None:
    assert execute_result(None) is None


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
    assert [r.getMessage() for r in caplog.records] == ["tick: expired 2, reenqueued 1, started 2"]


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
