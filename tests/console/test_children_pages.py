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


def test_a_run_page_lists_its_children_and_a_childs_page_links_its_parent(
    client: FlaskClient, engine: Engine, queued: list[str]
) -> None:
    child_name = unique("helper")
    child_model = ScriptedModel(child_name, [text("<i>helped</i>")])
    child = Agent(name=child_name, model=child_model.model)
    lead_name = unique("lead")
    lead_model = ScriptedModel(
        lead_name, [tools(call(child.name, {"task": "help"}, id="c_help")), text("done")]
    )
    Agent(name=lead_name, model=lead_model.model, tools=[child.as_tool()])
    run = engine.start(lead_name)
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    [kid] = engine.children(run.id)

    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert '<table class="children" id="children">' in page
    assert f'<a href="{BASE}/runs/{kid.id}">{kid.id}</a>' in page
    assert "c_help" in page and "10 in, 5 out" in page
    assert "<i>helped" not in page  # the child's text, where it shows, is text
    kid_page = page_text(client, f"{BASE}/runs/{kid.id}")
    assert f'<a href="{BASE}/runs/{run.id}">{run.id}</a>, its call c_help' in kid_page
