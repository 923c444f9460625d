"""A tool's failure is visible (issue 49, item 2): each failure is one WARNING
line naming the run, the agent, the tool and the exception's type and message
(its traceback at DEBUG), and the tool metrics count every call by what
became of it (``runwright_tool_calls_total{status}``: ok, error, denied,
timeout, cancelled, unknown). The engine on the test's database, its hooks
counted into a registry of the test's own."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from runner import Agent, Budget, Engine, effect, tool
from runner.core.model import warm_up
from runner.observe import metrics as m
from runner.testing import ScriptedModel, call, text, tools
from store.models import RunStatus
from store.postgres import PostgresStore
from tests.helpers import unique

CALLS = "runwright_tool_calls_total"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def engine(pg_store: PostgresStore, registry: CollectorRegistry) -> Iterator[Engine]:
    made = Engine(pg_store, observers=[m.MetricsObserver(m.Metrics(registry))], model_retries=0)
    yield made
    made.close()


def count(registry: CollectorRegistry, agent: str, tool: str, status: str) -> float:
    found = registry.get_sample_value(CALLS, {"agent": agent, "tool": tool, "status": status})
    return 0.0 if found is None else found


@tool
def parse_order(text: str) -> str:
    """Parse an order number."""
    raise ValueError(f"not an order number: {text!r}")


@tool
def fine(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def test_a_tool_that_raises_is_one_warning_line_and_counted_as_an_error(
    engine: Engine, registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    name = unique("failing")
    model = ScriptedModel(
        name,
        [
            tools(call("parse_order", {"text": "A-?"}, id="c1"), call("fine", {"q": "x"})),
            text("done"),
        ],
    )
    Agent(name=name, model=model.model, tools=[parse_order, fine])
    run = engine.start(name)
    with caplog.at_level(logging.DEBUG, logger="runner.core.steps.toolcalls"):
        engine.execute(run.id)
    done = engine.get_run(run.id)
    assert done.status is RunStatus.COMPLETED  # the model was told, and went on
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    line = warnings[0].getMessage()
    for part in (run.id, name, "parse_order", "ValueError", "not an order number: 'A-?'"):
        assert part in line, (part, line)
    traced = [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info]
    assert len(traced) == 1 and traced[0].exc_info is not None
    assert traced[0].exc_info[0] is ValueError
    assert count(registry, name, "parse_order", "error") == 1
    assert count(registry, name, "fine", "ok") == 1
    assert count(registry, name, "parse_order", "ok") == 0


def test_a_denied_call_is_counted_denied_and_never_timed(
    engine: Engine, registry: CollectorRegistry
) -> None:
    @effect
    def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    name = unique("denied")
    model = ScriptedModel(name, [tools(call("refund", {"order": "A1"})), text("ok")])
    Agent(name=name, model=model.model, tools=[refund], approvals={"refund": True})
    run = engine.start(name)
    engine.execute(run.id)
    [approval] = engine.approvals(run.id)
    engine.decide(approval.approval_id, False, reason="no", trusted=True)
    engine.execute(run.id)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    assert count(registry, name, "refund", "denied") == 1
    timed = registry.get_sample_value(
        "runwright_tool_call_duration_seconds_count",
        {"agent": name, "tool": "refund", "status": "denied"},
    )
    assert timed is None


def test_a_call_cut_off_by_the_execution_timeout_is_counted_timeout(
    engine: Engine, registry: CollectorRegistry
) -> None:
    @tool
    def stuck() -> str:
        """Never answers in time."""
        time.sleep(5)
        return "late"

    name = unique("timeout")
    model = ScriptedModel(name, [tools(call("stuck", {})), text("never")])
    Agent(name=name, model=model.model, tools=[stuck], budget=Budget(timeout_ms=300))
    # litellm imported and warm: in a fresh process its first call alone could
    # use up the 300 ms, and the timeout would cut the model call, not the tool.
    warm_up()
    run = engine.start(name)
    engine.execute(run.id)
    done = engine.get_run(run.id)
    assert done.error is not None and done.error.code == "timeout", done.error
    assert count(registry, name, "stuck", "timeout") == 1


def test_an_effect_of_unknown_outcome_is_counted_unknown(
    runwright_database_url: str, registry: CollectorRegistry
) -> None:
    from runner.testing import TestEngine

    @effect
    def pay(order: str) -> str:
        """Pay an order."""
        return "paid"

    name = unique("unknown")
    model = ScriptedModel(name, [tools(call("pay", {"order": "A1"})), text("ok")])
    agent = Agent(name=name, model=model.model, tools=[pay])
    observer = m.MetricsObserver(m.Metrics(registry))
    with TestEngine(runwright_database_url, observers=[observer]) as rw:
        run = rw.start(agent)
        rw.crash(run.id, at="after_effect_call")  # it ran; its outcome is not written
        assert rw.take_over(run.id).needs_attention
    assert count(registry, name, "pay", "unknown") == 1
    assert count(registry, name, "pay", "ok") == 0
