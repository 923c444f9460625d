"""A child run's approval in the console's inbox names the runs it works for,
each linked (issue 28: approvals surface with their parent chain)."""

from __future__ import annotations

from flask.testing import FlaskClient

from runner import Agent, Engine, RunStatus, effect
from runner.testing import ScriptedModel, call, text, tools
from tests.console.conftest import BASE, execute_all, page_text, unique


def test_a_childs_approval_names_its_parent_in_the_inbox(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    @effect
    def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    child_name = unique("refunder")
    child_model = ScriptedModel(
        child_name, [tools(call("refund", {"order": "A1"})), text("refunded")]
    )
    child = Agent(
        name=child_name, model=child_model.model, tools=[refund], approvals={"refund": True}
    )
    lead_name = unique("lead<b>")
    lead_model = ScriptedModel(
        lead_name, [tools(call(child.name, {"task": "refund A1"})), text("done")]
    )
    Agent(name=lead_name, model=lead_model.model, tools=[child.as_tool()])
    run = engine.start(lead_name)
    execute_all(engine, queued)
    [child_run] = engine.children(run.id)
    assert engine.get_run(child_run.id).status is RunStatus.WAITING

    page = page_text(client, f"{BASE}/approvals")
    assert "Asked for the lead&lt;b&gt;-" in page
    assert f'<a href="{BASE}/runs/{run.id}">{run.id}</a>' in page
    assert "<b>-" not in page  # the agent's name is text
