"""An MCP tool's calls in the console (issue 27): the run page's timeline
shows the calls of a real MCP server and their results, the event feed has
them, and the inbox shows the server's name, description and annotations
next to the arguments. The server is untrusted: every string it wrote (its
tool's description, annotations and results) is text on every page, never
markup."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from runner import Agent, Engine, RunStatus
from runner.core.mcp import MCPServer
from runner.core.mcp.sessions import close_all
from runner.testing import ScriptedModel, call, text, tools
from tests.console.conftest import BASE, execute_all, page_text, post, unique
from tests.mcp_http import calls
from tests.services import ROOT

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _closed_sessions() -> Iterator[None]:
    yield
    close_all()


def tracker(log: Path) -> MCPServer:
    return MCPServer.stdio(
        "tracker",
        sys.executable,
        args=["-m", "tests.mcp_servers"],
        cwd=str(ROOT),
        env={"RUNWRIGHT_TEST_MCP_LOG": str(log), "PYTHONPATH": str(ROOT)},
    )


def test_an_mcp_run_in_the_timeline_the_event_feed_and_the_inbox_is_text(
    client: FlaskClient, engine: Engine, queued: list[str], tmp_path: Path
) -> None:
    name = unique("mcp-console")
    model = ScriptedModel(
        name,
        [
            tools(call("tracker_lookup", {"q": "A7"}, id="call_lookup")),
            tools(call("tracker_markup", {"body": "<i>hi</i>"}, id="call_markup")),
            text("done"),
        ],
    )
    log = tmp_path / "calls.jsonl"
    Agent(name=name, model=model.model, mcp=[tracker(log)], approvals={"tracker_markup": True})
    run = engine.start(name, {"note": "x"})
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.WAITING

    inbox = page_text(client, f"{BASE}/approvals")
    assert "From MCP server <b>tracker</b>: " in inbox
    assert (
        "&lt;img src=x onerror=&quot;window.pwned = 1&quot;&gt; Posts a &lt;b&gt;comment" in inbox
    )
    assert "destructiveHint=true" in inbox
    assert "title=&quot;&lt;script&gt;window.pwned = 1&lt;/script&gt;&quot;" in inbox
    assert "&lt;i&gt;hi&lt;/i&gt;" in inbox  # the arguments
    assert "<img" not in inbox and inbox.count("<script") == 1  # the console's own

    [approval] = engine.approvals(run.id)
    answer = post(
        client,
        f"{BASE}/approvals/{approval.approval_id}",
        {"decision": "approve", "reason": "fine"},
        csrf_from=f"{BASE}/runs/{run.id}",
    )
    assert answer.status_code == 303
    execute_all(engine, queued)
    assert engine.get_run(run.id).status is RunStatus.COMPLETED
    assert [c["tool"] for c in calls(log)] == ["lookup", "markup"]

    page = page_text(client, f"{BASE}/runs/{run.id}")
    assert "calls tracker_lookup" in page and "calls tracker_markup" in page
    assert "order A7: shipped" in page  # the read-only tool's result
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt; posted &lt;i&gt;hi&lt;/i&gt;" in page
    assert "<img" not in page and page.count("<script") == 1

    # The event feed has each call and its result.
    events = list(engine.events(run.id, timeout=0, tokens=False))
    tool_steps = [e.data for e in events if e.type.value == "step" and e.data.get("kind") == "tool"]
    assert [s["name"] for s in tool_steps] == ["tracker_lookup", "tracker_markup"]
    assert "order A7: shipped" in str(tool_steps[0]["output"])
