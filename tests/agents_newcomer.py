"""An agent that only "new" workers load, for the rolling-deploy test
(issue 10, item 12)."""

from __future__ import annotations

from runner import Agent
from runner.testing import ScriptedModel, text
from tests.agents import JOURNAL

newcomer_model = ScriptedModel("newcomer", [text("done by a new worker")], journal=JOURNAL)
Agent(name="newcomer", model=newcomer_model.model)
