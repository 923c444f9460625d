"""Agents that ask people more than yes or no (issue 29), for the command line,
observability and notifier tests: an approval-gated refund whose arguments a
person may edit, a lookup that needs no approval, and the model's
``ask_human`` question.

What the model does comes from the trigger's payload: ``{"plan": [step, ...]}``
where each step is a list of ``[tool, arguments]`` calls; after the plan it
answers ``done``. So one agent serves every test, and a CLI process that loads
this module (``RUNWRIGHT_AGENTS``) can fork its runs.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any, Literal

import pydantic

from runner import Agent, Budget, effect, tool
from runner.testing import Request, ScriptedModel, call, text, tools

REFUNDS: list[tuple[int, str]] = []
_lock = threading.Lock()


@effect
def refund(
    amount: Annotated[int, pydantic.Field(ge=1, le=1000)], idempotency_key: str
) -> dict[str, Any]:
    """Refund money to the customer."""
    with _lock:
        REFUNDS.append((amount, idempotency_key))
    return {"refunded": amount}


@tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: paid"


def planned(request: Request) -> Any:
    plan = (request.payload or {}).get("plan") or []
    if request.step <= len(plan):
        return tools(*(call(name, arguments) for name, arguments in plan[request.step - 1]))
    return text("done")


class Choice(pydantic.BaseModel):
    """What to do with the order."""

    action: Literal["refund", "replace"]
    note: str = ""


def plan(*steps: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """A trigger payload whose model makes these calls, one list per step."""
    return {"plan": [[[name, arguments] for name, arguments in step] for step in steps]}


PEOPLE = "planned"  # a text question, refunds approved by a person
STRICT = "planned-strict"  # a denial ends the run
CHOICE = "planned-choice"  # a structured question
LIMITED = "planned-limited"  # two steps at most, so a third call fails the run

_model = ScriptedModel("planned", planned)
Agent(
    name=PEOPLE,
    model=_model.model,
    tools=[refund, lookup],
    approvals={"refund": True},
    ask_human=True,
)
Agent(
    name=STRICT,
    model=ScriptedModel("planned-strict", planned).model,
    tools=[refund, lookup],
    approvals={"refund": True},
    on_deny="fail",
)
Agent(
    name=CHOICE,
    model=ScriptedModel("planned-choice", planned).model,
    tools=[refund],
    approvals={"refund": True},
    ask_human=Choice,
)
Agent(
    name=LIMITED,
    model=ScriptedModel("planned-limited", planned).model,
    tools=[refund],
    approvals={"refund": True},
    budget=Budget(max_steps=2),
)
