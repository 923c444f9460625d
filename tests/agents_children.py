"""Agents that delegate, for the tests that run them on real workers: a lead
whose first step hands work to two child agents at once (issue 28)."""

from __future__ import annotations

import pydantic

from runner import Agent, Budget, effect, tool
from runner.testing import Reply, Request, ScriptedModel, call, output, text, tools
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

# A child whose refund waits for a person, under a lead: the inbox shows it
# with its parent.


@effect
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


refunder_model = ScriptedModel(
    "kids-refunder",
    [tools(call("refund", {"order": "A1"}, id="c_refund")), text("refunded A1")],
    journal=JOURNAL,
)
refunder = Agent(
    name="kids_refunder", model=refunder_model.model, tools=[refund], approvals={"refund": True}
)
approval_lead_model = ScriptedModel(
    "kids-approval-lead",
    [tools(call("kids_refunder", {"task": "refund A1"}, id="c_refunder")), text("handled")],
    journal=JOURNAL,
)
Agent(name="kids_approval_lead", model=approval_lead_model.model, tools=[refunder.as_tool()])


# Two priced children under a lead whose cost budget they exceed together:
# each step costs $0.001 (1,000 input tokens at $1e-6), a child $0.004.
def _spend(request: Request) -> Reply:
    if request.step < 4:
        return tools(call("kids_noop", {}), usage=(1000, 0), latency=0.3)
    return text("spent", usage=(1000, 0))


@tool
def kids_noop() -> str:
    """Nothing."""
    return "ok"


spender_model = ScriptedModel("kids-spender", _spend, journal=JOURNAL, price=(1e-6, 0.0))
spender = Agent(name="kids_spender", model=spender_model.model, tools=[kids_noop])
budget_lead_model = ScriptedModel(
    "kids-budget-lead",
    [
        tools(
            call("kids_spender", {"task": "a"}, id="c_a"),
            call("kids_spender_too", {"task": "b"}, id="c_b"),
        ),
        text("never"),
    ],
    journal=JOURNAL,
)
Agent(
    name="kids_budget_lead",
    model=budget_lead_model.model,
    tools=[spender.as_tool(), spender.as_tool(name="kids_spender_too")],
    budget=Budget(max_cost_usd=0.006),
)


# Eight children side by side under a lead's token budget (issue 48): each
# step of a child calls a tool, its model taking half a second and reporting
# no usage, so that the tokens are litellm's count of the request and the
# reply, as the reservation made before the call counts them; a reply is
# capped at 50 tokens (model_settings), the call's expected output.
def _sip(request: Request) -> Reply:
    return tools(call("kids_noop", {}), usage=None, latency=0.5)


sipper_model = ScriptedModel("kids-sipper", _sip, journal=JOURNAL)
sipper = Agent(
    name="kids_sipper",
    model=sipper_model.model,
    tools=[kids_noop],
    model_settings={"max_tokens": 50},
    budget=Budget(max_steps=30),
)
FANOUT = 8
FANOUT_BUDGET = 600
fanout_lead_model = ScriptedModel(
    "kids-fanout-lead",
    [
        tools(
            *(call("kids_sipper", {"task": f"part {i}"}, id=f"c_{i}") for i in range(FANOUT)),
            usage=None,
        ),
        text("never"),
    ],
    journal=JOURNAL,
)
Agent(
    name="kids_fanout_lead",
    model=fanout_lead_model.model,
    tools=[sipper.as_tool()],
    budget=Budget(max_tokens=FANOUT_BUDGET),
)
