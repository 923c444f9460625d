"""Budgets hold when the provider reports no usage (issue 7).

Many self-hosted OpenAI-compatible servers answer without ``usage``. The model
adapter then counts the tokens with litellm's own counter, records that the
figures are estimates (on the llm step and on the run), and logs once per
model that usage was missing; ``Budget(max_tokens=...)`` and
``Budget(max_cost_usd=...)`` hold on the estimate. Shown on the real litellm
path: an OpenAI-compatible server on loopback that sends no usage (unstreamed,
and streams that end with no usage event), and scripted models that report none.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from runner import Agent, Budget, Engine
from runner.testing import Reply, Request, ScriptedModel, call, text, tools
from store.models import Run, RunStatus, Step, StepKind
from tests.helpers import unique
from tests.provider import Provider, answer, tool_calls

# Four model steps if nothing stops the run: three lookups, then the answer.
STEPS = 4
# Every step's prompt holds the instructions, the trigger, the tool's schema and
# the history so far: well over 60 tokens each, so two steps pass 120.
MAX_TOKENS = 120
MISSING = "reported no token usage"


def script(step: int, body: dict[str, Any]) -> dict[str, Any]:
    if step < STEPS:
        return tool_calls((f"call_{step}", "lookup", {"q": f"incident {step}"}))
    return answer("the incident was a full disk")


def scripted(request: Request) -> Reply:
    if request.step < STEPS:
        return tools(call("lookup", {"q": f"incident {request.step}"}), usage=None)
    return text("the incident was a full disk", usage=None)


@pytest.fixture
def provider() -> Iterator[Provider]:
    with Provider(script) as server:
        yield server


def _http_agent(server: Provider, *, stream: bool = False, budget: Budget | None = None) -> str:
    from tests.agents import lookup

    name = unique("no-usage")
    Agent(
        name=name,
        # A model name of this test's own: the warning is once per model per process.
        model=f"openai/{name}",
        model_settings={"api_base": server.base_url, "api_key": "sk-loopback"},
        instructions="Find out what caused the incident.",
        tools=[lookup],
        budget=budget or Budget(max_tokens=MAX_TOKENS),
        stream=stream,
    )
    return name


def _llm_steps(engine: Engine, run: Run) -> list[Step]:
    return [s for s in engine.steps(run.id) if s.kind is StepKind.LLM]


def _stopped_on_tokens(engine: Engine, run: Run | None) -> Run:
    assert run is not None and run.status is RunStatus.FAILED, run
    assert run.error is not None and run.error.code == "budget_exceeded", run.error
    assert "tokens" in run.error.message and f"budget is {MAX_TOKENS}" in run.error.message
    assert run.usage.total >= MAX_TOKENS
    assert run.usage.input_tokens > 0 and run.usage.output_tokens > 0
    assert run.usage.estimated
    stored = engine.get_run(run.id)
    assert stored.usage == run.usage and stored.usage.estimated
    steps = _llm_steps(engine, run)
    assert 1 <= len(steps) < STEPS  # stopped before the answer
    for step in steps:
        assert step.usage is not None and step.usage.estimated
        assert step.usage.input_tokens > 0 and step.usage.output_tokens > 0
        # The step's JSON output says so too (what `runwright show`, the
        # event feed and the console read).
        assert step.output["usage_estimated"] is True
    assert sum(s.usage.total for s in steps if s.usage) == run.usage.total
    return stored


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
def test_a_provider_without_usage_is_held_to_max_tokens(
    engine: Engine, provider: Provider, stream: bool
) -> None:
    """The loopback server sends no usage (a stream: no usage event at its end).
    Before, the run recorded 0 tokens and completed; now it stops
    ``budget_exceeded`` on the estimate."""
    provider.usage = None
    name = _http_agent(provider, stream=stream)
    run = engine.start(name)
    _stopped_on_tokens(engine, engine.execute(run.id))
    assert len(provider.answered()) < STEPS
    if stream:
        assert all(r.body.get("stream") for r in provider.requests)


def test_the_estimate_is_litellms_count_of_the_request_and_the_reply(
    engine: Engine, provider: Provider
) -> None:
    """The same one-step conversation with usage and without: reported figures
    are taken as they are; missing ones are estimated, in the range a
    tokenizer gives for that request and reply."""
    provider.script = lambda step, body: answer("the incident was a full disk")
    provider.usage = {"prompt_tokens": 77, "completion_tokens": 9, "total_tokens": 86}
    reported = engine.execute(engine.start(_http_agent(provider, budget=Budget())).id)
    assert reported is not None and reported.status is RunStatus.COMPLETED
    assert (reported.usage.input_tokens, reported.usage.output_tokens) == (77, 9)
    assert not reported.usage.estimated
    (step,) = _llm_steps(engine, reported)
    assert step.usage is not None and not step.usage.estimated
    assert "usage_estimated" not in step.output

    provider.usage = None
    estimated = engine.execute(engine.start(_http_agent(provider, budget=Budget())).id)
    assert estimated is not None and estimated.status is RunStatus.COMPLETED
    assert estimated.usage.estimated
    # Instructions, trigger and the tool's schema: tens of tokens; the reply: a few.
    assert 40 <= estimated.usage.input_tokens <= 400
    assert 3 <= estimated.usage.output_tokens <= 40


def test_zero_usage_counts_as_none(engine: Engine, provider: Provider) -> None:
    """A server that sends a usage block of zeros (a placeholder) has not
    counted anything: the tokens are estimated as if it sent none."""
    provider.usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    _stopped_on_tokens(engine, engine.execute(engine.start(_http_agent(provider)).id))


def test_the_missing_usage_is_logged_once_per_model(
    engine: Engine, provider: Provider, caplog: pytest.LogCaptureFixture
) -> None:
    provider.usage = None
    caplog.set_level(logging.WARNING, logger="runner.core.model")
    first = _http_agent(provider, budget=Budget())
    for _ in range(3):  # three runs, one or more steps each: one line
        done = engine.execute(engine.start(first).id)
        assert done is not None and done.usage.estimated
    second = _http_agent(provider, budget=Budget())
    done = engine.execute(engine.start(second).id)
    assert done is not None and done.usage.estimated
    lines = [
        r for r in caplog.records if r.name == "runner.core.model" and MISSING in r.getMessage()
    ]
    assert [r.levelno for r in lines] == [logging.WARNING, logging.WARNING]
    assert f"openai/{first}" in lines[0].getMessage()
    assert f"openai/{second}" in lines[1].getMessage()
    assert "estimate" in lines[0].getMessage()


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
def test_a_scripted_model_without_usage_is_held_to_max_tokens(engine: Engine, stream: bool) -> None:
    """The same through litellm's custom-provider path (the scripted model),
    whose final stream chunk carries no usage."""
    from tests.agents import lookup

    name = unique("scripted-no-usage")
    model = ScriptedModel(name, scripted)
    Agent(
        name=name,
        model=model.model,
        instructions="Find out what caused the incident.",
        tools=[lookup],
        budget=Budget(max_tokens=MAX_TOKENS),
        stream=stream,
    )
    _stopped_on_tokens(engine, engine.execute(engine.start(name).id))
    assert model.call_count < STEPS


def test_max_cost_holds_on_the_estimate(engine: Engine) -> None:
    """A priced model that reports no usage is charged for the estimate, so
    ``max_cost_usd`` holds too."""
    from tests.agents import lookup

    name = unique("priced-no-usage")
    model = ScriptedModel(name, scripted, price=(0.001, 0.002))
    Agent(
        name=name,
        model=model.model,
        instructions="Find out what caused the incident.",
        tools=[lookup],
        budget=Budget(max_cost_usd=0.1),
    )
    run = engine.execute(engine.start(name).id)
    assert run is not None and run.status is RunStatus.FAILED
    assert run.error is not None and run.error.code == "budget_exceeded"
    assert "cost" in run.error.message
    assert run.usage.estimated and run.cost_usd >= 0.1
    steps = _llm_steps(engine, run)
    assert steps and all(s.cost_usd and s.usage and s.usage.estimated for s in steps)
    assert model.call_count < STEPS
