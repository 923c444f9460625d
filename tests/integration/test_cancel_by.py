"""Who cancelled a run is recorded (issue 26, item 5): ``cancel(..., by=)``
keeps the first to ask, bad names are refused and change nothing."""

from __future__ import annotations

import uuid

import pytest

from runner import Agent, tool
from runner.core.errors import InvalidInput
from runner.testing import ScriptedModel, TestEngine, call, text, tools
from store.models import RunStatus


@tool
def lookup() -> str:
    """Look something up."""
    return "found"


def agent() -> Agent:
    name = f"cancel-by-{uuid.uuid4().hex[:8]}"
    model = ScriptedModel(name, [tools(call("lookup", {})), text("done")])
    return Agent(name=name, model=model.model, tools=[lookup], approvals={"lookup": True})


def test_a_cancel_records_who_asked_first(runwright_engine: TestEngine) -> None:
    engine = runwright_engine.engine
    queued = runwright_engine.start(agent())
    result = engine.cancel(queued.id, by="ana")
    assert result.run.status is RunStatus.CANCELLED and result.run.cancelled_by == "ana"
    engine.cancel(queued.id, by="bo")  # already settled: nothing changes
    assert engine.get_run(queued.id).cancelled_by == "ana"

    waiting = runwright_engine.run(agent())
    assert waiting.status is RunStatus.WAITING
    engine.cancel(waiting.id, by="cy")
    assert engine.get_run(waiting.id).cancelled_by == "cy"

    unnamed = runwright_engine.start(agent())
    assert engine.cancel(unnamed.id).run.cancelled_by is None


@pytest.mark.parametrize("by", ["", "   ", "x" * 201])
def test_a_bad_name_is_refused_and_changes_nothing(runwright_engine: TestEngine, by: str) -> None:
    run = runwright_engine.start(agent())
    with pytest.raises(InvalidInput, match=r"who did it \(by\)"):
        runwright_engine.engine.cancel(run.id, by=by)
    after = runwright_engine.get_run(run.id)
    assert after.status is RunStatus.QUEUED and after.cancelled_by is None
