"""A strict testing kit (issue 49, item 4): a scripted model whose reply
calls a tool the agent does not have fails the test with one clear error
naming the tool and the agent's tools, where the run completed and a test
with a typo passed; ``strict=False`` keeps the old behaviour for tests of
exactly that; ``invocations()`` of a tool nobody has raises, where it
counted 0."""

from __future__ import annotations

import pytest

from runner import Agent, tool
from runner.core.errors import InvalidInput
from runner.testing import ScriptedModel, TestEngine, UnknownScriptedTool, call, text, tools
from store.models import RunStatus
from tests.helpers import unique


@tool
def lookup_order(order: str) -> str:
    """Look an order up."""
    return f"order {order}: shipped"


def test_a_script_that_calls_a_misspelled_tool_fails_the_test_naming_it(
    runwright_engine: TestEngine,
) -> None:
    name = unique("typo")
    model = ScriptedModel(
        name, [tools(call("lookup_ordr", {"order": "A1"})), text("shipped, it says")]
    )
    agent = Agent(name=name, model=model.model, tools=[lookup_order])
    with pytest.raises(UnknownScriptedTool) as raised:
        runwright_engine.run(agent)
    said = str(raised.value)
    assert "'lookup_ordr'" in said and "the agent's tools are: lookup_order" in said
    assert "strict=False" in said
    assert runwright_engine.invocations("lookup_order") == 0


def test_strict_false_serves_the_call_and_the_model_is_told(
    runwright_engine: TestEngine,
) -> None:
    name = unique("loose")
    model = ScriptedModel(
        name, [tools(call("lookup_ordr", {"order": "A1"})), text("sorry")], strict=False
    )
    done = runwright_engine.run(Agent(name=name, model=model.model, tools=[lookup_order]))
    assert done.status is RunStatus.COMPLETED
    told = str(model.calls[1].tool_results()[-1]["content"])
    assert "unknown tool 'lookup_ordr'" in told


def test_invocations_of_a_tool_nobody_has_raises(runwright_engine: TestEngine) -> None:
    name = unique("counted")
    model = ScriptedModel(name, [tools(call("lookup_order", {"order": "A1"})), text("ok")])
    agent = Agent(name=name, model=model.model, tools=[lookup_order])
    assert runwright_engine.invocations("lookup_order") == 0  # listed: known before a run
    runwright_engine.run(agent)
    assert runwright_engine.invocations("lookup_order") == 1
    with pytest.raises(InvalidInput, match="no tool named 'lookup_ordr'"):
        runwright_engine.invocations("lookup_ordr")


def test_a_tool_a_factory_makes_is_known_once_offered(runwright_engine: TestEngine) -> None:
    name = unique("factory")
    model = ScriptedModel(name, [text("nothing to do")])
    agent = Agent(name=name, model=model.model, tools=lambda ctx: [lookup_order])
    runwright_engine.run(agent)
    assert runwright_engine.invocations("lookup_order") == 0  # offered, never called
