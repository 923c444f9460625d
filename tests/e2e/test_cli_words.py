"""What ``runwright show`` prints, read as a person reads it (issue 49, item
6): each of a checkpoint's messages says what it is, an engine record of the
history included (no empty ``calls`` line); a call's arguments are JSON, or
their text when the model's were not JSON, never encoded twice; a cost has
one format, here and in the console (runner/core/costs.py ``money``). The runs
execute in this process; the commands run as subprocesses."""

from __future__ import annotations

from runner import Agent, Engine, effect, tool
from runner.core.costs import money
from runner.testing import ScriptedModel, call, text, tools
from store.models import RunStatus
from tests.e2e.clirun import rw
from tests.e2e.test_cli_terminal import assert_inert
from tests.helpers import unique


@tool
def look_up(q: str) -> str:
    """Look an order up."""
    return f"order {q}: shipped"


@effect
def give_back(order: str, amount: int) -> str:
    """Refund part of an order."""
    return f"refunded {amount} on {order}"


def test_show_messages_says_what_each_record_of_the_history_is(
    cli_env: dict[str, str], engine: Engine
) -> None:
    helper_name = unique("words-helper")
    helper = Agent(
        name=helper_name,
        model=ScriptedModel(helper_name, [text("noted")], price=(1e-6, 2e-6)).model,
    )
    name = unique("words")
    model = ScriptedModel(
        name,
        [
            tools(
                call("look_up", '{"q": "A1', id="c_bad"),  # the model's arguments: not JSON
                call(helper_name, {"task": "note it"}, id="c_child"),
            ),
            tools(call("give_back", {"order": "A1", "amount": 5}, id="c_refund")),
            tools(call("ask_human", {"question": "Tell the customer?"}, id="c_ask")),
            text("done"),
        ],
        price=(1e-6, 2e-6),
    )
    Agent(
        name=name,
        model=model.model,
        tools=[look_up, give_back, helper.as_tool()],
        approvals={"give_back": True},
        ask_human=True,
    )
    run = engine.start(name)
    engine.execute(run.id)  # waits for its child
    [child] = engine.children(run.id)
    engine.execute(child.id)
    engine.execute(run.id)  # waits for the refund's approval
    [approval] = engine.approvals(run.id)
    engine.decide(
        approval.approval_id, True, trusted=True, by="ada", arguments={"order": "A1", "amount": 3}
    )
    engine.execute(run.id)  # asks its question
    question = engine.get_run(run.id).waiting
    assert question is not None
    engine.answer(question.approval_id, "yes", trusted=True, by="cy")
    done = engine.execute(run.id)
    assert done is not None and done.status is RunStatus.COMPLETED, done

    shown = rw(cli_env, "show", run.id, "--messages").stdout
    assert_inert(shown)
    messages = shown.split("checkpoint at step")[1].splitlines()[1:]
    assert messages and all(line.split(maxsplit=1)[1:] for line in messages), messages
    assert not any(line.rstrip().endswith(" calls") for line in messages), messages
    said = "\n".join(messages)
    assert f"child_request     {helper_name} started a child run of {helper_name}" in said
    assert 'give_back({"order": "A1", "amount": 5}) waits for a person' in said
    assert 'approved with edited arguments {"order": "A1", "amount": 3}' in said
    assert "answered: yes (request " in said
    # The arguments the model sent, not JSON, shown as it sent them.
    assert 'tool  look_up({"q": "A1) -> error:' in shown
    assert '"{\\"q\\"' not in shown
    # One format for a cost: less than a hundredth of a cent is said so.
    run_cost = engine.get_run(run.id).cost_usd
    assert 0 < run_cost < 0.0001
    assert f"cost     {money(run_cost)}" in shown and money(run_cost) == "<$0.0001"
    listed = rw(cli_env, "runs").stdout
    assert "<$0.0001" in listed
