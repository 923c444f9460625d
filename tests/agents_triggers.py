"""Agents that schedules and webhooks start, for the tests that run them on
real workers (issue 30): one that answers at once, one that takes its time."""

from __future__ import annotations

from runner import Agent
from runner.testing import ScriptedModel, text
from tests.agents import JOURNAL

quick_model = ScriptedModel("triggered-quick", lambda request: text("done"), journal=JOURNAL)
Agent(name="triggered_quick", model=quick_model.model)

# Long enough that the next firings of an every-2-seconds schedule find it running.
slow_model = ScriptedModel(
    "triggered-slow", lambda request: text("done, slowly", latency=7), journal=JOURNAL
)
Agent(name="triggered_slow", model=slow_model.model)
