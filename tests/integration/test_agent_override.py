"""``Agent.override`` swaps what a test replaces: the model, the tools (a
fake in place of the one that charges a card) and the instructions, inside
its block; the agent keeps its name, its approval rules and the rest, and
its own are back when the block ends (docs/testing-your-agents.md)."""

from __future__ import annotations

import pytest

from runner import Agent, effect, tool
from runner.core.errors import InvalidInput
from runner.testing import ScriptedModel, TestEngine, call, text, tools
from store.models import RunStatus
from tests.helpers import unique


class Billing:
    """An agent whose ``refund`` effect needs a person, and what ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @effect
        def refund(order: str) -> str:
            """Refund an order through the payment provider."""
            self.ran.append(f"real {order}")
            return "refunded"

        @effect(name="refund")
        def fake_refund(order: str) -> str:
            """Refund an order (a fake)."""
            self.ran.append(f"fake {order}")
            return "refunded (fake)"

        self.fake = fake_refund
        self.agent = Agent(
            name=unique("billing"),
            model="openai/gpt-4o-mini",
            instructions="You refund orders.",
            tools=[refund],
            approvals={"refund": True},
        )

    def script(self) -> ScriptedModel:
        return ScriptedModel(
            unique("billing"), [tools(call("refund", {"order": "A1"})), text("Refunded.")]
        )


def test_an_override_runs_a_fake_tool_under_the_agents_own_rules(
    runwright_engine: TestEngine,
) -> None:
    billing = Billing()
    own_tools = billing.agent.tools
    with billing.agent.override(model=billing.script(), tools=[billing.fake]):
        run = runwright_engine.run(billing.agent)
        assert run.status is RunStatus.WAITING  # the agent's approval rule, by name
        run = runwright_engine.approve(run.id, "refund")
    assert run.status is RunStatus.COMPLETED
    assert billing.ran == ["fake A1"]
    assert runwright_engine.tool_calls(run.id)[0].output == "refunded (fake)"
    assert billing.agent.tools is own_tools and billing.agent.model == "openai/gpt-4o-mini"


def test_an_override_of_the_instructions_is_what_the_model_is_sent(
    runwright_engine: TestEngine,
) -> None:
    billing = Billing()
    model = ScriptedModel(unique("billing"), [text("Hello.")])
    with billing.agent.override(model=model, instructions="You answer in one word."):
        runwright_engine.run(billing.agent)
    assert model.calls[0].messages[0] == {"role": "system", "content": "You answer in one word."}
    assert billing.agent.instructions == "You refund orders."


def test_overrides_nest_and_end_with_their_block_even_when_it_raises() -> None:
    billing = Billing()
    model = billing.script()

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return order

    with pytest.raises(RuntimeError), billing.agent.override(model=model, tools=[billing.fake]):
        with billing.agent.override(instructions="Be brief.", tools=lambda ctx: [lookup]):
            assert billing.agent.instructions == "Be brief." and callable(billing.agent.tools)
            assert billing.agent.model == model.model
        assert billing.agent.tools == (billing.fake,)
        assert billing.agent.instructions == "You refund orders."
        raise RuntimeError("the test failed inside the block")
    assert billing.agent.model == "openai/gpt-4o-mini"
    assert [t.name for t in billing.agent.build_tools(None)] == ["refund"]  # type: ignore[arg-type]
    with billing.agent.override(tools=billing.fake):  # one tool, not in a list
        assert billing.agent.tools == (billing.fake,)
    assert billing.agent.tools != (billing.fake,)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, r"override\(\) takes a model, tools or instructions"),
        ({"tools": [len]}, r"override\(tools=...\) takes tools, and <built-in function len>"),
        ({"instructions": 3}, r"override\(instructions=...\) takes text"),
        ({"model": 42}, "takes a litellm model string or a ScriptedModel"),
    ],
)
def test_an_override_of_nothing_or_of_the_wrong_kind_is_refused(
    kwargs: dict[str, object], match: str
) -> None:
    billing = Billing()
    own = (billing.agent.model, billing.agent.tools, billing.agent.instructions)
    with pytest.raises(InvalidInput, match=match), billing.agent.override(**kwargs):  # type: ignore[arg-type]
        pass
    assert (billing.agent.model, billing.agent.tools, billing.agent.instructions) == own
