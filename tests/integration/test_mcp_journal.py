"""A journaled MCP call is resolved from the journal and the kind recorded
with it, never from the server's listing of today (issue 48, item 3): a
worker dies after an MCP effect ran and before its outcome was written; the
recovered execution's listing no longer has the tool, or now makes it a
plain tool. Either way the effect is of unknown outcome, the run needs a
person, the model is told, and the server never gets the call again. A real
stdio server (tests/mcp_servers.py), real Postgres, the kit's crash points."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runner import Agent
from runner.core.mcp.sessions import close_all
from runner.testing import ScriptedModel, TestEngine, call, text, tools
from store.models import EffectStatus, RunStatus
from tests.helpers import unique
from tests.integration.test_mcp_tools import stdio_server
from tests.mcp_http import calls

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _closed_sessions() -> Iterator[None]:
    yield
    close_all()


# What today's declaration of the same server makes of the tool: gone from
# what the agent is offered, or a plain tool (as a server that now annotates
# it readOnlyHint does).
CHANGES: dict[str, dict[str, Any]] = {
    "gone": {"block": frozenset({"create_issue"})},
    "read_only": {"effects": {"create_issue": False}},
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_an_mcp_effect_that_ran_before_a_crash_stays_unknown_whatever_the_listing_says(
    runwright_engine: TestEngine, tmp_path: Path, change: str
) -> None:
    log = tmp_path / "calls.jsonl"
    name = unique("mcp-journal")
    model = ScriptedModel(
        name,
        [tools(call("tracker_create_issue", {"title": "Broken"}, id="c_issue")), text("done")],
    )
    agent = Agent(name=name, model=model.model, mcp=[stdio_server(log)])
    run = runwright_engine.start(agent)
    runwright_engine.crash(run.id, at="after_effect_call")  # the server ran it; no outcome written
    assert [c["tool"] for c in calls(log)] == ["create_issue"]

    agent.mcp = (dataclasses.replace(agent.mcp[0], **CHANGES[change]),)
    close_all()  # the worker that recovers it has a session of its own
    done = runwright_engine.take_over(run.id)

    assert done.status is RunStatus.COMPLETED, done.error
    assert [c["tool"] for c in calls(log)] == ["create_issue"]  # never again
    assert done.needs_attention
    (unknown,) = runwright_engine.engine.unknown_effects(run.id)
    assert unknown.status is EffectStatus.UNKNOWN and unknown.call_id == "c_issue"
    told = str(model.calls[-1].tool_results()[-1]["content"])
    assert "outcome unknown" in told and "unknown tool" not in told


def test_a_completed_mcp_effect_whose_tool_is_gone_gives_its_recorded_result(
    runwright_engine: TestEngine, tmp_path: Path
) -> None:
    log = tmp_path / "calls.jsonl"
    name = unique("mcp-journal-done")
    model = ScriptedModel(
        name,
        [tools(call("tracker_create_issue", {"title": "Broken"}, id="c_issue")), text("done")],
    )
    agent = Agent(name=name, model=model.model, mcp=[stdio_server(log)])
    run = runwright_engine.start(agent)
    # The effect's outcome is written; the step's commit is not.
    runwright_engine.crash(run.id, at="after_effect_complete")
    agent.mcp = (dataclasses.replace(agent.mcp[0], block=frozenset({"create_issue"})),)
    close_all()
    done = runwright_engine.take_over(run.id)
    assert done.status is RunStatus.COMPLETED and not done.needs_attention
    assert [c["tool"] for c in calls(log)] == ["create_issue"]
    told = str(model.calls[-1].tool_results()[-1]["content"])
    assert '"number": 7' in told


def test_a_server_tool_named_like_one_of_the_agents_own_is_left_out_and_the_run_goes_on(
    runwright_engine: TestEngine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from runner import tool

    @tool
    def tracker_lookup(q: str) -> str:
        """The agent's own lookup."""
        return f"own lookup of {q}"

    log = tmp_path / "calls.jsonl"
    name = unique("mcp-collide")
    model = ScriptedModel(
        name,
        lambda request: (
            tools(call("tracker_lookup", {"q": "A1"})) if request.step == 1 else text("ok")
        ),
    )
    agent = Agent(name=name, model=model.model, tools=[tracker_lookup], mcp=[stdio_server(log)])
    with caplog.at_level(logging.WARNING, logger="runner.core.steps.step_loop"):
        first = runwright_engine.run(agent)
        second = runwright_engine.run(agent)
    assert first.status is second.status is RunStatus.COMPLETED, (first.error, second.error)
    assert str(model.calls[1].tool_results()[-1]["content"]) == "own lookup of A1"
    assert calls(log) == []  # the server's lookup was never called
    offered = [t for t in model.calls[0].tool_names if t == "tracker_lookup"]
    assert offered == ["tracker_lookup"]  # offered once: the agent's own
    warned = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(warned) == 1 and "'tracker_lookup'" in warned[0]  # once for the listing
