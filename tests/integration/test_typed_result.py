"""``Run.output_as`` and ``Engine.result``: a completed run's structured output,
validated; one clear error otherwise."""

from __future__ import annotations

import pydantic
import pytest

from runner import Agent, Engine
from runner.core.errors import InvalidInput, InvalidTransition
from runner.core.retry import RetryPolicy
from runner.testing import ScriptedModel, call, text, tools
from tests.helpers import unique


class Verdict(pydantic.BaseModel):
    severity: int
    summary: str


class Other(pydantic.BaseModel):
    owner: str


def test_a_completed_runs_output_comes_back_typed(engine: Engine) -> None:
    name = unique("typed")
    model = ScriptedModel(
        name, [tools(call("final_result", {"severity": 2, "summary": "restart fixes it"}))]
    )
    Agent(name=name, model=model.model, output=Verdict)
    run = engine.start(name)
    done = engine.execute(run.id)
    assert done is not None
    verdict = engine.result(run.id, Verdict)
    assert verdict == Verdict(severity=2, summary="restart fixes it")
    assert done.output_as(Verdict) == verdict
    with pytest.raises(InvalidInput, match=f"the output of run {run.id} is not a Other"):
        engine.result(run.id, Other)


def test_a_run_without_a_result_says_why(engine: Engine) -> None:
    name = unique("untyped")
    model = ScriptedModel(name, [text("x", error="bad_request")])

    Agent(name=name, model=model.model, output=Verdict, retry=RetryPolicy(max_attempts=1))
    run = engine.start(name)
    with pytest.raises(InvalidTransition, match="is queued; only a completed run has a result"):
        engine.result(run.id, Verdict)
    engine.execute(run.id)
    with pytest.raises(InvalidTransition, match=r"is failed \(model_error: .*BadRequestError"):
        engine.result(run.id, Verdict)
