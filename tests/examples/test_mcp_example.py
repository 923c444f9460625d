"""The MCP example (examples/mcp_tracker.py), tested with the kit: the agent
searches the tracker (a plain tool), asks a person before opening an issue
(an effect), and the issue is opened once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from examples import mcp_tracker
from runner.core.mcp.sessions import close_all
from runner.testing import TestEngine
from store.models import EffectStatus, RunStatus


@pytest.fixture(autouse=True)
def _sessions() -> Iterator[None]:
    yield
    close_all()


def test_the_example_searches_then_opens_an_issue_once_a_person_agrees(
    runwright_engine: TestEngine,
) -> None:
    run = runwright_engine.run(mcp_tracker.AGENT)
    assert run.status is RunStatus.WAITING
    [pending] = runwright_engine.pending(run.id)
    assert pending.tool_name == "tracker_open_issue"
    done = runwright_engine.approve(run.id)
    assert done.status is RunStatus.COMPLETED
    assert done.output == "Opened an issue for the late parcel."
    [searched, opened] = runwright_engine.tool_calls(run.id)
    assert searched.name == "tracker_search"
    assert searched.output == {"result": []}  # nothing like it yet: no duplicate
    assert opened.name == "tracker_open_issue"
    [journaled] = runwright_engine.effects(run.id)
    assert (journaled.tool, journaled.status) == ("tracker_open_issue", EffectStatus.COMPLETED)
    assert journaled.output == {
        "number": 2,
        "title": "Parcel late",
        "body": "Reported by a customer.",
    }
