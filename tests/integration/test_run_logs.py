"""Log lines that name the run (issue 13): the context on every record of an
execution, one line per outcome, a WARNING for a takeover."""

from __future__ import annotations

import logging
import time

import pytest

from runner import Agent, Engine, tool
from runner.core.observe.logs import install
from runner.core.retry import RetryPolicy
from runner.testing import ScriptedModel, call, text, tools
from tests.helpers import try_claim, unique

RUNS = "runner.core.observe.logs"


@tool
def chatty(note: str) -> str:
    """Logs a line from a tool thread."""
    logging.getLogger("tests.chatty").info("tool says %s", note)
    return "ok"


def _records(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name]


@pytest.fixture(autouse=True)
def _run_context(caplog: pytest.LogCaptureFixture) -> None:
    """What a worker does to its handlers (runner/celery.py)."""
    install([caplog.handler], "text")


def test_every_record_of_an_execution_names_its_run(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    name = unique("logged")
    model = ScriptedModel(
        name, lambda r: tools(call("chatty", {"note": "hi"})) if r.step == 1 else text("done")
    )
    Agent(name=name, model=model.model, tools=[chatty])
    run = engine.start(name)
    caplog.set_level(logging.INFO)
    done = engine.execute(run.id)
    assert done is not None
    [tool_line] = _records(caplog, "tests.chatty")
    assert (tool_line.run_id, tool_line.agent, tool_line.step) == (run.id, name, 1)  # type: ignore[attr-defined]
    assert tool_line.epoch == 1 and tool_line.worker  # type: ignore[attr-defined]
    [outcome] = _records(caplog, RUNS)
    assert outcome.levelno == logging.INFO and outcome.run_id == run.id  # type: ignore[attr-defined]
    message = outcome.getMessage()
    assert f"run {run.id} ({name}) completed: 2 step(s), 30 tokens" in message
    assert message.endswith(" s")


def test_a_failed_run_writes_one_error_with_its_code(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    name = unique("failing")
    model = ScriptedModel(name, lambda r: text("x", error="bad_request"))
    Agent(name=name, model=model.model, retry=RetryPolicy(max_attempts=1))
    run = engine.start(name)
    caplog.set_level(logging.INFO)
    engine.execute(run.id)
    [outcome] = _records(caplog, RUNS)
    assert outcome.levelno == logging.ERROR
    assert "failed" in outcome.getMessage() and "model_error: " in outcome.getMessage()
    assert "BadRequestError" in outcome.getMessage()


def test_a_takeover_writes_one_warning_naming_both_epochs(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    name = unique("taken")
    model = ScriptedModel(name, lambda r: text("done"))
    Agent(name=name, model=model.model)
    run = engine.start(name)
    # An execution that claimed the run and died: its claim lapses.
    assert try_claim(engine.store, run.id, "ghost:1:dead", 0.05) is not None
    time.sleep(0.2)
    caplog.set_level(logging.INFO)
    done = engine.execute(run.id)
    assert done is not None and done.status.value == "completed"
    warnings = [r for r in _records(caplog, RUNS) if r.levelno == logging.WARNING]
    assert [w.getMessage() for w in warnings] == [
        f"run {run.id} taken over: epoch 2 replaces epoch 1, whose execution stopped"
    ]
