"""Agents that delegate, for the tests that run them on real workers: a lead
whose first step hands work to two child agents at once (issue 28)."""

from __future__ import annotations

import pydantic

from runner import Agent
from runner.testing import ScriptedModel, call, output, text, tools
from tests.agents import JOURNAL


class Findings(pydantic.BaseModel):
    topic: str
    sources: int


# Each child takes its time (its model answers in 3 s), so that the two are
# seen running side by side, and a worker can die while they run.
research_model = ScriptedModel(
    "kids-research",
    lambda request: output({"topic": "tides", "sources": 4}, latency=3),
    journal=JOURNAL,
)
research = Agent(name="kids_research", model=research_model.model, output=Findings)

draft_model = ScriptedModel(
    "kids-draft", lambda request: text("a draft about tides", latency=3), journal=JOURNAL
)
draft = Agent(name="kids_draft", model=draft_model.model)

lead_model = ScriptedModel(
    "kids-lead",
    [
        tools(
            call("kids_research", {"task": "find sources on tides"}, id="c_research"),
            call("kids_draft", {"task": "draft the piece"}, id="c_draft"),
        ),
        text("both are in"),
    ],
    journal=JOURNAL,
)
Agent(name="kids_lead", model=lead_model.model, tools=[research.as_tool(), draft.as_tool()])

# Children that take a while, for a cancel to find them running; and a
# detached one that runs on when its parent is cancelled.
slow_model = ScriptedModel(
    "kids-slow", lambda request: text("finally", latency=30), journal=JOURNAL
)
slow = Agent(name="kids_slow", model=slow_model.model)

cancel_lead_model = ScriptedModel(
    "kids-cancel-lead",
    [
        tools(
            call("kids_slow", {"task": "one"}, id="c_one"),
            call("kids_slow_too", {"task": "two"}, id="c_two"),
            call("kids_draft", {"task": "draft anyway"}, id="c_detached"),
        ),
        text("never"),
    ],
    journal=JOURNAL,
)
Agent(
    name="kids_cancel_lead",
    model=cancel_lead_model.model,
    tools=[slow.as_tool(), slow.as_tool(name="kids_slow_too"), draft.as_tool(detached=True)],
)

# For the resume benchmark (bench/children.py): a child that answers at once,
# and a lead that hands it one task.
quick_model = ScriptedModel("kids-quick", lambda request: text("done"), journal=JOURNAL)
quick = Agent(name="kids_quick", model=quick_model.model)

quick_lead_model = ScriptedModel(
    "kids-quick-lead",
    [tools(call("kids_quick", {"task": "now"}, id="c_quick")), text("thanks")],
    journal=JOURNAL,
)
Agent(name="kids_quick_lead", model=quick_lead_model.model, tools=[quick.as_tool()])
