"""Agents whose people do more than approve, for the tests that run them on
real workers (issue 29): two gated refunds and a question in one step, and
a tool a person approves for the rest of the run.

The model's last reply is what it was sent of each call (its arguments and
its result), so the run's output shows the test what reached the model."""

from __future__ import annotations

import json
from typing import Any

from runner import Agent, Budget, effect
from runner.testing import Reply, Request, call, text, tools
from runner.testing import ScriptedModel as Scripted
from tests.agents import JOURNAL, log_effect


@effect
def pay_back(amount: int, idempotency_key: str) -> dict[str, Any]:
    """Pay money back to the customer (at most once)."""
    log_effect("pay_back", key=idempotency_key, amount=amount)
    return {"paid_back": amount}


@effect
def note_ticket(text: str, idempotency_key: str) -> dict[str, Any]:
    """Add a note to the ticket (at most once)."""
    log_effect("note_ticket", key=idempotency_key, text=text)
    return {"noted": True}


def what_it_saw(request: Request) -> str:
    """Each call of the conversation, with the arguments and the result the
    model was sent, by call id."""
    made = {
        c["id"]: json.loads(c["function"]["arguments"])
        for m in request.messages
        if m.get("role") == "assistant"
        for c in m.get("tool_calls") or ()
    }
    results = {m["tool_call_id"]: m["content"] for m in request.tool_results()}
    return json.dumps({"calls": made, "results": results})


def _parallel(request: Request) -> Reply:
    if request.step == 1:
        return tools(
            call("pay_back", {"amount": 1}, id="c_one"),
            call("pay_back", {"amount": 2}, id="c_two"),
            call("ask_human", {"question": "Which colour do they want?"}, id="c_ask"),
            call("note_ticket", {"text": "asked"}, id="c_note"),
        )
    # Slow enough that a worker can be killed while it answers.
    return text(what_it_saw(request), latency=3)


parallel_model = Scripted("people-parallel", _parallel, journal=JOURNAL)
Agent(
    name="people_parallel",
    model=parallel_model.model,
    tools=[pay_back, note_ticket],
    approvals={"pay_back": True},
    ask_human=True,
)


def _standing(request: Request) -> Reply:
    if request.step <= 4:
        return tools(call("pay_back", {"amount": 10 * request.step}, id=f"c_{request.step}"))
    return text(what_it_saw(request))


standing_model = Scripted("people-standing", _standing, journal=JOURNAL)
# Three steps: the fourth call comes only after a retry with more steps.
Agent(
    name="people_standing",
    model=standing_model.model,
    tools=[pay_back],
    approvals={"pay_back": True},
    budget=Budget(max_steps=3),
)
